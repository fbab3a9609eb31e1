"""Celery tasks of the detectors: thin, idempotent (events are claimed), each calls one service."""

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from incidents import detection, notifications

_RETRY = {"acks_late": True, "autoretry_for": (OperationalError,), "retry_backoff": 2, "max_retries": 5}


@shared_task(name="incidents.tasks.detect_events", **_RETRY)
def detect_events(event_ids: list[int]) -> int:
    return detection.events_detect(event_ids=event_ids)


@shared_task(name="incidents.tasks.detect_pending", **_RETRY)
def detect_pending() -> int:
    return detection.pending_detect()


@shared_task(name="incidents.tasks.watch_hangs", **_RETRY)
def watch_hangs() -> int:
    return detection.hangs_detect(now=timezone.now())


@shared_task(name="incidents.tasks.watch_heartbeats", **_RETRY)
def watch_heartbeats() -> int:
    return detection.heartbeats_detect(now=timezone.now())


@shared_task(name="incidents.tasks.detect_stragglers", **_RETRY)
def detect_stragglers() -> int:
    return detection.stragglers_detect(now=timezone.now())


@shared_task(name="incidents.tasks.detect_sdc", **_RETRY)
def detect_sdc() -> int:
    return detection.sdc_detect(now=timezone.now())


@shared_task(name="incidents.tasks.detect_lemons", **_RETRY)
def detect_lemons() -> int:
    return detection.lemons_detect(now=timezone.now())


@shared_task(name="incidents.tasks.advance_playbook", **_RETRY)
def advance_playbook(execution_id: int) -> str:
    from incidents.playbooks import playbook_advance

    return playbook_advance(execution_id=execution_id)


@shared_task(name="incidents.tasks.resume_playbooks", **_RETRY)
def resume_playbooks() -> int:
    from incidents.playbooks import playbooks_resume_stale

    return playbooks_resume_stale()


@shared_task(name="incidents.tasks.deliver_notification", **_RETRY)
def deliver_notification(delivery_id: int) -> str:
    """One attempt; a transient failure queues the next one itself (notifications.delivery_send), bounded."""
    return notifications.delivery_send(delivery_id=delivery_id).status


@shared_task(name="incidents.tasks.resume_deliveries", **_RETRY)
def resume_deliveries() -> int:
    return notifications.deliveries_resume(now=timezone.now())
