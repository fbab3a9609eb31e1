"""Alerts from Alertmanager and PagerDuty, recorded: each parsed alert (incidents/domain/intake.py) becomes a FleetOps
alert through services.finding_record, grouped into incidents like any detector's finding; a resolved one clears it.
An Alertmanager Xid alert is an occurrence, not a condition: counted once per firing episode, never cleared by
Alertmanager (docs/ARCHITECTURE.md, "Integrations").
"""

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from incidents import services
from incidents.domain.detectors import Finding
from incidents.domain.intake import AmAlert, PdEvent, rfc3339_time
from incidents.models import Alert, Incident
from runs.domain import trust
from runs.selectors import record_clusters


@dataclass
class IntakeResult:
    firing: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)


def out_of_bounds(
    bounds: trust.Bounds, subjects: list[tuple[str | None, str | None] | None], fingerprints: list[str]
) -> list[tuple[int, str, str]]:
    """(index, "node" or "run", why) for each alert outside the token's bounds (runs/domain/trust.py): the (node, run)
    its payload names (None: it names none, as an acknowledgement), and those of the firing FleetOps alert its
    fingerprint would resolve or acknowledge, so that a sender cannot clear or acknowledge the alert of a node it does
    not speak for by sending its fingerprint."""
    firing = Alert.objects.filter(fingerprint__in=set(fingerprints), status="firing")
    held = {fp: (node, run) for fp, node, run in firing.values_list("fingerprint", "node__hostname", "run__name")}
    named = [subject for subject in subjects if subject] + [held[fp] for fp in fingerprints if fp in held]
    node_clusters, run_clusters = record_clusters(
        hostnames={n for n, _ in named if n}, run_names={r for _, r in named if r}
    )
    found = []
    for index, (named_here, fingerprint) in enumerate(zip(subjects, fingerprints, strict=True)):
        for subject in (named_here, held.get(fingerprint)):
            crossed = subject and trust.subjects_crossed(
                bounds, node=subject[0], run=subject[1], node_clusters=node_clusters, run_clusters=run_clusters
            )
            if crossed:
                found.append((index, *crossed))
                break
    return found


def _record(finding: Finding, at: datetime) -> Alert:
    """finding_record, but a repeat notification of an alert that still fires is not a new occurrence."""
    again = Alert.objects.filter(fingerprint=finding.fingerprint, status="firing").exists()
    return services.finding_record(finding=finding, at=at, count=0 if again else 1)


def alertmanager_apply(alerts: list[AmAlert], *, now: datetime | None = None) -> IntakeResult:
    """Each alert recorded or resolved, in one transaction (all or nothing: Alertmanager resends the whole group on
    an error; and one commit, not one an alert). The firing ones are recorded together (services.findings_record: a
    repeat notification of an alert that still fires is not a new occurrence), and each incident touched is refreshed
    once at the end, so the cost grows with the alerts, a query or two each (a webhook carries up to 1,000).

    An Xid alert's notice, firing or resolved, is recorded as an occurrence of its episode (its startsAt): counted
    once however often Alertmanager sends it, and never resolving anything. Its resolved notice says only that the
    rule's window passed, not that the GPU is well; and it still tells of an episode this intake may have missed
    firing (FleetOps was down when it was sent)."""
    now = now or timezone.now()
    result = IntakeResult()
    resolved = [alert for alert in alerts if alert.resolved(now) and alert.xid is None]
    firing = [alert for alert in alerts if not alert.resolved(now)]
    to_record = [a for a in alerts if not a.resolved(now) or (a.xid is not None and a.starts_at is not None)]
    with transaction.atomic():
        touched = set(
            Alert.objects.filter(fingerprint__in=[a.fingerprint for a in resolved], status="firing").values_list(
                "incident_id", flat=True
            )
        )
        for alert in resolved:
            services.alerts_resolve(
                at=min(alert.ends_at or now, now),
                reason="resolved in Alertmanager",
                fingerprint=alert.fingerprint,
                refresh=False,
            )
            result.resolved.append(alert.fingerprint)
        findings = [(alert.finding(), min(alert.starts_at or now, now)) for alert in to_record]
        touched |= {alert.incident_id for alert in services.findings_record(findings=findings)}
        result.firing = [alert.fingerprint for alert in firing]
        for incident in Incident.objects.filter(pk__in=touched).order_by("pk"):
            services.incident_refresh(incident=incident, at=now)
    return result


def pagerduty_apply(event: PdEvent, *, actor: services.Actor, now: datetime | None = None) -> None:
    now = now or timezone.now()
    if event.action == "trigger":
        at = rfc3339_time(event.payload["timestamp"]) if event.payload.get("timestamp") else None
        _record(event.finding(), at=min(at or now, now))
    elif event.action == "resolve":
        services.alerts_resolve(
            at=now, reason=f"resolved by a PagerDuty event ({actor.name})", fingerprint=event.fingerprint
        )
    else:
        alert = Alert.objects.filter(fingerprint=event.fingerprint, status="firing").select_related("incident").first()
        if alert is None:
            return  # like PagerDuty: acknowledging what is not open is accepted and does nothing
        try:
            services.incident_acknowledge(incident=alert.incident, actor=actor)
        except services.IncidentError:
            pass  # already acknowledged (or closed): nothing to do
