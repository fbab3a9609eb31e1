"""People's actions on an incident, each on the audit log, and quiet incidents resolved by themselves."""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, Max, OuterRef, Q
from django.utils import timezone

from incidents.models import Alert, Incident, Postmortem, Preference, TimelineEntry
from incidents.postmortems.services import postmortem_draft
from incidents.selectors import incident_impact
from incidents.services.severity import _SEVERITIES, _by_rank, _severity
from incidents.services.timeline import FLEETOPS, Actor, IncidentError, _entry, _locked, _when


@transaction.atomic
def incident_acknowledge(*, incident: Incident, actor: Actor, at: datetime | None = None) -> Incident:
    """`at`: when the person acknowledged, where that is known and earlier than now (a pager's record); else now."""
    incident = _locked(incident)
    if not incident.is_open or incident.acknowledged_at is not None:
        raise IncidentError(f"This incident is {incident.status} and cannot be acknowledged again.")
    # Automation may have mitigated it already: a person still takes it on, and MTTA counts that moment.
    if incident.status == Incident.Status.TRIGGERED:
        incident.status = Incident.Status.ACKNOWLEDGED
    incident.acknowledged_at = _when(at)
    if incident.commander_id is None and actor.user is not None:
        incident.commander = actor.user
    incident.save(update_fields=["status", "acknowledged_at", "commander"])
    _entry(
        incident, kind="acknowledged", actor=actor, at=incident.acknowledged_at, text=f"Acknowledged by {actor.name}"
    )
    return incident


@transaction.atomic
def incident_assign(*, incident: Incident, actor: Actor, assignee) -> Incident:
    incident = _locked(incident)
    incident.assignees.add(assignee)
    _entry(incident, kind="assigned", actor=actor, text=f"Assigned to {assignee.get_username()}")
    return incident


@transaction.atomic
def incident_commander_set(*, incident: Incident, actor: Actor, commander) -> Incident:
    incident = _locked(incident)
    incident.commander = commander
    incident.save(update_fields=["commander"])
    _entry(incident, kind="assigned", actor=actor, text=f"{commander.get_username()} is incident commander")
    return incident


@transaction.atomic
def incident_escalate(*, incident: Incident, actor: Actor, reason: str = "") -> Incident:
    """One severity level up, fixed by a person from now on."""
    incident = _locked(incident)
    position = _SEVERITIES.index(incident.severity)
    if position == 0:
        raise IncidentError("This incident is already SEV1.")
    return _severity_set(incident, actor, _SEVERITIES[position - 1], reason or "escalated", kind="escalated")


@transaction.atomic
def incident_severity_set(*, incident: Incident, actor: Actor, severity: str, reason: str) -> Incident:
    if severity not in _SEVERITIES:
        raise IncidentError(f"Severity must be one of {', '.join(_SEVERITIES)}.")
    return _severity_set(_locked(incident), actor, severity, reason, kind="severity")


def _severity_set(incident: Incident, actor: Actor, severity: str, reason: str, *, kind: str) -> Incident:
    before = incident.severity
    # What impact graded then, priced: automation moves a person's severity again only for impact graded worse.
    alerts = list(incident.alerts.all())
    firing = _by_rank(a for a in alerts if a.status == "firing")
    graded, _ = _severity(
        incident, firing[0] if firing else None, alerts, incident_impact(incident=incident, now=timezone.now())
    )
    incident.severity, incident.severity_overridden = severity, True
    incident.save(update_fields=["severity", "severity_overridden"])
    _entry(
        incident,
        kind=kind,
        actor=actor,
        text=f"Severity {before} → {severity}: {reason}",
        data={"from": before, "to": severity, "set_at_impact": graded},
    )
    return incident


@transaction.atomic
def incident_note_add(*, incident: Incident, actor: Actor, text: str) -> TimelineEntry:
    text = text.strip()
    if not text:
        raise IncidentError("A note needs some text.")
    return _entry(incident, kind="note", actor=actor, text=text[:10_000])


@transaction.atomic
def incident_resolve(
    *, incident: Incident, actor: Actor, override_reason: str = "", at: datetime | None = None
) -> Incident:
    """Resolve; refused while an attached alert still fires, unless the person gives a reason to override. `at` as
    for incident_acknowledge."""
    incident = _locked(incident)
    if not incident.is_open:
        raise IncidentError(f"This incident is {incident.status} already.")
    firing = incident.alerts.filter(status="firing").count()
    if firing and not override_reason.strip():
        raise IncidentError(f"{firing} alert(s) still firing: resolve them first, or give a reason to override.")
    incident.status, incident.resolved_at = Incident.Status.RESOLVED, _when(at)
    incident.save(update_fields=["status", "resolved_at"])
    text = f"Resolved by {actor.name}"
    if firing:
        text += f" with {firing} alert(s) still firing: {override_reason.strip()}"
    _entry(incident, kind="resolved", actor=actor, at=incident.resolved_at, text=text, data={"firing": firing})
    postmortem_draft(incident=incident, actor=FLEETOPS, now=incident.resolved_at)
    return incident


