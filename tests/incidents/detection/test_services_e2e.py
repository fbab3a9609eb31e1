"""Detection on the real parts: PostgreSQL, Redis and a Celery worker process (skips without them)."""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from incidents.detection.tasks import watch_hangs
from incidents.models import Incident
from runs.models import Event, Run
from tests.services import wait_until_detected
from tests.stories import event, story_until_failure, xid_storm

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
BATCH = "application/cloudevents-batch+json"


def post_all(client, events, size=1000):
    for start in range(0, len(events), size):
        response = client.post("/api/v1/events", json.dumps(events[start : start + size]), content_type=BATCH)
        assert response.status_code in (200, 202), response.content


def test_an_xid_storm_and_a_failure_open_one_incident_through_the_worker(writer, worker):
    events = story_until_failure() + xid_storm(3000)
    post_all(writer, events)
    wait_until_detected(len(events))
    (incident,) = Incident.objects.all()
    assert (incident.run.name, incident.severity, incident.recommended_action) == ("r1", "SEV3", "reboot node, drain")
    xid = incident.alerts.get(kind="xid")
    assert (xid.fingerprint, xid.count, xid.status) == ("xid:n2:3:79", 3001, "firing")
    assert incident.alerts.count() == 3  # the Xid storm, the failure, the scheduler's cordon
    assert any("detect_events" in line and "succeeded" in line for line in worker)


def test_the_watchdog_finds_a_hang_through_the_worker(writer, worker):
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(minutes=60)
    nodes = [f"h-{i}" for i in range(256)]  # 8 GPUs a node
    events = [event("run.started", start, "h-start", run="h1", cluster="c1", gpus=2048, nodes=nodes, job_id="7")]
    events += [
        event("run.step", start + timedelta(minutes=m), f"h-{m}", run="h1", step=m) for m in range(1, 41)
    ]  # the last step 20 minutes ago: more than the 10-minute floor
    post_all(writer, events)
    wait_until_detected(len(events))
    assert not Incident.objects.exists()

    watch_hangs.delay()  # what beat sends every minute
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not Incident.objects.filter(run__name="h1").exists():
        time.sleep(0.2)
    incident = Incident.objects.get(run__name="h1")
    assert incident.severity == "SEV1"  # 2,048 GPUs idle
    assert incident.alerts.get().kind == "hang"
    interruption = Run.objects.get(name="h1").interruptions.get()
    # Just after the last step (1 us): the hang began after the last sign of progress.
    assert (interruption.kind, interruption.fault_at) == ("hang", start + timedelta(minutes=40, microseconds=1))
    assert Event.objects.get(source="fleetops/watchdog").type == "run.failed"
