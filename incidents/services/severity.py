"""An incident's severity graded from its impact (docs/DOMAIN.md section 6) and its recommended action,
kept up to date as alerts come and go and while an outage lasts."""

from dataclasses import asdict
from datetime import datetime

from django.db import transaction

from incidents.domain.severity import SEVERITIES, more_severe
from incidents.models import Alert, Incident
from incidents.selectors import incident_impacts_get
from incidents.selectors.severity import incident_grade_get
from incidents.services.timeline import _entry

_ALERT_RANK = {"critical": 0, "error": 1, "warning": 2, "info": 3}


def incident_refresh(*, incident: Incident, at: datetime | None = None, impact=None) -> None:
    """Recompute the recommended action from its alerts and the severity from impact (selectors.incident_grade_get),
    every change on the timeline with the threshold that moved it and the figures. Without `impact` (each alert
    opened or cleared) the grade is what the alerts say at once: a run's fault idles its GPUs; the minute sweep
    (incidents_reassess) prices the incident and grades the GPU-hours lost and the runs affected as well."""
    with transaction.atomic():
        # Under the row's lock, from the row as it is now: a person may have set the severity since it was read.
        fresh = Incident.objects.select_for_update().get(pk=incident.pk)
        incident.severity, incident.severity_overridden = fresh.severity, fresh.severity_overridden
        incident.recommended_action = fresh.recommended_action
        alerts = list(incident.alerts.order_by("first_seen_at"))
        firing = _by_rank(a for a in alerts if a.status == "firing")
        action = next((a.recommended_action for a in firing if a.recommended_action), incident.recommended_action)
        fields = []
        if action != incident.recommended_action:
            incident.recommended_action = action
            fields.append("recommended_action")
        graded = incident_grade_get(incident=incident, impact=impact, alerts=alerts)
        severity = _raised(incident, graded.severity)
        if severity != incident.severity:
            # Set first: the entry's notifications describe the incident as it is (a mail said "[SEV4] ... SEV4 →
            # SEV2").
            before, incident.severity = incident.severity, severity
            _entry(
                incident,
                kind="severity",
                at=at,
                text=f"Severity {before} → {severity} from impact: {graded.grade.because}; {graded.figures.words()}",
                data={
                    "from": before,
                    "to": severity,
                    "impact": graded.severity,
                    "because": graded.grade.because,
                    "figures": asdict(graded.figures),
                },
            )
            fields.append("severity")
        if fields:
            incident.save(update_fields=fields)


def _by_rank(alerts) -> list[Alert]:
    """Alerts, the most severe first (critical, error, warning, info)."""
    return sorted(alerts, key=lambda a: _ALERT_RANK.get(a.severity, 3))


def _raised(incident: Incident, graded: str) -> str:
    """What the incident's severity becomes for `graded`: never lower (the worst it was stays, so a mitigated
    incident keeps the severity its outage earned); once someone set it by hand, moved only by impact graded worse
    than it was when they did (their timeline entry keeps that grade)."""
    if not incident.severity_overridden:
        return more_severe(incident.severity, graded)
    entry = incident.timeline.filter(data__has_key="set_at_impact").order_by("-at", "-id").first()
    at_setting = entry.data["set_at_impact"] if entry is not None else None
    if at_setting not in SEVERITIES or SEVERITIES.index(graded) >= SEVERITIES.index(at_setting):
        return incident.severity
    return more_severe(incident.severity, graded)


def incidents_reassess(*, now: datetime) -> int:
    """Grade every open incident's severity again from its impact now (the GPU-hours an outage loses grow while it
    lasts), priced at once; returns how many changed."""
    opened = list(Incident.objects.filter(status__in=Incident.OPEN).select_related("run").order_by("pk"))
    impacts = incident_impacts_get(incidents=opened, now=now)
    changed = 0
    for incident in opened:
        before = incident.severity
        incident_refresh(incident=incident, at=now, impact=impacts[incident.pk])
        changed += incident.severity != before
    return changed
