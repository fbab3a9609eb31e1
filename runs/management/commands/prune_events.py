from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.retention import events_prune


class Command(BaseCommand):
    help = (
        "Retention: sum raw high-rate events (rank step times and gradient norms, GPU health, heartbeats) older "
        "than the retention age into daily rollups, then delete them in bounded batches (what the hourly beat does)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--days",
            type=int,
            default=settings.EVENTS_RAW_RETENTION_DAYS,
            help="Keep raw samples this many days (default: EVENTS_RAW_RETENTION_DAYS).",
        )
        parser.add_argument(
            "--batch",
            type=int,
            default=settings.EVENTS_PRUNE_BATCH,
            help=f"Most events deleted in one transaction (default {settings.EVENTS_PRUNE_BATCH}).",
        )

    def handle(self, *args, days, batch, **options):
        if days < 1:
            raise CommandError("--days must be at least 1: the detectors read the last hours of samples")
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        result = events_prune(now=timezone.now(), older_than=timedelta(days=days), batch_size=batch)
        self.stdout.write(
            f"Pruned {result.deleted} raw events older than {days} days in {result.batches} batches "
            f"({result.rollups} daily rollups written)."
        )
