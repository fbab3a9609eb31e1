"""Celery tasks: thin wrappers that take ids and call one service. Safe to run twice."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string
from kombu.exceptions import OperationalError as BrokerError

from fleetops.celery import retry_transient
from runs import services
from runs.retention import events_prune

log = logging.getLogger(__name__)


@shared_task(name="runs.tasks.apply_turn", bind=True, **retry_transient())  # a dropped connection, a lock timeout
def apply_turn(self, sender: int) -> int:
    """A sender's turn (queued by the intake on commit): its events, a chunk at a time, each chunk then detected.
    In-process (eager) there is no queue to give way in, so no slice."""
    slice_s = None if self.request.is_eager else settings.EVENTS_APPLY_TURN_S
    return services.turn_apply(sender=sender, on_chunk=_applied, slice_s=slice_s)


@shared_task(name="runs.tasks.apply_events", **retry_transient())
def apply_events(event_ids: list[int]) -> int:
    """Named events (a replay, a benchmark's own batches); the intake queues turns instead."""
    applied = services.events_apply(event_ids=event_ids)
    _applied(event_ids)
    return applied


def _applied(event_ids: list[int]) -> None:
    for hook in settings.EVENTS_APPLIED_HOOKS:
        _enqueue(import_string(hook), event_ids, what=hook)


@shared_task(name="runs.tasks.apply_pending_events", acks_late=True)
def apply_pending_events(older_than_s: float = 30.0) -> int:
    """The sweeper (beat, every minute): events stored `older_than_s` seconds ago and still unapplied."""
    return services.pending_events_apply(older_than=timedelta(seconds=older_than_s))


def _enqueue(task, event_ids: list[int], *, what: str) -> None:
    """Queue the next task for events already stored and applied: a broker that is down loses only the message,
    and the beat sweeper (detect_pending) does what it would have done, so the task in hand still succeeds."""
    try:
        task.delay(event_ids)
    except BrokerError as exc:  # Redis refused, reset or timed out (kombu wraps the client's errors in this)
        # Nothing is lost: the events are stored, and a beat sweeper picks up what was not queued.
        log.warning("could not queue %s of %d events (%s); the sweeper will pick them up", what, len(event_ids), exc)


@shared_task(name="runs.tasks.prune_events", acks_late=True)
def prune_events() -> int:
    """Retention (beat, hourly): raw high-rate events past EVENTS_RAW_RETENTION_DAYS (rank samples: past
    EVENTS_RANK_RETENTION_HOURS) summed per day, then deleted."""
    result = events_prune(
        now=timezone.now(),
        older_than=timedelta(days=settings.EVENTS_RAW_RETENTION_DAYS),
        rank_older_than=timedelta(hours=settings.EVENTS_RANK_RETENTION_HOURS),
        batch_size=settings.EVENTS_PRUNE_BATCH,
    )
    return result.deleted
