"""The weekly reliability report stored (one row per window, replaced when regenerated) and e-mailed."""

from datetime import datetime

from django.core.mail import EmailMessage
from django.template.loader import render_to_string

from incidents.models import WeeklyReport
from incidents.reports import rendering
from incidents.reports.selectors import report_build


def report_generate(*, since: datetime, until: datetime, now: datetime) -> WeeklyReport:
    """Build and store the report of [since, until); running it twice for a window replaces the first."""
    report, _created = WeeklyReport.objects.update_or_create(
        since=since,
        until=until,
        defaults={"generated_at": now, "data": report_build(since=since, until=until, now=now)},
    )
    return report


def report_email(*, report, recipients: list[str]) -> None:
    """The headline numbers in the body, the numbers as CSV attached (Django's mail settings)."""
    body = render_to_string("incidents/report_email.txt", {"report": report, "data": report.data})
    message = EmailMessage(
        subject=f"FleetOps reliability report {report.since:%Y-%m-%d} to {report.until:%Y-%m-%d}",
        body=body,
        to=recipients,
    )
    message.attach(rendering.report_filename(report, "csv"), rendering.report_csv(report.data), "text/csv")
    message.send()
