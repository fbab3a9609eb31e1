"""Two real Celery workers racing on the same run, the same incident and the same playbook.

Each task is also sent more than once, so both workers get the same work: the claims (skip-locked rows and
applied_at / detected_at in the same transaction, the execution's row lock and the step lease) must make every
effect happen once.
"""

import json
import re
from datetime import UTC, datetime

import pytest

from incidents import services as incident_services
from incidents.detection.tasks import detect_events
from incidents.models import Alert, Incident, PlaybookExecution
from incidents.playbooks.engine import playbook_start
from incidents.playbooks.tasks import advance_playbook
from runs.models import Event, Node, Run
from runs.services import record_rebuild
from runs.tasks import apply_events
from tests.faults.conftest import stream
from tests.services import Worker, wait_for, wait_until_applied, wait_until_detected
from tests.stories import event, record_snapshot, spares, story_until_failure, xid_storm

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
BATCH = "application/cloudevents-batch+json"


def _post_in_batches(writer, events: list[dict], size: int) -> None:
    for start in range(0, len(events), size):
        answer = writer.post("/api/v1/events", json.dumps(events[start : start + size]), content_type=BATCH)
        assert answer.status_code == 202, answer.content


def _returned(lines: list[str], task: str) -> list[int]:
    """What each run of `task` returned, from log lines like "Task t[id] succeeded in 0.2s: 250"."""
    return [
        int(m.group(1)) for line in lines if (m := re.search(rf"{re.escape(task)}\[.*\] succeeded in .*: (\d+)$", line))
    ]


def _both(**env):
    first = Worker(**env)
    try:
        return first, Worker(**env)
    except BaseException:
        first.stop()
        raise


@pytest.mark.reliability(
    "Two workers racing on the same run",
    how="two celery worker processes; a 4,500-event stream of one run posted in 250-event batches (applied by the "
    "intake's turns), then every batch sent again as an apply_events task",
    outcome="each event applied by exactly one worker (the applied counts the workers report add up to the "
    "stream); no event stored twice; the record equals a rebuild from the log by one process",
)
def test_two_workers_applying_the_same_stream_give_the_record_of_one(writer, broker):
    events = stream()
    a, b = _both()
    try:
        _post_in_batches(writer, events, 250)
        ids = list(Event.objects.order_by("id").values_list("id", flat=True))
        for start in range(0, len(ids), 250):
            apply_events.delay(ids[start : start + 250])  # the same work again: whoever comes second finds it claimed
        wait_until_applied(len(events), timeout=240)
        wait_for(
            lambda: len(_returned(a.lines + b.lines, "runs.tasks.apply_events")) == len(range(0, len(ids), 250)),
            timeout=120,
            what="the second round of apply tasks to finish",
        )
    finally:
        a.stop()
        b.stop()
    # The first round: the intake's turns (runs.tasks.apply_turn); the second: the same events named again.
    applied = [
        n for w in (a, b) for task in ("apply_turn", "apply_events") for n in _returned(w.lines, f"runs.tasks.{task}")
    ]
    assert sum(applied) == len(events)
    assert _returned(a.lines, "runs.tasks.apply_events") and _returned(b.lines, "runs.tasks.apply_events")
    assert Event.objects.values("source", "event_id").distinct().count() == Event.objects.count() == len(events)
    raced = record_snapshot()
    assert raced["interruptions"] and raced["checkpoints"]
    record_rebuild()
    assert record_snapshot() == raced


@pytest.mark.reliability(
    "Two workers racing on the same incident",
    how="two celery worker processes; a failure and a storm of 2,000 identical Xids posted in 100-event batches, "
    "then every detect_events task sent a second time",
    outcome="one incident with one alert per fingerprint, the Xid alert counting 2,001, as one process gives",
)
def test_two_workers_detecting_the_same_fault_open_one_incident(writer, broker):
    a, b = _both()
    try:
        _post_in_batches(writer, story_until_failure() + xid_storm(2000), 100)
        wait_until_detected(Event.objects.count(), timeout=180)
        ids = list(Event.objects.order_by("id").values_list("id", flat=True))
        Event.objects.update(detected_at=None)  # and once more, by both workers at the same time
        for start in range(0, len(ids), 100):
            detect_events.delay(ids[start : start + 100])
            detect_events.delay(ids[start : start + 100])
        wait_until_detected(len(ids), timeout=180)
    finally:
        a.stop()
        b.stop()
    (incident,) = Incident.objects.all()
    assert incident.run.name == "r1"
    alerts = {alert.kind: alert for alert in Alert.objects.all()}
    assert set(alerts) == {"xid", "run_failed", "node_state"} and Alert.objects.count() == 3
    assert alerts["xid"].count == 4002  # 2,001 Xids, each detected once per round: two rounds, not four
    assert alerts["run_failed"].count == 2 and alerts["node_state"].count == 2


