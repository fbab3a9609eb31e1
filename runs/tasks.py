"""Celery tasks: thin wrappers that take ids and call one service. Safe to run twice."""

from celery import shared_task
from django.db import OperationalError

from . import services


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError,),  # a dropped connection or a lock timeout; nothing else retries
    retry_backoff=2,
    max_retries=5,
)
def apply_events(event_ids: list[int]) -> int:
    applied = services.events_apply(event_ids=event_ids)
    # The detectors look at the events next (incidents.tasks); they claim each event, so a repeat is harmless.
    from incidents.tasks import detect_events

    detect_events.delay(event_ids)
    return applied


@shared_task(acks_late=True)
def apply_pending_events() -> int:
    return services.pending_events_apply()
