"""Automation's side of an incident: mitigated when its run trains again or its nodes can hurt no job, a
person paged when automation stops, a test run discarded with what it made."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from incidents.models import Alert, Incident, RunDiscard, TimelineEntry
from incidents.services.severity import _SEVERITIES, incident_refresh
from incidents.services.timeline import Actor, IncidentError, _entry, _locked
from runs.models import Event, Node, Run


def incident_mitigate(*, incident: Incident, text: str, at: datetime | None = None) -> None:
    """Mitigated by automation (a playbook put the job back on healthy hardware)."""
    with transaction.atomic():
        incident = _locked(incident)
        if incident.status not in (Incident.Status.TRIGGERED, Incident.Status.ACKNOWLEDGED):
            return
        incident.status, incident.mitigated_at = Incident.Status.MITIGATED, at or timezone.now()
        incident.save(update_fields=["status", "mitigated_at"])
        _entry(incident, kind="mitigated", at=incident.mitigated_at, text=text)


def incident_page_human(*, incident: Incident, why: str) -> None:
    """Automation stopped and a person must decide: escalate one level and say why on the timeline."""
    with transaction.atomic():
        incident = _locked(incident)
        position = _SEVERITIES.index(incident.severity)
        if position > 0:
            incident.severity = _SEVERITIES[position - 1]
            incident.save(update_fields=["severity"])
        _entry(incident, kind="paged", text=f"Paged a human: {why}")


def run_mitigated(*, run: Run, at: datetime, text: str) -> None:
    """The run trains again, or ended: its open, unmitigated incident that began by then is mitigated (a late event
    from before it began says nothing of it)."""
    for incident in Incident.objects.select_for_update().filter(
        run=run, status__in=[Incident.Status.TRIGGERED, Incident.Status.ACKNOWLEDGED], started_at__lte=at
    ):
        incident.status, incident.mitigated_at = Incident.Status.MITIGATED, at
        incident.save(update_fields=["status", "mitigated_at"])
        _entry(incident, kind="mitigated", at=at, text=text)
        incident_refresh(incident=incident, at=at)


OUT_OF_SERVICE = ("draining", "cordoned", "in_repair", "burn_in", "retired")  # a node that can hurt no job


BACK_IN_SERVICE = ("in_service", "hot_spare")


def nodes_mitigated(*, node: Node, at: datetime, state: str) -> None:
    """The node changed state: each open, unmitigated incident of nodes alone (no run) that holds it and began by
    then is mitigated once its harm stopped: every node of it out of service, or this one back with none of the
    incident's alerts still firing (healthy again)."""
    incidents = Incident.objects.select_for_update().filter(
        run=None, nodes=node, status__in=[Incident.Status.TRIGGERED, Incident.Status.ACKNOWLEDGED], started_at__lte=at
    )
    for incident in incidents:
        if state in OUT_OF_SERVICE:
            # This node as the event says (the record may have moved on since, in a replay); the others as they are.
            others = incident.nodes.exclude(pk=node.pk).values_list("state", flat=True)
            if any(other not in OUT_OF_SERVICE for other in others):
                continue
            text = f"{node.hostname} out of service ({state.replace('_', ' ')}): it can hurt no job"
        elif state in BACK_IN_SERVICE and not incident.alerts.filter(status="firing").exists():
            text = f"{node.hostname} back {state.replace('_', ' ')} with every alert cleared: healthy again"
        else:
            continue
        incident.status, incident.mitigated_at = Incident.Status.MITIGATED, at
        incident.save(update_fields=["status", "mitigated_at"])
        _entry(incident, kind="mitigated", at=at, text=text)


def run_discard(*, run: Run, actor: Actor, reason: str) -> RunDiscard:
    """Discard a test run and what it made: its events and its record (attempts, interruptions, checkpoints) are
    deleted, its incidents closed and discarded (out of every page and figure; their timelines, the audit log, keep
    them, with an entry saying who discarded them and why), and a RunDiscard row records it all. Nodes and clusters
    stay: they are the fleet's, whoever named them first."""
    if not reason.strip():
        raise IncidentError("Say why the run is discarded (a test, a mistake): the reason goes on the audit log.")
    with transaction.atomic():
        now = timezone.now()
        run = Run.objects.select_for_update().get(pk=run.pk)
        incidents = list(Incident.objects.select_for_update().filter(run=run).order_by("pk"))
        for incident in incidents:
            text = f"Discarded with its run {run.name} by {actor.name}: {reason.strip()}"
            _entry(incident, kind=TimelineEntry.Kind.DISCARDED, actor=actor, at=now, text=text)
            if incident.is_open:
                incident.status, incident.closed_at = Incident.Status.CLOSED, now
            incident.discarded_at = now
            incident.save(update_fields=["status", "closed_at", "discarded_at"])
        # Their alerts stop firing: one still firing would fold a new finding of the same fingerprint into itself,
        # out of sight on a discarded incident.
        Alert.objects.filter(incident__in=incidents, status="firing").update(status="resolved", resolved_at=now)
        events = Event.objects.filter(run_name=run.name)
        removed = {
            "events": events.count(),
            "attempts": run.attempts.count(),
            "interruptions": run.interruptions.count(),
            "checkpoints": run.checkpoints.count(),
            "incidents": len(incidents),
        }
        events.delete()
        name = run.name
        run.delete()
        return RunDiscard.objects.create(
            at=now, actor_name=actor.name, run_name=name, reason=reason.strip(), removed=removed
        )
