"""manage.py load_demo: the demo fleet (runs.domain.demo) through the event intake, then its people
(incidents.demo.services): a record with acknowledgements, resolutions, a reviewed postmortem, last week's report,
and, the first time, one fault left triggered a few minutes ago. Here, above both apps, because it drives both.

`make run` runs it at every start: loaded again it stores nothing twice, prints the same login, and leaves no new
fault unless asked (--fault, `make demo-fault`), since a restart is not something that happened to the fleet."""

import logging
from contextlib import contextmanager
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from incidents.demo.feed import demo_feed
from incidents.demo.login import demo_login
from incidents.demo.services import (
    LIVE_FAULT_AGO,
    demo_live_fault,
    demo_live_faults,
    demo_mail_endpoint,
    demo_people_act,
    mail_sink,
)
from runs.domain.demo import DEMO_CLUSTER, DEMO_DAYS, DEMO_MAX_OUT_SHARE, DEMO_RUN, demo_config
from runs.domain.simulator import simulate
from runs.management.commands.simulate import ingest
from runs.models import Cluster, Run


@contextmanager
def _quiet(logger_name: str):
    """Without a broker every apply task runs in-process and logs a line: the demo's dozens would bury the login."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


class Command(BaseCommand):
    help = (
        "Load a simulated run (256 GPUs, the last three weeks) through the event intake, answered by a simulated "
        "on-call rotation, with one fault left open now the first time; create the demo login."
    )

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--days", type=float, default=DEMO_DAYS, help=f"Days of history (default {DEMO_DAYS}).")
        parser.add_argument(
            "--login",
            action="store_true",
            help="Also create the demo superuser, its password made once and kept in settings.DEMO_LOGIN_FILE.",
        )
        parser.add_argument(
            "--fault",
            action="store_true",
            help="Leave a new fault open now, as the first load does; loaded again without it, the demo adds none. "
            "None while the last one is still open.",
        )
        parser.add_argument("--username", default="demo")

    def handle(self, *args, seed, days, login, fault, username, **options):
        now = timezone.now()
        # The history ends before the live fault, so the run's last steps do not follow its failure.
        history_end = now - LIVE_FAULT_AGO - timedelta(minutes=1)
        with _quiet("celery.app.trace"):
            delivery = ingest(simulate(demo_config(now=history_end, seed=seed, days=days)))
            run = Run.objects.get(name=DEMO_RUN)
            Cluster.objects.filter(name=DEMO_CLUSTER).update(max_out_share=DEMO_MAX_OUT_SHARE)
            # One fault open at a time: loaded again while the last one is still down, the demo adds none, and the
            # rotation leaves it to whoever opens the console.
            down_since = (
                run.interruptions.filter(planned=False, resumed_at__isnull=True)
                .order_by("fault_at")
                .values_list("fault_at", flat=True)
                .first()
            )
            # The rotation answers the history, never a fault the demo left for the person who opens the console.
            left = demo_live_faults()
            until = min(t for t in (history_end, down_since, left[0] if left else None) if t is not None)
            people = demo_people_act(now=now, until=until, seed=seed)
            attempt = run.attempts.order_by("-number").first()
            nodes = sorted(attempt.nodes.values_list("hostname", flat=True)) if attempt else []
            fresh = bool(nodes) and down_since is None and (fault or not left)
            mail = demo_mail_endpoint()  # before the live fault: its page goes out, the history's went long ago
            # Another seed for each: another node and GPU than the last one's.
            live = ingest(demo_live_fault(now=now, nodes=nodes, run=DEMO_RUN, seed=seed + len(left))) if fresh else None
            # The agents' heartbeats now: the history's last ones are minutes old, and a watchdog sweeping before
            # the feed's first minute (make run) would find every node silent.
            demo_feed(now=timezone.now())
        stored = delivery.stored + (live.stored if live else 0)
        duplicates = delivery.duplicates + (live.duplicates if live else 0)
        self.stdout.write(f"Demo fleet: {stored} events stored, {duplicates} already there.")
        self.stdout.write(
            f"Demo rotation: {people.acknowledged} incidents acknowledged, {people.resolved_by_fleetops} resolved by "
            f"FleetOps and {people.resolved_by_people} by people, {people.closed} postmortem reviewed and closed, "
            f"last week's report #{people.report_id}; " + self._fault_said(live, down_since)
        )
        self.stdout.write(f"Demo notifications: e-mail to {mail.url}, {mail_sink()}.")
        if login:
            password = demo_login(username=username)
            self.stdout.write(self.style.SUCCESS(f"Demo login: {username} / {password}"))

    @staticmethod
    def _fault_said(live, down_since) -> str:
        if live:
            return f"one fault {LIVE_FAULT_AGO.seconds // 60} min ago left open."
        if down_since is not None:
            return "the last fault is still open."
        return "no new fault (--fault, or `make demo-fault`, leaves one)."
