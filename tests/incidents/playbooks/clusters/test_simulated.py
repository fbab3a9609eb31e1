"""The simulated cluster: FleetOps' own record as the scheduler, every change an event in the log."""

import uuid
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest

from incidents.playbooks.clusters.base import NotFoundError, RefusedError
from incidents.playbooks.clusters.simulated import SOURCE, SimulatedAdapter
from runs.domain.cloudevents import parse_events
from runs.models import Attempt, Cluster, Event, Node, Run
from runs.services import events_apply, events_ingest

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NODES = ["sim-n001", "sim-n002", "sim-n003", "sim-n004"]
SPARES = ["sim-n005", "sim-n006"]

pytestmark = pytest.mark.django_db


def post(*events: tuple[str, dict], at: datetime = T0) -> None:
    raw = [
        {
            "specversion": "1.0",
            "id": uuid.uuid4().hex,
            "source": "tests",
            "type": type_,
            "time": at.isoformat(),
            "data": data,
        }
        for type_, data in events
    ]
    parsed, problems = parse_events(raw, max_batch=100)
    assert problems == []
    events_apply(event_ids=events_ingest(events=parsed).event_ids)


@pytest.fixture
def sim() -> SimulatedAdapter:
    """Four nodes training `llama-sim` as job 4242, two hot spares; the adapter's clock ticks a second a call."""
    post(
        *[("node.heartbeat", {"node": name, "cluster": "sim"}) for name in NODES + SPARES],
        *[("node.state", {"node": name, "state": "hot_spare", "reason": "Passed burn-in"}) for name in SPARES],
        ("run.started", {"run": "llama-sim", "cluster": "sim", "gpus": 32, "nodes": NODES, "job_id": "4242"}),
    )
    ticks = count(1)
    return SimulatedAdapter(Cluster.objects.get(name="sim"), now=lambda: T0 + timedelta(seconds=next(ticks)))


def ours():
    return Event.objects.filter(source=SOURCE).order_by("id")


def test_it_reads_nodes_and_jobs_from_the_record(sim):
    node = sim.node_status("sim-n002")
    assert (node.state, node.jobs, node.pool) == ("in_service", ["4242"], "main")
    assert [(s.name, s.state, s.pool) for s in sim.list_spares()] == [
        ("sim-n005", "hot_spare", "spare"),
        ("sim-n006", "hot_spare", "spare"),
    ]
    job = sim.job_status("4242")
    assert (job.state, job.nodes, job.restart_count) == ("running", NODES, 0)


def test_drain_and_requeue_replace_the_node_with_a_spare_through_events(sim):
    drained = sim.ensure_drained("sim-n002", "xid 79 on GPU 3")
    assert drained.changed
    assert (drained.node.state, drained.node.reason) == ("draining", "xid 79 on GPU 3")  # job 4242 still on it
    assert not sim.ensure_drained("sim-n002", "again").changed
    assert [(e.type, e.data["state"]) for e in ours()] == [("node.state", "draining")]

    requeued = sim.requeue_job("4242", seen_restart_count=0)
    assert requeued.changed
    assert (requeued.job.nodes, requeued.job.restart_count) == (["sim-n001", "sim-n003", "sim-n004", "sim-n005"], 1)
    assert "sim-n002 -> sim-n005" in requeued.summary
    assert not sim.requeue_job("4242", seen_restart_count=0).changed  # the same step, retried

    run = Run.objects.get(name="llama-sim")
    assert run.state == "running"
    assert list(Attempt.objects.filter(run=run).values_list("number", "job_id", "end_reason")) == [
        (1, "4242", "superseded"),
        (2, "4242", ""),
    ]
    assert Node.objects.get(hostname="sim-n005").state_reason == "Joined llama-sim in place of sim-n002"
    assert sim.node_status("sim-n002").state == "cordoned"
    assert [s.name for s in sim.list_spares()] == ["sim-n006"]
    assert [(e.type, e.data.get("node") or e.data["run"]) for e in ours()] == [
        ("node.state", "sim-n002"),
        ("node.state", "sim-n005"),
        ("node.state", "sim-n002"),
        ("run.started", "llama-sim"),
    ]


def test_requeue_takes_the_spare_it_is_given(sim):
    sim.ensure_drained("sim-n004", "nvlink errors")
    done = sim.requeue_job("4242", exclude="sim-n001", onto=["sim-n006"])  # a name or a list of names
    assert done.job.nodes == ["sim-n002", "sim-n003", "sim-n005", "sim-n006"]
    assert "sim-n001 -> sim-n006" in done.summary and "sim-n004 -> sim-n005" in done.summary
    with pytest.raises(RefusedError, match="not a hot spare"):
        sim.requeue_job("4242", onto=["sim-n002"])


def test_repair_pool_health_check_and_return_to_service(sim):
    post(
        (
            "gpu.health",
            {
                "node": "sim-n003",
                "gpu": 5,
                "temperature_c": 71.0,
                "throttle_reasons": [],
                "nvlink_errors": 0,
                "recovery_action": 2,
            },
        ),
    )
    assert sim.ensure_in_pool("sim-n002", "repair").node.state == "in_repair"
    assert not sim.ensure_in_pool("sim-n002", "repair").changed

    passed = sim.health_check("sim-n002", "dcgm_diag_r3")
    assert (passed.state, passed.passed, passed.details) == ("passed", True, "all GPUs clean")
    failed = sim.health_check("sim-n003", "dcgm_diag_r3")
    assert (failed.state, failed.details) == ("failed", "gpu5: recovery action 2")
    assert sim.health_check_result("sim-n003", "dcgm_diag_r3") == failed
    with pytest.raises(NotFoundError):
        sim.health_check_result("sim-n002", "nccl_all_reduce")

    back = sim.ensure_resumed("sim-n002")
    assert back.changed and back.node.state == "in_service"
    assert sim.ensure_in_pool("sim-n002", "spare").node.state == "hot_spare"
    assert not sim.ensure_resumed("sim-n002").changed


def test_errors_are_typed(sim):
    with pytest.raises(NotFoundError):
        sim.node_status("sim-n999")
    with pytest.raises(NotFoundError):
        sim.job_status("1")
    with pytest.raises(RefusedError, match="unknown pool"):
        sim.ensure_in_pool("sim-n001", "gpu")

    for name in ("sim-n001", "sim-n002", "sim-n003"):
        sim.ensure_drained(name, "rack power")
    with pytest.raises(RefusedError, match="3 node"):
        sim.requeue_job("4242")  # two spares for three nodes

    post(("run.completed", {"run": "llama-sim"}), at=T0 + timedelta(hours=1))
    with pytest.raises(RefusedError, match="has ended"):
        sim.requeue_job("4242")


def test_dry_run_plans_name_the_events(sim):
    assert sim.describe_plan("ensure_drained", name="sim-n002", reason="xid 79") == (
        "post node.state sim-n002 -> draining or cordoned (reason 'xid 79')"
    )
    assert sim.describe_plan("ensure_in_pool", name="sim-n002", pool="repair") == (
        "post node.state sim-n002 -> in_repair (pool repair)"
    )
    assert not ours().exists()
