"""One run with one failure and restart, as CloudEvents, and a snapshot of the record it must give."""

import json
from datetime import UTC, datetime, timedelta

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
