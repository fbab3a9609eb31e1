from django.core.management.base import BaseCommand

from runs.services import record_rebuild


class Command(BaseCommand):
    help = "Throw away the derived fleet record and fold the whole event log in again."

    def handle(self, *args, **options):
        applied = record_rebuild()
        self.stdout.write(f"Applied {applied} events.")
