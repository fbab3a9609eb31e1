"""Celery tasks of the playbook engine: one step run at a time under the execution's lease (engine.py).

Names pinned (name=), as they were before incidents/ was split into packages."""

from celery import shared_task

from fleetops.celery import retry_transient
from incidents.playbooks import engine


@shared_task(name="incidents.tasks.advance_playbook", **retry_transient())
def advance_playbook(execution_id: int) -> str:
    return engine.playbook_advance(execution_id=execution_id)


@shared_task(name="incidents.tasks.resume_playbooks", **retry_transient())
def resume_playbooks() -> int:
    return engine.playbooks_resume_stale()
