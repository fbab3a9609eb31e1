"""Detection on the real parts: PostgreSQL, Redis and a Celery worker process (skips without them)."""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from incidents.detection.tasks import watch_hangs
from incidents.models import Incident
from runs.models import Event, Run
from tests.services import wait_for, wait_until_detected
from tests.stories import event, story_until_failure, xid_storm

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
BATCH = "application/cloudevents-batch+json"


def post_all(client, events, size=1000):
    for start in range(0, len(events), size):
        response = client.post("/api/v1/events", json.dumps(events[start : start + size]), content_type=BATCH)
        assert response.status_code in (200, 202), response.content


def test_an_xid_storm_and_a_failure_open_one_incident_through_the_worker(writer, broker):
    from tests.services import Worker

    events = story_until_failure() + xid_storm(3000)
    # March's story, months ago: silent since, the run's loss is counted to an hour past its last event (RUN_SILENT_S).
    process = Worker(RUN_SILENT_S="3600")
    try:
        post_all(writer, events)
        wait_until_detected(len(events))
    finally:
        process.stop()
    worker = process.lines
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


@pytest.mark.reliability(
    "A live failure through the API on the real parts, from the fault to FleetOps resolving it",
    how="POST /api/v1/events with a Celery worker on Redis and PostgreSQL (INCIDENT_AUTO_RESOLVE_S=15 s in the "
    "worker): failure, acknowledgement, restart, restore, the node back; the minute sweep before and after the quiet",
    outcome="triggered, then acknowledged through the restart and the reload; mitigated at run.restored; every alert "
    "cleared; not resolved inside the quiet period, resolved by FleetOps after it, saying why",
)
def test_a_live_failure_is_mitigated_at_the_restore_and_resolved_after_the_quiet_period(writer, broker):
    from incidents import services
    from incidents.detection.tasks import auto_resolve
    from tests.services import Worker

    worker = Worker(INCIDENT_AUTO_RESOLVE_S="15")
    try:
        now = datetime.now(UTC).replace(microsecond=0)

        def ago(seconds: float) -> datetime:
            return now - timedelta(seconds=seconds)

        start = [
            event("run.started", ago(3600), "l-0", run="l1", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="1")
        ]
        start += [event("run.step", ago(3600 - 60 * m), f"l-s{m}", run="l1", step=m) for m in range(1, 50)]
        fault = [
            event("run.failed", ago(600), "l-f", run="l1", reason="Xid 79", node="n2", gpu=3, xid=79,
                  detected_at=ago(590).isoformat().replace("+00:00", "Z")),
            event("node.state", ago(580), "l-c", node="n2", state="cordoned", reason="Xid 79"),
        ]  # fmt: skip
        post_all(writer, start + fault)
        wait_until_detected(len(start + fault))
        incident = Incident.objects.get(run__name="l1")
        assert (incident.status, incident.started_at, incident.detected_at) == ("triggered", ago(600), ago(590))
        services.incident_acknowledge(incident=incident, actor=services.FLEETOPS)

        restart = [
            event("run.started", ago(300), "l-r", run="l1", cluster="c1", gpus=16, nodes=["n1", "n3"], job_id="2")
        ]
        post_all(writer, restart)
        wait_until_detected(len(start + fault + restart))
        incident.refresh_from_db()
        assert incident.status == "acknowledged"  # running again is not training again: the reload still burns

        back_at = datetime.now(UTC).replace(microsecond=0)  # the last alert clears now: the quiet starts here
        restored = [
            event("run.restored", ago(60), "l-rr", run="l1", from_step=40),
            event("node.state", back_at, "l-back", node="n2", state="in_service", reason="repaired"),
        ]
        post_all(writer, restored)
        total = len(start + fault + restart + restored)
        wait_until_detected(total)
        incident.refresh_from_db()
        assert (incident.status, incident.mitigated_at) == ("mitigated", ago(60))
        assert not incident.alerts.filter(status="firing").exists()

        auto_resolve.delay()  # the beat's minute, inside the quiet period (15 s since the node came back: no)
        swept = lambda: any("auto_resolve" in line and "succeeded" in line for line in worker.lines)  # noqa: E731
        wait_for(swept, timeout=30, what="the sweep")
        assert datetime.now(UTC) < back_at + timedelta(seconds=15), "the first sweep came too late to test the quiet"
        incident.refresh_from_db()
        assert incident.status == "mitigated"
        time.sleep(max(0.0, (back_at + timedelta(seconds=16) - datetime.now(UTC)).total_seconds()))
        auto_resolve.delay()
        resolved = Incident.objects.filter(pk=incident.pk, status="resolved")
        wait_for(resolved.exists, timeout=30, what="FleetOps to resolve it")
        entry = incident.timeline.get(kind="resolved")
        assert entry.actor_name == "FleetOps" and "every alert has cleared" in entry.text
    finally:
        worker.stop()
