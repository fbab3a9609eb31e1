"""Celery tasks of outgoing notifications: one delivery attempt each, claimed by a conditional update.

Names pinned (name=), as they were before incidents/ was split into packages."""

from celery import shared_task
from django.utils import timezone

from fleetops.celery import retry_transient
from incidents.notifications import services as notifications


@shared_task(name="incidents.tasks.deliver_notification", **retry_transient())
def deliver_notification(delivery_id: int) -> str:
    """One attempt; a transient failure queues the next one itself (notifications.delivery_send), bounded."""
    return notifications.delivery_send(delivery_id=delivery_id).status


@shared_task(name="incidents.tasks.resume_deliveries", **retry_transient())
def resume_deliveries() -> int:
    return notifications.deliveries_resume(now=timezone.now())
