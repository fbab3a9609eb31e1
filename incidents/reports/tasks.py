"""The weekly reliability report as a Celery task: beat runs it Mondays 00:00 UTC for the week before.

Safe to run twice: report_generate replaces the window's report rather than adding a second one.
"""

import csv
import io
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import OperationalError
from django.template.loader import render_to_string
from django.utils import timezone

from incidents.domain.report import week_before
from incidents.reports.services import report_csv_rows, report_generate

_RETRY = {"acks_late": True, "autoretry_for": (OperationalError,), "retry_backoff": 2, "max_retries": 5}


@shared_task(name="incidents.report_tasks.generate_weekly_report", **_RETRY)
def generate_weekly_report(since: str | None = None, until: str | None = None) -> int:
    """Generate (or regenerate) the report of [since, until), ISO timestamps; by default the last full ISO week.

    E-mails it when settings.WEEKLY_REPORT_RECIPIENTS lists anyone. Returns the report's id.
    """
    now = timezone.now()
    default_since, default_until = week_before(now)
    report = report_generate(
        since=datetime.fromisoformat(since) if since else default_since,
        until=datetime.fromisoformat(until) if until else default_until,
        now=now,
    )
    recipients = getattr(settings, "WEEKLY_REPORT_RECIPIENTS", [])
    if recipients:
        report_email(report=report, recipients=recipients)
    return report.pk


def report_email(*, report, recipients: list[str]) -> None:
    """The headline numbers in the body, the numbers as CSV attached (Django's mail settings)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["section", "item", "metric", "value"])
    writer.writerows(report_csv_rows(report.data))
    body = render_to_string("incidents/report_email.txt", {"report": report, "data": report.data})
    message = EmailMessage(
        subject=f"FleetOps reliability report {report.since:%Y-%m-%d} to {report.until:%Y-%m-%d}",
        body=body,
        to=recipients,
    )
    message.attach(f"fleetops-report-{report.since:%Y-%m-%d}.csv", buffer.getvalue(), "text/csv")
    message.send()