@pytest.mark.reliability(
    "Two workers racing on the same playbook",
    how="two celery worker processes, a simulated cluster whose every change takes 2 s; drain-and-replace started "
    "and advance_playbook sent six times",
    outcome="the playbook succeeds with every step run once (attempts 1, one 'done' entry each on the timeline); "
    "the cluster sees one spare taken into service, one requeue, one move to repair",
)
def test_two_workers_advancing_the_same_playbook_run_each_step_once(writer, broker):
    env = {"PLAYBOOK_AUTO_START": "false", "SIMULATED_CLUSTER_DELAY_S": "2"}
    a, b = _both(**env)
    try:
        _post_in_batches(writer, spares("s1") + story_until_failure(), 500)
        wait_until_detected(Event.objects.count(), timeout=120)
        incident, node, run = Incident.objects.get(), Node.objects.get(hostname="n2"), Run.objects.get(name="r1")
        execution = playbook_start(
            playbook="drain-and-replace", actor=incident_services.FLEETOPS, node=node, run=run, incident=incident
        )
        for _ in range(5):
            advance_playbook.delay(execution.pk)
        wait_for(
            lambda: PlaybookExecution.objects.get(pk=execution.pk).status not in ("running", "waiting_approval"),
            timeout=180,
            what="the playbook to finish",
        )
    finally:
        a.stop()
        b.stop()
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    steps = list(execution.steps.order_by("index").values_list("name", "status", "attempts"))
    assert steps and all(status == "succeeded" and attempts == 1 for _, status, attempts in steps), steps
    texts = list(incident.timeline.values_list("text", flat=True))
    for name, _, _ in steps:
        assert sum(t.startswith(f"Step {name} done") for t in texts) == 1, (name, texts)
    changes = Event.objects.filter(source="fleetops/simulated-cluster")
    assert changes.filter(type="run.started").count() == 1
    assert changes.filter(type="node.state", node_name="s1", data__state="in_service").count() == 1
    assert changes.filter(type="node.state", node_name="n2", data__state="in_repair").count() == 1


def _two_runs_failed_on_one_cluster() -> list[dict]:
    """A 40-node cluster c1 with x39 cordoned and two spares; runs r1 on x00-x03 and r2 on x04-x07 each fail, on x01
    and x05."""
    now = datetime.now(UTC).replace(microsecond=0)
    nodes = [f"x{i:02d}" for i in range(40)]
    events = [event("node.heartbeat", now, f"hb-{n}", node=n, cluster="c1") for n in nodes]
    events += [event("node.state", now, "out-x39", node="x39", state="cordoned", reason="repair", cluster="c1")]
    events += spares("s1", "s2")
    for run, hosts, bad in (("r1", nodes[0:4], "x01"), ("r2", nodes[4:8], "x05")):
        events.append(event("run.started", now, f"go-{run}", run=run, cluster="c1", gpus=32, nodes=hosts, job_id=run))
        events.append(event("run.failed", now, f"fail-{run}", run=run, node=bad, reason="NCCL watchdog timeout"))
    return events


@pytest.mark.reliability(
    "Two drains decided at once in one cluster, each on its own worker",
    how="two celery worker processes, a 40-node simulated cluster with one node out and at most 2 out "
    "(PLAYBOOK_MAX_OUT_NODES), every scheduler change taking 3 s; drain-and-replace started at once for two runs' "
    "failed nodes",
    outcome="one node drained, the other playbook refused by the breaker and a person paged: 2 out, never 3 (before: "
    "both checks passed while neither drain had landed, 3 out)",
)
def test_two_drains_at_once_are_held_to_the_breaker_as_one_after_another(writer, broker):
    env = {"PLAYBOOK_AUTO_START": "false", "SIMULATED_CLUSTER_DELAY_S": "3", "PLAYBOOK_MAX_OUT_NODES": "2"}
    a, b = _both(**env)
    try:
        _post_in_batches(writer, _two_runs_failed_on_one_cluster(), 500)
        wait_until_detected(Event.objects.count(), timeout=120)
        executions = [
            playbook_start(
                playbook="drain-and-replace",
                actor=incident_services.FLEETOPS,
                node=Node.objects.get(hostname=node),
                run=Run.objects.get(name=run),
                incident=Incident.objects.get(run__name=run),
            )
            for run, node in (("r1", "x01"), ("r2", "x05"))
        ]

        def drains_decided() -> bool:
            steps = [e.steps.get(name="drain").status for e in executions]
            return all(status in ("succeeded", "failed") for status in steps)

        wait_for(drains_decided, timeout=180, what="both drains to be decided")
    finally:
        a.stop()
        b.stop()
    outcomes = {e.node.hostname: e.steps.get(name="drain").status for e in executions}
    assert sorted(outcomes.values()) == ["failed", "succeeded"], outcomes
    refused = next(e for e in executions if outcomes[e.node.hostname] == "failed")
    refused.refresh_from_db()
    assert "circuit breaker open" in refused.error
    assert refused.incident.timeline.filter(kind="paged").exists()
    out = Node.objects.filter(cluster__name="c1", state__in=("draining", "cordoned", "in_repair"))
    assert out.count() == 2, list(out.values_list("hostname", "state"))
