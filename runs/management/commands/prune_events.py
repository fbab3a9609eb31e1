from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.retention import events_prune, rank_hours_own


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
            "--rank-hours",
            type=int,
            help=(
                "Keep rank samples (step times, gradient norms) this many hours (default: EVENTS_RANK_RETENTION_HOURS "
                "where it gives them an age of their own, else --days x 24)."
            ),
        )
        parser.add_argument(
            "--batch",
            type=int,
            default=settings.EVENTS_PRUNE_BATCH,
            help=f"Most events deleted in one transaction (default {settings.EVENTS_PRUNE_BATCH}).",
        )

    def handle(self, *args, days, rank_hours, batch, **options):
        if days < 1:
            raise CommandError("--days must be at least 1: the detectors read the last hours of samples")
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        if rank_hours is None:
            rank_hours = rank_hours_own() or days * 24
        try:
            result = events_prune(
                now=timezone.now(),
                older_than=timedelta(days=days),
                rank_older_than=timedelta(hours=rank_hours),
                batch_size=batch,
            )
        except ValueError as exc:  # the rank age is under what the detectors read
            raise CommandError(f"--rank-hours {rank_hours}: {exc}") from exc
        ages = f"{days} days" if rank_hours == days * 24 else f"{days} days (rank samples {rank_hours} hours)"
        self.stdout.write(
            f"Pruned {result.deleted} raw events older than {ages} in {result.batches} batches "
            f"({result.rollups} daily rollups written)."
        )
