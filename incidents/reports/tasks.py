"""The weekly reliability report as a Celery task: beat runs it Mondays 00:00 UTC for the week before.

Safe to run twice: report_generate replaces the window's report rather than adding a second one. Name pinned (name=),
as it was before incidents/ was split into packages.
"""

from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleetops.celery import retry_transient
from incidents.reports import services
from runs.domain.utcdays import week_before


@shared_task(name="incidents.report_tasks.generate_weekly_report", **retry_transient())
def generate_weekly_report(since: str | None = None, until: str | None = None) -> int:
    """Generate (or regenerate) the report of [since, until), ISO timestamps; by default the last full ISO week.

    E-mails it when settings.WEEKLY_REPORT_RECIPIENTS lists anyone. Returns the report's id.
    """
    now = timezone.now()
    default_since, default_until = week_before(now)
    report = services.report_generate(
        since=datetime.fromisoformat(since) if since else default_since,
        until=datetime.fromisoformat(until) if until else default_until,
        now=now,
    )
    recipients = getattr(settings, "WEEKLY_REPORT_RECIPIENTS", [])
    if recipients:
        services.report_email(report=report, recipients=recipients)
    return report.pk
