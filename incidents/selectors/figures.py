"""Response metrics over a window, and the counts of playbooks and deliveries /metrics exports."""

from datetime import datetime

from django.db.models import Count

from incidents.domain.response import IncidentTimes, response_metrics
from incidents.models import Delivery, Incident, PlaybookExecution


def response_metrics_get(*, since: datetime, until: datetime) -> dict:
    times = [
        IncidentTimes(*row)
        for row in Incident.objects.filter(started_at__gte=since, started_at__lt=until).values_list(
            "started_at", "detected_at", "acknowledged_at", "mitigated_at", "resolved_at"
        )
    ]
    return response_metrics(times, since=since, until=until)


def playbook_counts_get() -> list[tuple[str, str, bool, int]]:
    """(playbook, status, dry_run, how many executions): /metrics' playbook outcomes."""
    rows = PlaybookExecution.objects.order_by().values_list("playbook", "status", "dry_run")
    return [tuple(row) for row in rows.annotate(n=Count("id")).order_by("playbook", "status", "dry_run")]


def delivery_counts_get() -> list[tuple[str, str, int]]:
    """(endpoint name, status, how many deliveries): /metrics' webhook delivery figures."""
    rows = Delivery.objects.order_by().values_list("endpoint__name", "status").annotate(n=Count("id"))
    return [tuple(row) for row in rows.order_by("endpoint__name", "status")]
