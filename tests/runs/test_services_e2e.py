"""The event path on the real parts: PostgreSQL, Redis and a Celery worker process.

Skips on a laptop without them (DATABASE_URL not PostgreSQL, REDIS_URL unset or down); fails under CI=true.
"""

import json
import random
import threading
import time

import pytest
from django.db import connections
from django.utils import timezone

from runs.domain.cloudevents import parse_events
from runs.models import GPU, Event, Node, Run
from runs.services import _event_rows, _insert_orm, events_apply
from tests.services import wait_until_applied
from tests.stories import assert_failure_and_restart_record, failure_and_restart, record_snapshot

BATCH = "application/cloudevents-batch+json"
pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def post(client, body):
    return client.post("/api/v1/events", json.dumps(body), content_type=BATCH)


def test_it_applies_a_batch_through_a_real_worker(writer, worker):
    batch = failure_and_restart()
    response = post(writer, batch)
    assert response.status_code == 202, response.content
    wait_until_applied(len(batch))
    assert_failure_and_restart_record()
    assert any("runs.tasks.apply_turn" in line and "succeeded" in line for line in worker)

    snapshot, events = record_snapshot(), Event.objects.count()
    again = post(writer, batch)
    assert again.status_code == 200 and again.json()["duplicates"] == len(batch)
    time.sleep(0.5)  # were anything queued, the worker would have had time to apply it
    assert Event.objects.count() == events and record_snapshot() == snapshot

    Run.objects.all().delete(), Node.objects.all().delete(), Event.objects.all().delete()
    shuffled = batch[:]
    random.Random(7).shuffle(shuffled)
    for start in range(0, len(shuffled), 4):  # several tasks, each with part of the story, out of order
        assert post(writer, shuffled[start : start + 4]).status_code == 202
    wait_until_applied(len(batch))
    assert record_snapshot() == snapshot


def test_it_applies_each_event_once_under_parallel_workers(postgres):
    """Four threads (own connections) apply the same stored events at once: no double counting."""
    batch = failure_and_restart()
    batch += [
        {**batch[0], "id": f"xid-{n}", "type": "gpu.xid", "data": {"node": "n2", "gpu": 3, "xid": 79, "message": "x"}}
        for n in range(40)
    ]
    events, problems = parse_events(batch, max_batch=1000)
    assert problems == []
    # Stored directly, without queueing a task: the threads below do the applying.
    ids = sorted(_insert_orm(_event_rows(events, timezone.now(), None)).values())
    applied, errors = [], []

    def apply(order):
        try:
            applied.append(events_apply(event_ids=order))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    orders = [ids, ids[::-1], ids[::2] + ids[1::2], sorted(ids, key=lambda i: i % 7)]
    threads = [threading.Thread(target=apply, args=(order,)) for order in orders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sum(applied) == len(ids)
    assert GPU.objects.get(node__hostname="n2", index=3).xid_count == 41
    run = Run.objects.get(name="r1")
    assert (run.state, run.attempts.count(), run.interruptions.count(), run.last_step) == ("completed", 2, 1, 6)
    assert run.interruptions.get().resumed_at is not None


@pytest.mark.reliability(
    "A bad event in the log among a run's story, applied by a real Celery worker on PostgreSQL (a run of 2^40 GPUs, "
    "stored before the intake checked columns), then 100 valid events posted after it",
    how="the story and the bad row queued as one apply task to a `celery worker` process; then the 100 posted",
    outcome="the bad row quarantined with the database's error; the story's record exact; the 100 applied; the task "
    "succeeds (before: the chunk rolled back whole, the task failed, and later sweeps failed on the same row)",
)
def test_a_worker_quarantines_a_bad_event_and_goes_on(writer, worker):
    from runs.tasks import apply_events

    bad = Event.objects.create(
        source="old://fleetops",
        event_id="huge",
        type="run.started",
        time=timezone.now(),
        data={"run": "r1", "cluster": "c1", "gpus": 2**40, "nodes": ["n9"], "job_id": "9"},
        run_name="r1",
    )
    events, problems = parse_events(failure_and_restart(), max_batch=1000)
    assert problems == []
    rows = _event_rows(events, timezone.now(), None)
    _insert_orm(rows)
    apply_events.delay(list(Event.objects.order_by("time", "id").values_list("pk", flat=True)))
    wait_until_applied(len(events) + 1)
    bad.refresh_from_db()
    assert bad.quarantined_at is not None and "out of range" in bad.error
    assert_failure_and_restart_record()

    later = [
        {
            "specversion": "1.0",
            "id": f"later-{i}",
            "source": "t://x",
            "type": "node.heartbeat",
            "time": "2026-03-01T05:00:00Z",
            "data": {"node": f"late-{i}"},
        }
        for i in range(100)
    ]
    assert post(writer, later).status_code == 202
    wait_until_applied(len(events) + 101)
    assert Event.objects.filter(quarantined_at__isnull=False).count() == 1
    assert not any("apply_events" in line and "raised" in line for line in worker)