def incidents_auto_resolve(*, now: datetime, quiet_s: float) -> int:
    """Resolve, as FleetOps, each mitigated incident whose harm stopped and whose alerts have all cleared, once nothing
    has moved on it for `quiet_s` seconds (mitigation, its last alert's clearing or sighting). One a person reopened is
    left to people. Returns how many were resolved."""
    quiet = now - timedelta(seconds=quiet_s)
    reopened = TimelineEntry.objects.filter(incident=OuterRef("pk"), kind=TimelineEntry.Kind.REOPENED)
    moving = Alert.objects.filter(incident=OuterRef("pk")).filter(
        Q(status="firing") | Q(resolved_at__gt=quiet) | Q(last_seen_at__gt=quiet)
    )
    due = Incident.objects.filter(status=Incident.Status.MITIGATED, mitigated_at__lte=quiet).filter(
        ~Exists(reopened), ~Exists(moving)
    )
    last_moved = due.annotate(cleared=Max("alerts__resolved_at"), seen=Max("alerts__last_seen_at"))
    resolved = 0
    for pk, cleared, seen in last_moved.order_by("pk").values_list("pk", "cleared", "seen"):
        with transaction.atomic():
            incident = _locked(Incident(pk=pk))
            if incident.status != Incident.Status.MITIGATED:
                continue
            # Resolved as of when it fell due, the quiet period after the last thing that moved on it, not when the
            # sweep came round: a history replayed days later resolves at the live stream's moment.
            quiet_since = max(t for t in (incident.mitigated_at, cleared, seen) if t is not None)
            at = min(quiet_since + timedelta(seconds=quiet_s), now)
            incident.status, incident.resolved_at = Incident.Status.RESOLVED, at
            incident.save(update_fields=["status", "resolved_at"])
            text = (
                f"Resolved by FleetOps: the harm stopped at {incident.mitigated_at:%Y-%m-%d %H:%M} UTC and every alert "
                f"has cleared, quiet for {quiet_s / 60:,.0f} min since {quiet_since:%Y-%m-%d %H:%M} UTC "
                "(INCIDENT_AUTO_RESOLVE_S)"
            )
            _entry(incident, kind="resolved", at=at, text=text)
            postmortem_draft(incident=incident, actor=FLEETOPS, now=at)
            resolved += 1
    return resolved


@transaction.atomic
def incident_close(*, incident: Incident, actor: Actor, at: datetime | None = None) -> Incident:
    """Resolved -> closed: the write-up is done. Needs the postmortem reviewed, except for SEV4."""
    incident = _locked(incident)
    if incident.status != Incident.Status.RESOLVED:
        raise IncidentError(f"Only a resolved incident can be closed; this one is {incident.status}.")
    postmortem = Postmortem.objects.filter(incident=incident).first()
    if incident.severity != Incident.Severity.SEV4 and (postmortem is None or postmortem.reviewed_at is None):
        raise IncidentError(f"A {incident.severity} incident closes only once its postmortem is marked reviewed.")
    incident.status, incident.closed_at = Incident.Status.CLOSED, _when(at)
    incident.save(update_fields=["status", "closed_at"])
    _entry(incident, kind="closed", actor=actor, at=incident.closed_at, text=f"Closed by {actor.name}")
    return incident


@transaction.atomic
def incident_reopen(*, incident: Incident, actor: Actor, reason: str = "") -> Incident:
    incident = _locked(incident)
    if incident.status != Incident.Status.RESOLVED:
        raise IncidentError("Only a resolved incident can be reopened.")
    if Incident.objects.filter(group_key=incident.group_key, status__in=Incident.OPEN).exists():
        raise IncidentError("Another open incident already covers this group; continue there.")
    incident.status, incident.resolved_at = Incident.Status.ACKNOWLEDGED, None
    incident.save(update_fields=["status", "resolved_at"])
    _entry(incident, kind="reopened", actor=actor, text=f"Reopened by {actor.name}" + (f": {reason}" if reason else ""))
    return incident


def time_zone_set(*, user, zone: str) -> None:
    """The zone the person's pages show times in from their next request, on every device (read each request)."""
    Preference.objects.update_or_create(user=user, defaults={"time_zone": zone})
