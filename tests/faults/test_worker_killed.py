"""A Celery worker killed with SIGKILL while applying events and while running a playbook step.

Real parts only: PostgreSQL, Redis and `celery worker` processes, the first one killed with SIGKILL mid-work.
(The same on a real Slurm cluster, killed in a step that waits on the scheduler: tests/incidents/playbooks/clusters/
test_playbook_worker_killed.py.)
"""

import json
import os
import time
from datetime import timedelta

import pytest
from django.db import connection

from incidents import services as incident_services
from incidents.models import Incident, PlaybookExecution, StepExecution
from incidents.playbooks.engine import playbook_start, playbooks_resume_stale
from runs.models import Event, Node, Run
from runs.services import record_rebuild
from tests.faults.conftest import send_sweeper, stream
from tests.services import Worker, wait_for, wait_until_applied, wait_until_detected
from tests.stories import record_snapshot, spares, story_until_failure

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
BATCH = "application/cloudevents-batch+json"


def _others_in_transaction() -> int:
    """Sessions on this database, other than ours, inside a transaction now (a worker applying a chunk)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
        )
        return cursor.fetchone()[0]


@pytest.mark.reliability(
    "Celery worker killed (SIGKILL) while applying events",
    how="a 4,500-event stream queued in 250-event tasks; the worker killed while a chunk's claim transaction "
    "is open; a second worker and the apply_pending_events sweeper finish",
    outcome="after the kill every task's events are all applied or none (the open claim rolled back); in the "
    "end every event applied once and the record equals a rebuild from the log",
)
def test_a_worker_killed_mid_apply_leaves_nothing_half_applied(writer, broker):
    events = stream()
    batches = [events[i : i + 250] for i in range(0, len(events), 250)]
    for batch in batches:  # queued in Redis; no worker yet
        assert writer.post("/api/v1/events", json.dumps(batch), content_type=BATCH).status_code == 202
    first = Worker()
    second = None
    try:
        wait_for(
            lambda: Event.objects.filter(applied_at__isnull=False).exists() and _others_in_transaction(),
            timeout=120,
            what="the worker to have applied a chunk and be inside the next one",
            every=0.05,
        )
        first.kill()
        wait_for(lambda: not _others_in_transaction(), timeout=30, what="PostgreSQL to end the killed session")

        applied = set(Event.objects.filter(applied_at__isnull=False).values_list("event_id", flat=True))
        assert 0 < len(applied) < len(events)
        for batch in batches:
            ids = {e["id"] for e in batch}
            assert ids <= applied or not ids & applied, "a task's events half-applied"

        second = Worker()
        send_sweeper(os.environ["REDIS_URL"])  # what beat does every minute: the killed worker's tasks are lost
        wait_until_applied(len(events), timeout=240)
    finally:
        for worker in (first, second):
            if worker is not None and worker.process.poll() is None:
                worker.stop()
    assert Event.objects.values("source", "event_id").distinct().count() == len(events)
    killed = record_snapshot()
    assert killed["interruptions"] and killed["checkpoints"]
    record_rebuild()
    assert record_snapshot() == killed


@pytest.mark.reliability(
    "Celery worker killed (SIGKILL) while running a playbook step",
    how="simulated cluster whose changes take 5 s; the worker killed inside the requeue step, before the cluster "
    "changed; a second worker resumes the execution once the step lease runs out",
    outcome="the requeue step runs again and the cluster sees one requeue and one spare taken; every other step "
    "runs once; the playbook succeeds and the timeline has each step done once, then the success",
)
def test_a_worker_killed_mid_step_lets_the_next_one_finish_without_a_second_requeue(writer, broker):
    env = {"PLAYBOOK_AUTO_START": "false", "SIMULATED_CLUSTER_DELAY_S": "5", "PLAYBOOK_STEP_LEASE_S": "3"}
    first = Worker(**env)
    second = None
    try:
        posted = spares("s1") + story_until_failure()
        assert writer.post("/api/v1/events", json.dumps(posted), content_type=BATCH).status_code == 202
        wait_until_detected(len(posted))
        incident, node, run = Incident.objects.get(), Node.objects.get(hostname="n2"), Run.objects.get(name="r1")
        execution = playbook_start(
            playbook="drain-and-replace", actor=incident_services.FLEETOPS, node=node, run=run, incident=incident
        )
        wait_for(
            lambda: StepExecution.objects.filter(execution=execution, name="requeue job", status="running").exists(),
            timeout=60,
            what="the requeue step to start",
        )
        time.sleep(1)  # inside the cluster call now, which takes 5 s
        first.kill()
        changes = Event.objects.filter(source="fleetops/simulated-cluster")
        assert not changes.exclude(type="node.state", node_name="n2").exists(), "the kill came after the requeue"

        second = Worker(**env)
        time.sleep(4)  # the killed worker's lease on the step runs out
        assert playbooks_resume_stale(older_than=timedelta(0)) == 1  # what beat's resume_playbooks does
        wait_for(
            lambda: PlaybookExecution.objects.get(pk=execution.pk).status != "running",
            timeout=120,
            what="the playbook to finish on the second worker",
        )
    finally:
        for worker in (first, second):
            if worker is not None and worker.process.poll() is None:
                worker.stop()
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    attempts = dict(execution.steps.values_list("name", "attempts"))
    assert attempts.pop("requeue job") == 2 and set(attempts.values()) == {1}, attempts
    assert changes.filter(type="run.started").count() == 1
    assert changes.filter(type="node.state", node_name="s1", data__state="in_service").count() == 1
    assert changes.filter(type="node.state", node_name="n2", data__state="in_repair").count() == 1
    texts = list(incident.timeline.filter(kind="playbook").order_by("id").values_list("text", flat=True))
    done = [t.split(" done")[0] for t in texts if t.startswith("Step ") and " done" in t]
    assert done == [f"Step {name}" for name in execution.steps.order_by("index").values_list("name", flat=True)]
    assert texts[0].startswith("Started playbook drain-and-replace") and "succeeded" in texts[-1]
