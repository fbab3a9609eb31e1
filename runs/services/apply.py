"""Claiming stored events a chunk at a time and folding them into the record; one that fails alone is
quarantined; the sweeper and the rebuild."""

import logging
from datetime import timedelta

from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from runs.domain.routes import ROUTES, Route
from runs.models import GPU, Event, Node, Run
from runs.services.appliers import (
    APPLIERS,
    FOLDED,
    _apply_readings,
    _apply_xids,
    _create_missing,
    _fold,
    _subjects,
    _XidTally,
)
from runs.services.lifecycle import run_lifecycle_rebuild

log = logging.getLogger(__name__)


APPLY_CHUNK = 500


def events_apply(*, event_ids: list[int]) -> int:
    """Fold stored events into the record; returns how many this call applied.

    Events another worker holds or has applied are skipped. Claim and effects share one transaction,
    so a crash leaves the event unapplied for the sweeper, never half-applied.
    """
    applied = 0
    for start in range(0, len(event_ids), APPLY_CHUNK):
        applied += _apply_isolating(event_ids[start : start + APPLY_CHUNK])
    return applied


# Errors that say nothing about the events: the database went away or a lock timed out. The task retries them.
TRANSIENT = (OperationalError, InterfaceError)


def _apply_isolating(event_ids: list[int]) -> int:
    """Apply a chunk; when it fails for a reason of its own (a bug, or a value the database refuses), apply its halves
    apart, down to the one event that fails alone, which is quarantined. So one bad event costs a few more
    transactions, never its chunk-mates or the events after it, and the sweeper never stops on it."""
    try:
        return _apply_chunk(event_ids)
    except TRANSIENT:
        raise
    except Exception as exc:
        if len(event_ids) == 1:
            _quarantine(event_ids[0], exc)
            return 0
        middle = len(event_ids) // 2
        return _apply_isolating(event_ids[:middle]) + _apply_isolating(event_ids[middle:])


def _quarantine(event_id: int, exc: Exception) -> None:
    now = timezone.now()
    error = f"{type(exc).__name__}: {exc}"[:2000]
    log.error("event %s failed to apply and is quarantined: %s", event_id, error)
    Event.objects.filter(pk=event_id, applied_at__isnull=True).update(applied_at=now, quarantined_at=now, error=error)


def quarantined_replay(*, event_ids: list[int] | None = None) -> int:
    """Apply quarantined events again (all, or those named), after a fix; returns how many applied this time. One
    that still fails is quarantined again with its new error."""
    rows = Event.objects.filter(quarantined_at__isnull=False)
    if event_ids is not None:
        rows = rows.filter(pk__in=event_ids)
    ids = list(rows.order_by("time", "id").values_list("pk", flat=True))
    Event.objects.filter(pk__in=ids).update(applied_at=None, quarantined_at=None, error="")
    return events_apply(event_ids=ids)


def _apply_chunk(event_ids: list[int]) -> int:
    with transaction.atomic():
        events = list(
            Event.objects.select_for_update(skip_locked=True)
            .filter(pk__in=event_ids, applied_at__isnull=True)
            .order_by("time", "id")
        )
        if not events:
            return 0  # another worker got there first
        _apply_selected(events)
    return len(events)


def _apply_selected(events: list[Event]) -> None:
    """Fold claimed events (their rows locked by the caller's transaction) into the record, in (time, id) order."""
    events.sort(key=lambda event: (event.time, event.pk))
    Event.objects.filter(pk__in=[e.pk for e in events]).update(applied_at=timezone.now())
    _lock_subjects(events)
    lifecycle_runs: set[str] = set()
    folded: dict[tuple, Event] = {}
    xids: dict[tuple[str, int], _XidTally] = {}
    readings: list[Event] = []
    for event in events:
        route = ROUTES[event.type]
        if route is Route.LIFECYCLE:
            lifecycle_runs.add(event.run_name)
        elif route is Route.FOLDED:
            _fold(folded, event)
        elif route is Route.XID:
            xids.setdefault((event.node_name, event.data["gpu"]), _XidTally()).add(event)
        elif route is Route.READING:
            readings.append(event)
        elif route is Route.APPLIER:
            APPLIERS[event.type](event)
        # Route.LOGGED: stored applied at the intake; applied again (a rebuild, a replay) it has nothing to do, its
        # run and node being made by _lock_subjects.
    _apply_readings(readings)
    for type_, fold in FOLDED.items():
        fold.write([event for event in folded.values() if event.type == type_])
    for tally in xids.values():
        _apply_xids(tally)
    for name in sorted(lifecycle_runs):
        run_lifecycle_rebuild(run=_run_locked(name))


def _lock_subjects(events: list[Event]) -> None:
    """Create and lock every run and node these events touch, runs then nodes, each in name order.

    One global order means two workers can never wait on each other (no deadlock). NO KEY UPDATE
    locks still let other transactions insert rows that point at these (attempts, GPUs).
    """
    runs, nodes = _subjects(events)  # as the intake names them: a field the event's type lacks names nothing
    _create_missing(Run, "name", runs)
    _create_missing(Node, "hostname", nodes)
    list(Run.objects.select_for_update(no_key=True).filter(name__in=runs).order_by("name").values_list("pk"))
    list(Node.objects.select_for_update(no_key=True).filter(hostname__in=nodes).order_by("hostname").values_list("pk"))


def _run_locked(name: str) -> Run:
    """The run's row; `_lock_subjects` has created and locked it for this transaction."""
    return Run.objects.select_for_update(no_key=True).get(name=name)


def record_rebuild() -> int:
    """Throw away the derived record and fold every stored event in again; returns events applied.

    Clusters and nodes stay (they carry inventory that events do not: racks, switches, API addresses);
    their derived fields are reset.
    """
    with transaction.atomic():
        Run.objects.all().delete()
        GPU.objects.all().delete()
        Node.objects.update(state="in_service", state_reason="", state_changed_at=None, last_heartbeat_at=None)
        Event.objects.update(applied_at=None, error="", quarantined_at=None)
    ids = list(Event.objects.order_by("time", "id").values_list("id", flat=True))
    return events_apply(event_ids=ids)


def pending_events_apply(*, older_than: timedelta = timedelta(seconds=30)) -> int:
    """Apply events whose task never ran (lost with a broker or a killed worker)."""
    cutoff = timezone.now() - older_than
    ids = list(
        Event.objects.filter(applied_at__isnull=True, received_at__lt=cutoff)
        .order_by("time", "id")
        .values_list("id", flat=True)[:10_000]
    )
    return events_apply(event_ids=ids)
