from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from incidents.reports.services import report_generate
from runs.domain.utcdays import week_before


def _moment(text: str) -> datetime:
    """A date (midnight UTC) or an ISO timestamp; a timestamp without a zone is UTC."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Generate the reliability report of [--since, --until) (default: the last full ISO week, UTC)."

    def add_arguments(self, parser):
        parser.add_argument("--since", type=_moment)
        parser.add_argument("--until", type=_moment)

    def handle(self, *args, since=None, until=None, **options):
        now = timezone.now()
        default_since, default_until = week_before(now)
        since, until = since or default_since, until or default_until
        if until <= since:
            raise CommandError("--until must be after --since")
        report = report_generate(since=since, until=until, now=now)
        self.stdout.write(f"report {report.pk}: {since.isoformat()} to {until.isoformat()}")
