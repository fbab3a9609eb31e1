"""`make run`: the web server and, beside it, a Celery worker with beat, so the embedded default does the whole job.

Without Redis the broker is a folder (settings.EMBEDDED_BROKER_DIR, kombu's filesystem transport), so nothing but
this command has to run: the worker applies events, runs the detectors' periodic sweeps (hangs, heartbeats,
stragglers, silent data corruption, lemons), resumes playbooks and retries deliveries with their countdowns, prunes
and writes the weekly report, on the schedule production's beat keeps (settings.CELERY_BEAT_SCHEDULE). Ctrl-C stops
both.
"""

import os
import subprocess
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve FleetOps with a Celery worker and beat beside it (the embedded default's whole job)."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args, addrport, **options):
        if settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError("Set CELERY_TASK_ALWAYS_EAGER=false: with a worker beside it, the web server queues.")
        worker = subprocess.Popen(self.worker_command(), env={**os.environ, "CELERY_TASK_ALWAYS_EAGER": "false"})
        self.stdout.write(f"Celery worker and beat started (pid {worker.pid}), queues: {', '.join(self.queues())}")
        try:
            call_command("runserver", addrport, use_reloader=False)
        finally:
            worker.terminate()
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()

    @staticmethod
    def queues() -> list[str]:
        return list(settings.FLEETOPS_QUEUES)

    def worker_command(self) -> list[str]:
        schedule = os.path.join(os.path.dirname(str(settings.EMBEDDED_BROKER_DIR)), "celerybeat-schedule")
        return [
            sys.executable, "-m", "celery", "-A", "fleetops", "worker", "--beat", f"--schedule={schedule}",
            "--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=WARNING",
            "-Q", ",".join(self.queues()),
        ]  # fmt: skip
