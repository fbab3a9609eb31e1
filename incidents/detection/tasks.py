"""Celery tasks of the detectors: thin, idempotent (events are claimed), each calls one service.

Names pinned (name=): queued messages, routes and the beat schedule know them by the module they had before
incidents/ was split into packages."""

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleetops.celery import retry_transient
from incidents import services
from incidents.detection import services as detection


@shared_task(name="incidents.tasks.detect_events", **retry_transient())
def detect_events(event_ids: list[int]) -> int:
    return detection.events_detect(event_ids=event_ids)


@shared_task(name="incidents.tasks.detect_pending", **retry_transient())
def detect_pending() -> int:
    return detection.pending_detect()


@shared_task(name="incidents.tasks.watch_hangs", **retry_transient())
def watch_hangs() -> int:
    """Runs silent too long: running (a hang) or restarting (nobody said what became of them)."""
    now = timezone.now()
    return detection.hangs_detect(now=now) + detection.silent_runs_detect(now=now)


@shared_task(name="incidents.tasks.reconcile_schedulers", **retry_transient())
def reconcile_schedulers() -> int:
    """Runs the record calls running, against their Slurm or Kubernetes cluster's own view of their jobs."""
    return detection.schedulers_reconcile(now=timezone.now())


@shared_task(name="incidents.tasks.watch_heartbeats", **retry_transient())
def watch_heartbeats() -> int:
    return detection.heartbeats_detect(now=timezone.now())


@shared_task(name="incidents.tasks.detect_stragglers", **retry_transient())
def detect_stragglers() -> int:
    return detection.stragglers_detect(now=timezone.now())


@shared_task(name="incidents.tasks.detect_sdc", **retry_transient())
def detect_sdc() -> int:
    return detection.sdc_detect(now=timezone.now())


@shared_task(name="incidents.tasks.detect_lemons", **retry_transient())
def detect_lemons() -> int:
    return detection.lemons_detect(now=timezone.now())


@shared_task(name="incidents.tasks.auto_resolve", **retry_transient())
def auto_resolve() -> int:
    """The open incidents' minute: severity graded again from impact; mitigated incidents whose alerts have cleared
    resolved after the quiet period (off at 0). Returns how many were resolved."""
    now = timezone.now()
    services.incidents_reassess(now=now)
    if settings.INCIDENT_AUTO_RESOLVE_S <= 0:
        return 0
    return services.incidents_auto_resolve(now=now, quiet_s=settings.INCIDENT_AUTO_RESOLVE_S)
