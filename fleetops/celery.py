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
