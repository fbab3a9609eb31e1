from django.core.management.base import BaseCommand

from runs.models import Event
from runs.services import quarantined_replay


class Command(BaseCommand):
    help = "Apply quarantined events again after a fix (all, or the ids given); those still failing stay quarantined."

    def add_arguments(self, parser):
        parser.add_argument("ids", nargs="*", type=int, help="event ids (default: every quarantined event)")

    def handle(self, *args, **options):
        ids = options["ids"] or None
        applied = quarantined_replay(event_ids=ids)
        left = Event.objects.filter(quarantined_at__isnull=False).count()
        self.stdout.write(f"Applied {applied} events; {left} still quarantined.")
