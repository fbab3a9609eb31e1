import importlib
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetops.settings")

app = Celery("fleetops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def retry_transient() -> dict:
    """The options of a task that retries only a transient database error (a dropped connection, a lock timeout),
    a bounded number of times with backoff; anything else fails the task. Late ack: a worker that dies mid-task
    leaves the message for another."""
    from django.db import OperationalError  # here, not at the top: this module loads before Django's settings

    return {"acks_late": True, "autoretry_for": (OperationalError,), "retry_backoff": 2, "max_retries": 5}


def task_named(name: str):
    """The task registered under its pinned `name=`, for a service that queues the next step of its own work.

    By name, so services never import a tasks module (tasks import services: imports point one way); the modules of
    settings.CELERY_IMPORTS are imported here on first use, as a worker imports them at start (imported directly:
    Celery's own import_default_modules would also rerun django.setup() and every system check, inside a request).
    A task object's apply_async honours CELERY_TASK_ALWAYS_EAGER, so the embedded default still runs it in-process.
    """
    if name not in app.tasks:
        for module in app.conf.imports:
            importlib.import_module(module)
    return app.tasks[name]


def queue_depths(queues: list[str], *, timeout_s: float = 1.0) -> dict[str, int] | None:
    """Messages waiting in each queue, as the broker's own transport counts them (a Redis list's length, the
    embedded broker's files); None when the broker does not answer within `timeout_s`."""
    try:
        with app.pool.acquire(block=True, timeout=timeout_s) as connection:  # pooled: a scrape opens no connection
            connection.ensure_connection(max_retries=1, timeout=timeout_s, interval_start=0, interval_step=0)
            channel = connection.default_channel
            # kombu's virtual transports (Redis, filesystem) count a queue with _size; declare() would create it.
            return {name: int(channel._size(name)) for name in queues}
    except Exception:  # noqa: BLE001 -- an unreachable or failing broker is a figure (broker_up 0), not an error page
        return None
