"""`make run`: the web server and, beside it, a Celery worker with beat, so the embedded default does the whole job.

Without Redis the broker is a folder (settings.EMBEDDED_BROKER_DIR, kombu's filesystem transport), so nothing but
this command has to run: the worker applies events, runs the detectors' periodic sweeps (hangs, heartbeats,
stragglers, silent data corruption, lemons), resumes playbooks and retries deliveries with their countdowns, prunes
and writes the weekly report, on the schedule production's beat keeps (settings.CELERY_BEAT_SCHEDULE).

Ctrl-C, SIGTERM (a process manager, `kill`) and SIGHUP (a closed terminal) stop both: the worker is asked to stop,
given STOP_GRACE_S to finish the task in hand, then its process group (it and beat) is killed. The worker has a
process group of its own, so that only this command signals it: Ctrl-C reaching it as well would be a second stop
request (Celery's cold shutdown), and a SIGHUP would restart it.
"""

import os
import signal
import subprocess
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_S = 10  # for the worker's task in hand; tasks are acks_late and safe to run twice, so a kill loses none


def _exit_on_signal(signum, frame):
    """SIGTERM and SIGHUP end the process at once by default, past every `finally`: as an exit they unwind through
    runserver to the one that stops the worker (SIGINT does already, as KeyboardInterrupt)."""
    raise SystemExit(128 + signum)


def stop_worker(worker: subprocess.Popen) -> None:
    """Ask the worker to stop (warm shutdown: it stops beat), wait up to STOP_GRACE_S, then kill its process group:
    whatever of it is left, beat included."""
    for signum in STOP_SIGNALS:  # a second Ctrl-C must not cut this short and leave the worker running
        signal.signal(signum, signal.SIG_IGN)
    worker.terminate()
    try:
        worker.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group is empty: the worker and beat have stopped
    worker.wait()


class Command(BaseCommand):
    help = "Serve FleetOps with a Celery worker and beat beside it (the embedded default's whole job)."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args, addrport, **options):
        if settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError("Set CELERY_TASK_ALWAYS_EAGER=false: with a worker beside it, the web server queues.")
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _exit_on_signal)
        worker = None
        try:
            worker = subprocess.Popen(
                self.worker_command(), env={**os.environ, "CELERY_TASK_ALWAYS_EAGER": "false"}, process_group=0
            )
            self.stdout.write(f"Celery worker and beat started (pid {worker.pid}), queues: {', '.join(self.queues())}")
            call_command("runserver", addrport, use_reloader=False)
        finally:
            if worker is not None:
                stop_worker(worker)

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
