"""Who acts on an incident, and the timeline entry (the audit log) every change writes."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from incidents.models import Incident, TimelineEntry
from incidents.notifications import services as notifications

SYSTEM = "FleetOps"


class IncidentError(Exception):
    """An action the incident's state does not allow; the message says why, for the person who tried."""


@dataclass(frozen=True)
class Actor:
    """Who acts: a signed-in user, an API token ('token:<name>'), or FleetOps itself."""

    user: object | None
    name: str

    @classmethod
    def of_user(cls, user) -> "Actor":
        return cls(user, user.get_username())

    @classmethod
    def of_token(cls, token) -> "Actor":
        return cls(None, f"token:{token.name}")


FLEETOPS = Actor(None, SYSTEM)


def _entry(incident: Incident, *, kind: str, text: str, actor: Actor = FLEETOPS, at=None, data=None) -> TimelineEntry:
    entry = TimelineEntry.objects.create(
        incident=incident,
        at=at or timezone.now(),
        actor=actor.user,
        actor_name=actor.name,
        kind=kind,
        text=text,
        data=data or {},
    )
    # Every event passes here: the deliveries commit with the entry and are sent after (notifications.EVENT_OF_KIND).
    notifications.notify(entry)
    return entry


def timeline_add(*, incident: Incident, kind: str, text: str, actor: Actor = FLEETOPS, data=None) -> TimelineEntry:
    """For other services (the playbook engine) that report on an incident."""
    return _entry(incident, kind=kind, text=text, actor=actor, data=data)


def _when(at: datetime | None) -> datetime:
    """A person's action at `at` (never later than now), or now."""
    now = timezone.now()
    return now if at is None else min(at, now)


def _locked(incident: Incident) -> Incident:
    return Incident.objects.select_for_update().get(pk=incident.pk)


# A refusal repeated by the same person for the same action on the same incident within this many seconds adds
# nothing the audit log does not say already: a viewer's script retrying a bulk acknowledge of 200 incidents wrote
# 33,000 entries in 36 s.
REFUSAL_REPEAT_S = 600


def action_refused(*, incident: Incident, actor: Actor, action: str) -> TimelineEntry | None:
    """The only trace a refused action leaves: an audit entry naming who tried what (None: the same refusal is on
    the log from the last REFUSAL_REPEAT_S)."""
    return actions_refused(incidents=[incident], actor=actor, action=action).get(incident.pk)


def actions_refused(*, incidents: list[Incident], actor: Actor, action: str) -> dict[int, TimelineEntry]:
    """action_refused for many incidents at once (a bulk action), the repeats found in one query."""
    since = timezone.now() - timedelta(seconds=REFUSAL_REPEAT_S)
    repeated = set(
        TimelineEntry.objects.filter(
            incident__in=incidents, kind="refused", actor_name=actor.name, data__action=action, at__gte=since
        ).values_list("incident_id", flat=True)
    )
    text = f"{actor.name} may not {action}: refused"
    return {
        incident.pk: _entry(incident, kind="refused", actor=actor, text=text, data={"action": action})
        for incident in incidents
        if incident.pk not in repeated
    }
