"""The demo feed on the beat schedule (settings.DEMO_FEED; `make run` turns it on)."""

from celery import shared_task
from django.utils import timezone

from fleetops.celery import retry_transient
from incidents.demo.feed import demo_feed


@shared_task(name="incidents.tasks.demo_feed", **retry_transient())
def feed_demo() -> int:
    return demo_feed(now=timezone.now())
