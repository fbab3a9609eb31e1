"""The shared stories tests build on, as CloudEvents: one run with one failure and restart (and the record it must
give), an Xid storm, hot spares, a live outage, the report's week. Tests import them from here, never from each other.
"""

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import time_machine

from incidents import services
from incidents.models import Alert, Incident
from runs.models import Node

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SOURCE = "slurm://test-cluster"


def at(minutes: float, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def ts(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def event(type_: str, when: datetime, id_: str, source: str = SOURCE, **data) -> dict:
    return {"specversion": "1.0", "id": id_, "source": source, "type": type_, "time": ts(when), "data": data}


def failure_and_restart() -> list[dict]:
    """Attempt 1 on n1,n2 fails at +45 min (Xid 79 on n2 gpu3, noticed at +46); attempt 2 on n1,n3
    starts at +55, reloads checkpoint step 3 by +58, and the run completes at +120."""
    e = []

    def add(type_, when, **data):
        e.append(event(type_, when, f"ev-{len(e):03d}", **data))

    add(
        "run.started",
        at(0),
        run="r1",
        cluster="c1",
        gpus=16,
        nodes=["n1", "n2"],
        job_id="100",
        checkpoint_interval_s=1800,
    )
    for step in (1, 2, 3):
        add("run.step", at(10 * step), run="r1", step=step)
    add("checkpoint.started", at(30), run="r1", step=3)
    add("checkpoint.completed", at(30, 20), run="r1", step=3, blocking_s=20.0, bytes=10**12, tier="durable")
    add("run.step", at(40), run="r1", step=4)
    add("gpu.xid", at(45), node="n2", gpu=3, xid=79, message="GPU has fallen off the bus")
    add("run.failed", at(45), run="r1", reason="GPU fell off the bus", node="n2", gpu=3, xid=79, detected_at=ts(at(46)))
    add("node.state", at(47), node="n2", state="cordoned", reason="Xid 79")
    add("run.started", at(55), run="r1", cluster="c1", gpus=16, nodes=["n1", "n3"], job_id="101")
    add("run.restored", at(58), run="r1", from_step=3)
    for n, step in enumerate((4, 5, 6), start=1):
        add("run.step", at(58 + 10 * n), run="r1", step=step)
    add("checkpoint.started", at(88), run="r1", step=6)
    add("checkpoint.completed", at(88, 15), run="r1", step=6, blocking_s=15.0, bytes=10**12, tier="durable")
    add("node.heartbeat", at(100), node="n3")
    add("run.completed", at(120), run="r1")
    return e


def record_snapshot() -> dict:
    """Every derived row, without database ids, in a stable order: equal snapshots, equal records."""
    from runs.models import GPU, Attempt, Checkpoint, Cluster, Interruption, Node, Run

    def rows(queryset, *fields):
        return [list(r) for r in queryset.values_list(*fields)]

    snapshot = {
        "clusters": rows(Cluster.objects.order_by("name"), "name", "scheduler"),
        "nodes": rows(
            Node.objects.order_by("hostname"),
            "hostname",
            "cluster__name",
            "state",
            "state_reason",
            "state_changed_at",
            "last_heartbeat_at",
        ),
        "gpus": rows(
            GPU.objects.order_by("node__hostname", "index"),
            "node__hostname",
            "index",
            "xid_count",
            "last_xid",
            "last_xid_at",
            "ecc_corrected",
            "temperature_c",
        ),
        "runs": rows(
            Run.objects.order_by("name"),
            "name",
            "cluster__name",
            "state",
            "gpu_count",
            "started_at",
            "ended_at",
            "last_step",
            "last_step_at",
            "checkpoint_interval_s",
        ),
        "attempts": [
            [
                a.run.name,
                a.number,
                a.job_id,
                a.started_at,
                a.ended_at,
                a.end_reason,
                a.resumed_from_step,
                sorted(n.hostname for n in a.nodes.all()),
            ]
            for a in Attempt.objects.select_related("run").prefetch_related("nodes").order_by("run__name", "number")
        ],
        "interruptions": rows(
            Interruption.objects.order_by("run__name", "number"),
            "run__name",
            "number",
            "attempt__number",
            "fault_at",
            "detected_at",
            "running_at",
            "resumed_at",
            "resumed_from_step",
            "cause",
            "planned",
            "reason",
            "node__hostname",
            "gpu__index",
            "xid",
        ),
        "checkpoints": rows(
            Checkpoint.objects.order_by("run__name", "step"),
            "run__name",
            "step",
            "status",
            "started_at",
            "blocking_s",
            "completed_at",
            "durable_at",
            "bytes",
            "tier",
        ),
    }
    return json.loads(json.dumps(snapshot, default=str))


def assert_failure_and_restart_record() -> None:
    """The record `failure_and_restart()` must give, field by field."""
    from runs.models import GPU, Node, Run

    run = Run.objects.get(name="r1")
    assert (run.state, run.cluster.name, run.gpu_count, run.last_step) == ("completed", "c1", 16, 6)
    assert (run.started_at, run.ended_at, run.last_step_at) == (at(0), at(120), at(88))
    first, second = run.attempts.order_by("number")
    assert (first.job_id, first.started_at, first.ended_at, first.end_reason) == ("100", at(0), at(45), "failed")
    assert sorted(first.nodes.values_list("hostname", flat=True)) == ["n1", "n2"]
    assert (second.job_id, second.started_at, second.ended_at) == ("101", at(55), at(120))
    assert second.end_reason == "completed"
    assert sorted(second.nodes.values_list("hostname", flat=True)) == ["n1", "n3"]
    assert second.resumed_from_step == 3

    interruption = run.interruptions.get()
    assert interruption.attempt == first
    assert interruption.fault_at == at(45)
    assert interruption.detected_at == at(46)
    assert interruption.running_at == at(55)
    assert interruption.resumed_at == at(58)
    assert interruption.resumed_from_step == 3
    assert interruption.resumed_from_checkpoint.step == 3
    assert (interruption.cause, interruption.planned, interruption.xid) == ("faulty_gpu", False, 79)
    assert (interruption.node.hostname, interruption.gpu.index) == ("n2", 3)

    checkpoints = list(
        run.checkpoints.order_by("step").values_list("step", "status", "started_at", "blocking_s", "durable_at", "tier")
    )
    assert checkpoints == [
        (3, "completed", at(30), 20.0, at(30, 20), "durable"),
        (6, "completed", at(88), 15.0, at(88, 15), "durable"),
    ]
    n2 = Node.objects.get(hostname="n2")
    assert (n2.state, n2.state_reason, n2.cluster.name) == ("cordoned", "Xid 79", "c1")
    gpu = GPU.objects.get(node=n2, index=3)
    assert (gpu.xid_count, gpu.last_xid, gpu.last_xid_at) == (1, 79, at(45))


# --- Detection: an Xid storm, and the story up to its failure ---


def xid_storm(n: int, *, node="n2", gpu=3, xid=79, start=44.0) -> list[dict]:
    return [
        event(
            "gpu.xid",
            at(start, seconds=i * 0.01),
            f"storm-{i}",
            source=f"dcgm://{node}",  # each node's agent: two nodes' storms are two streams, not repeats
            node=node,
            gpu=gpu,
            xid=xid,
            message="GPU has fallen off the bus",
        )
        for i in range(n)
    ]


def story_until_failure():
    """The scenario up to the failure: the run is restarting, its 16 GPUs idle."""
    return [e for e in failure_and_restart() if e["time"] <= "2026-03-01T00:47:00Z"]


# --- Playbooks: hot spares in the pool ---


def spares(*names):
    return [
        event("node.state", at(1), f"spare-{n}", node=n, state="hot_spare", reason="passed burn-in", cluster="c1")
        for n in names
    ]


# --- The console, live: a 64-GPU outage, posted over HTTP ---


def outage(now: datetime) -> list[dict]:
    """A 64-GPU run trains on 8 nodes; gpu-0003's GPU 5 falls off the bus (an Xid 79 storm) and the run fails."""

    def t(minutes: float) -> datetime:
        return now + timedelta(minutes=minutes)

    nodes = [f"gpu-{i:04d}" for i in range(8)]
    events = [
        event("run.started", t(-40), "b-start", run="llama-70b", cluster="c1", gpus=64, nodes=nodes, job_id="4242")
    ]
    events += [event("run.step", t(-35 + 5 * i), f"b-step-{i}", run="llama-70b", step=i) for i in range(1, 7)]
    storm = dict(node="gpu-0003", gpu=5, xid=79, message="GPU has fallen off the bus")
    events += [event("gpu.xid", t(-3) + timedelta(milliseconds=10 * i), f"b-xid-{i}", **storm) for i in range(200)]
    failed = dict(reason="GPU fell off the bus", node="gpu-0003", gpu=5, xid=79, detected_at=ts(t(-2.5)))
    events.append(event("run.failed", t(-3), "b-failed", run="llama-70b", **failed))
    return events


def post_events(live_server, token: str, events: list[dict]) -> None:
    """As an alert source would: over HTTP, so the live server applies them and its detectors open the incident."""
    request = urllib.request.Request(
        live_server.url + "/api/v1/events",
        data=json.dumps(events).encode(),
        headers={"Content-Type": "application/cloudevents-batch+json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status in (200, 202)


# --- The report's week (its hand-computed figures: tests/incidents/reports/test_report.py) ---

SINCE = datetime(2026, 3, 2, tzinfo=UTC)
UNTIL = SINCE + timedelta(days=7)
NOW = UNTIL + timedelta(hours=1)


def d(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return SINCE + timedelta(days=day, hours=hour, minutes=minute, seconds=second)


class Week:
    def __init__(self):
        self.events, self.sent = [], 0

    def add(self, type_, when, **data):
        self.events.append(event(type_, when, f"w-{self.sent + len(self.events):03d}", **data))

    def take(self):
        events, self.events = self.events, []
        self.sent += len(events)
        return events


def _act(when: datetime, action, incident: Incident, **kwargs):
    with time_machine.travel(when, tick=False):
        action(incident=Incident.objects.get(pk=incident.pk), actor=services.FLEETOPS, **kwargs)


def build_week(post):
    """Post the week as it happens: FleetOps notices each failure when its batch arrives (the frozen clock)."""
    w = Week()
    w.add("node.state", d(0, 0), node="n9", state="hot_spare", reason="burn-in passed", cluster="c1")
    w.add(
        "run.started",
        d(0, 0),
        run="ra",
        cluster="c1",
        gpus=16,
        nodes=["n1", "n2"],
        job_id="1",
        checkpoint_interval_s=3600,
    )
    w.add("checkpoint.started", d(0, 9, 30), run="ra", step=100)
    w.add("checkpoint.completed", d(0, 9, 31), run="ra", step=100, blocking_s=60.0, bytes=10**12, tier="durable")
    w.add(
        "run.failed",
        d(0, 10),
        run="ra",
        reason="GPU lost",
        node="n2",
        gpu=1,
        category="faulty_gpu",
        detected_at=ts(d(0, 10, 5)),
    )
    with time_machine.travel(d(0, 10, 5), tick=False):
        post(w.take())
    first = Incident.objects.get()
    _act(d(0, 10, 8), services.incident_acknowledge, first)
    w.add("run.started", d(0, 10, 20), run="ra", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="2")
    w.add("run.restored", d(0, 10, 30), run="ra", from_step=100)
    with time_machine.travel(d(0, 10, 31), tick=False):
        post(w.take())
    _act(d(0, 11), services.incident_resolve, first, override_reason="replaced")  # before the next fault of ra
    w.add("checkpoint.started", d(1, 21), run="ra", step=200)
    w.add("checkpoint.completed", d(1, 21, 1), run="ra", step=200, blocking_s=60.0, bytes=10**12, tier="durable")
    w.add(
        "run.failed",
        d(1, 22),
        run="ra",
        reason="HBM",
        node="n2",
        gpu=2,
        category="gpu_hbm3",
        detected_at=ts(d(1, 22, 10)),
    )
    with time_machine.travel(d(1, 22, 10), tick=False):
        post(w.take())
    second = Incident.objects.exclude(pk=first.pk).get()
    _act(d(1, 22, 30), services.incident_acknowledge, second)
    w.add("run.started", d(1, 22, 40), run="ra", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="3")
    w.add("run.restored", d(1, 22, 50), run="ra", from_step=200)
    w.add("run.completed", d(2, 0), run="ra")
    w.add("run.started", d(4, 12), run="rb", cluster="c1", gpus=8, nodes=["n3"], job_id="4", checkpoint_interval_s=1800)
    w.add("checkpoint.started", d(5, 2), run="rb", step=50)
    w.add("checkpoint.completed", d(5, 2, 0, 30), run="rb", step=50, blocking_s=30.0, bytes=10**12, tier="durable")
    w.add(
        "run.failed",
        d(5, 3),
        run="rb",
        reason="link down",
        node="n3",
        category="network_switch_cable",
        detected_at=ts(d(5, 3, 1)),
    )
    with time_machine.travel(d(5, 3, 1), tick=False):
        post(w.take())
    _act(d(1, 23, 30), services.incident_resolve, second, override_reason="replaced")
    third = Incident.objects.exclude(pk__in=[first.pk, second.pk]).get()
    _act(d(5, 3, 4), services.incident_acknowledge, third)
    w.add("run.started", d(5, 3, 11), run="rb", cluster="c1", gpus=8, nodes=["n3"], job_id="5")
    w.add("run.restored", d(5, 3, 16), run="rb", from_step=50)
    w.add("run.completed", d(5, 12), run="rb")
    with time_machine.travel(d(5, 12, 1), tick=False):
        post(w.take())
    Node.objects.filter(hostname__in=["n1", "n2"]).update(rack="r1")
    Node.objects.filter(hostname="n3").update(rack="r2")
    n2, n3 = Node.objects.get(hostname="n2"), Node.objects.get(hostname="n3")
    finding = dict(severity="warning", first_seen_at=d(1, 22, 10), last_seen_at=d(1, 22, 10))
    Alert.objects.create(
        incident=second, fingerprint="lemon:n2", kind="lemon", summary="n2: 2 in 7 d", node=n2, **finding
    )
    late = dict(first_seen_at=UNTIL + timedelta(hours=2), last_seen_at=UNTIL + timedelta(hours=2))
    Alert.objects.create(
        incident=third, fingerprint="sdc:n3", kind="sdc", severity="warning", summary="next week", node=n3, **late
    )
