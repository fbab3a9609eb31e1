from datetime import timedelta

from django.core.management.base import BaseCommand

from runs.services import pending_events_apply


class Command(BaseCommand):
    help = "Apply stored events that no task has applied yet (what the periodic sweeper does)."

    def handle(self, *args, **options):
        total = 0
        while applied := pending_events_apply(older_than=timedelta(0)):
            total += applied
        self.stdout.write(f"Applied {total} events.")
