"""manage.py discard_run NAME --reason "...": a test run and what it made, out of the record (incidents.services.
run_discard); recorded on the audit log (RunDiscard, and an entry on each of its incidents' timelines)."""

import getpass

from django.core.management.base import BaseCommand, CommandError

from incidents import services
from runs.models import Run


class Command(BaseCommand):
    help = (
        "Discard a test run: delete its events, attempts, interruptions and checkpoints, close and discard its "
        "incidents (their timelines stay), and record who did it and why."
    )

    def add_arguments(self, parser):
        parser.add_argument("run", help="The run's name.")
        parser.add_argument("--reason", required=True, help="Why (it goes on the audit log), e.g. 'README example'.")

    def handle(self, *args, run, reason, **options):
        found = Run.objects.filter(name=run).first()
        if found is None:
            raise CommandError(f"run: no run named {run!r}")
        actor = services.Actor(None, f"command:{getpass.getuser()}")
        try:
            discard = services.run_discard(run=found, actor=actor, reason=reason)
        except services.IncidentError as exc:
            raise CommandError(f"reason: {exc}") from exc
        removed = ", ".join(f"{n:,} {what}" for what, n in discard.removed.items())
        self.stdout.write(f"Discarded run {discard.run_name}: {removed}. On the audit log as #{discard.pk}.")
