"""Who acts on an incident, and the timeline entry (the audit log) every change writes."""

from dataclasses import dataclass
from datetime import datetime

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


def action_refused(*, incident: Incident, actor: Actor, action: str) -> TimelineEntry:
    """The only trace a refused action leaves: an audit entry naming who tried what."""
    return _entry(
        incident, kind="refused", actor=actor, text=f"{actor.name} may not {action}: refused", data={"action": action}
    )
