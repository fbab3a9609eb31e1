"""An incident's severity graded from its impact (docs/DOMAIN.md section 6) and its recommended action,
kept up to date as alerts come and go and while an outage lasts."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from incidents.domain.alert_kinds import RUN_STOPS
from incidents.domain.response import more_severe, severity_from_impact
from incidents.models import Alert, Incident
from incidents.selectors import cost_per_minute_usd, incident_impacts_get
from incidents.services.timeline import _entry
from runs.models import Interruption

_ALERT_RANK = {"critical": 0, "error": 1, "warning": 2, "info": 3}


_SEVERITIES = ("SEV1", "SEV2", "SEV3", "SEV4")


def incident_refresh(*, incident: Incident, at: datetime | None = None, impact=None) -> None:
    """Recompute the recommended action from its alerts and the severity from impact. Without `impact` (each alert
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
        graded, why = _severity(incident, firing[0] if firing else None, alerts, impact)
        severity = _raised(incident, graded)
        if severity != incident.severity:
            # Set first: the entry's notifications describe the incident as it is (a mail said "[SEV4] ... SEV4 →
            # SEV2").
            before, incident.severity = incident.severity, severity
            _entry(
                incident,
                kind="severity",
                at=at,
                text=f"Severity {before} → {severity} from impact: {why}",
                data={"from": before, "to": severity, "impact": graded},
            )
            fields.append("severity")
        if fields:
            incident.save(update_fields=fields)


def _by_rank(alerts) -> list[Alert]:
    """Alerts, the most severe first (critical, error, warning, info)."""
    return sorted(alerts, key=lambda a: _ALERT_RANK.get(a.severity, 3))


def _severity(incident: Incident, worst: Alert | None, alerts: list[Alert], impact=None) -> tuple[str, str]:
    """The severity the incident's impact grades (docs/DOMAIN.md section 6), and why in words. From the record, not
    the moment: the GPUs its faults idled (now or before), the GPU-hours they lost so far, the runs its faults hit;
    so a replay grades an incident as the live stream did once it was over. Without `impact`: the alerts' grade."""
    run = incident.run
    if impact is None:
        faulted = run is not None and any(a.kind in RUN_STOPS for a in alerts)
        gpus, lost, runs = (run.gpu_count if faulted else 0), None, int(run is not None)
    else:
        gpus, lost, runs = impact.gpus_idled, impact.gpu_hours_lost, _runs_affected(incident)
    severity = severity_from_impact(
        gpus_idle=gpus,
        runs_affected=runs,
        gpu_hours_lost=lost or 0.0,
        cost_per_minute_usd=cost_per_minute_usd(gpus),
        sev1_usd_per_min=settings.INCIDENT_SEV1_USD_PER_MIN,
        sev2_usd_per_min=settings.INCIDENT_SEV2_USD_PER_MIN,
    )
    lost_words = "" if lost is None else f", {lost:,.1f} GPU-h lost"
    why = f"{gpus:,} GPUs idled{lost_words}, {runs} run(s) affected"
    if worst is not None and worst.severity == "critical" and severity == "SEV4":
        severity, why = "SEV3", why + ", a critical alert"  # a critical hardware fault is worth a look before it hurts
    return severity, why


def _runs_affected(incident: Incident) -> int:
    """Its run, and the other runs a fault on its nodes stopped within the grouping window of its start (one switch
    or node taking two jobs down): what the "two runs" rule counts."""
    window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
    others = Interruption.objects.filter(
        planned=False,
        node__in=incident.nodes.all(),
        fault_at__gte=incident.started_at - window,
        fault_at__lte=incident.started_at + window,
    ).values_list("run_id", flat=True)
    return len({incident.run_id, *others} - {None})


def _raised(incident: Incident, graded: str) -> str:
    """What the incident's severity becomes for `graded`: never lower (the worst it was stays, so a mitigated
    incident keeps the severity its outage earned); once someone set it by hand, moved only by impact graded worse
    than it was when they did (their timeline entry keeps that grade)."""
    if not incident.severity_overridden:
        return more_severe(incident.severity, graded)
    entry = incident.timeline.filter(data__has_key="set_at_impact").order_by("-at", "-id").first()
    at_setting = entry.data["set_at_impact"] if entry is not None else None
    if at_setting not in _SEVERITIES or _SEVERITIES.index(graded) >= _SEVERITIES.index(at_setting):
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
