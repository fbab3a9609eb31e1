"""Shrink and continue against the real Slurm controller: a node of a job that fills the partition dies, no hot spare
is free, so the job goes on with its other nodes and grows back once a spare passes the gate.

The batch script writes what Slurm tells it at each start (its restart count and node list, SLURM_JOB_NUM_NODES):
the world size the training client learns, and reports in its run.started. The run's record keeps its full size, the
shrunk attempt its own, and the goodput charges the missing node's share of the shrunk stretch to "shrunk".
"""

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from incidents.models import PlaybookExecution
from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig
from incidents.playbooks.engine import playbook_advance
from runs import selectors
from runs.models import Attempt, Cluster, Run
from tests.services import wait_for
from tests.slurm import start_training_job
from tests.stories import event

BATCH = "application/cloudevents-batch+json"
GPUS_PER_NODE = 8
MAIN = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
SPARES = ["gpu-005", "gpu-006"]


def ts_now(offset_s: float = 0.0):
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(seconds=offset_s)


@pytest.fixture
def slurm(slurm_cluster) -> SlurmAdapter:
    return SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=20))


@pytest.fixture
def world(slurm_cluster, slurm):
    """A requeueable job on all four main nodes whose script logs each start's world; the cluster put back after."""
    folder = Path(tempfile.mkdtemp(prefix="fleetops-world-"))
    folder.chmod(0o777)
    log = folder / "world.log"
    script = (
        f'echo "${{SLURM_RESTART_COUNT:-0}} $SLURM_JOB_NUM_NODES '
        f'$(scontrol show hostnames $SLURM_JOB_NODELIST | paste -sd, -)" >> {log}; sleep 600'
    )
    job_id, _job = start_training_job(slurm_cluster, slurm, nodes=len(MAIN), script=script)
    try:
        yield job_id, log
    finally:
        slurm_cluster.run("scancel", job_id)
        for name in SPARES:
            slurm.ensure_in_pool(name, "spare")
        for name in MAIN:
            slurm.ensure_in_pool(name, "main")
            slurm.ensure_resumed(name)
        for name in MAIN + SPARES:
            wait_for(lambda n=name: slurm.node_status(n).raw_state == "IDLE", timeout=30, what=f"{name} idle")
        shutil.rmtree(folder, ignore_errors=True)


def starts(log: Path) -> list[tuple[int, int, list[str]]]:
    """What the job was told at each start: (restart count, SLURM_JOB_NUM_NODES, its nodes)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(r), int(n), hosts.split(",")) for r, n, hosts in (line.split() for line in lines)]


def told_at_restart(log: Path, restart: int) -> tuple[int, list[str]]:
    """The job's start number `restart`, as its script logged it, once it has."""
    seen = wait_for(
        lambda: next((s for s in starts(log) if s[0] == restart), None), timeout=30, what=f"start {restart} logged"
    )
    return seen[1], seen[2]


@pytest.mark.reliability(
    "A node of a job that fills its partition dies and no hot spare is free",
    how="real Slurm 22.05 on loopback: an Xid 79 storm, shrink-and-continue started from the incident page, the "
    "drained node returned to the spare pool later",
    outcome="the job goes on with 3 of its 4 nodes (Slurm tells it SLURM_JOB_NUM_NODES=3) and grows back to 4 onto "
    "the returned node; the record keeps the run's 32 GPUs and the shrunk attempt's 24; the goodput charges a "
    "quarter of the shrunk stretch to 'shrunk'",
)
def test_a_job_with_no_spare_goes_on_with_its_other_nodes_and_grows_back_on_slurm(
    writer, oncall, slurm, slurm_cluster, world, settings, django_capture_on_commit_callbacks
):
    settings.PLAYBOOK_MAX_OUT_SHARE = 0.9  # a six-node test cluster whose two spares are at repair: 3 of 6 out
    settings.PLAYBOOK_AUTO_START = False  # the on-call engineer starts shrink-and-continue from the incident page
    job_id, log = world
    Cluster.objects.create(name="loopback", scheduler="slurm", api_url=slurm_cluster.conf)
    for name in SPARES:  # both spares out at repair: none passes the gate
        slurm.ensure_in_pool(name, "repair")
    bad = MAIN[1]
    full = len(MAIN) * GPUS_PER_NODE

    def post(*events):
        with django_capture_on_commit_callbacks(execute=True):
            response = writer.post("/api/v1/events", json.dumps(list(events)), content_type=BATCH)
        assert response.status_code == 202, response.content

    def trainer_started(key: str, restart: int, from_step: int) -> None:
        """The training client at a start: the world Slurm gave it, as its run.started, then its restore."""
        nodes, hosts = told_at_restart(log, restart)
        post(
            event("run.started", ts_now(), f"{key}-start", run="llm", cluster="loopback",
                  gpus=nodes * GPUS_PER_NODE, nodes=hosts, job_id=job_id),
            event("run.restored", ts_now(0.001), f"{key}-restore", run="llm", from_step=from_step),
        )  # fmt: skip

    def trainer_saved(step: int):
        at = ts_now()
        post(
            event("checkpoint.started", at, f"ckpt-{step}-start", run="llm", step=step),
            event("checkpoint.completed", ts_now(0.1), f"ckpt-{step}-done", run="llm", step=step, blocking_s=0.1,
                  tier="durable", bytes=1),
        )  # fmt: skip
        return at

    trainer_started("a1", 0, 0)
    trainer_saved(100)
    post(
        *[
            event("gpu.xid", ts_now(i * 0.01), f"xid-{i}", source="dcgm://" + bad, node=bad, gpu=2, xid=79,
                  message="GPU has fallen off the bus")
            for i in range(20)
        ]
    )  # fmt: skip
    incident = Run.objects.get(name="llm").incidents.get()
    with django_capture_on_commit_callbacks(execute=True):
        response = oncall.post(
            f"/incidents/{incident.pk}/playbooks/start", {"playbook": "shrink-and-continue", "node": bad}
        )
    assert response.status_code in (200, 302), response.content
    execution = PlaybookExecution.objects.get(playbook="shrink-and-continue")
    execution.refresh_from_db()
    assert execution.status == "running", execution.error  # shrunk, and polling for a spare
    choice = execution.steps.get(name="shrink or wait").output
    assert choice["decision"] == "shrink" and choice["by"] == "the advisor's pricing", choice
    assert choice["shrink_cost_node_s"] < choice["wait_cost_node_s"]

    # Slurm restarted the job on the three good nodes and told it so; the client reports that world.
    nodes, hosts = told_at_restart(log, 1)
    assert (nodes, sorted(hosts)) == (3, sorted(set(MAIN) - {bad}))
    running = slurm.job_status(job_id)
    assert running.state == "running" and sorted(running.nodes) == sorted(hosts)
    trainer_started("a2", 1, 100)
    assert execution.steps.get(name="wait for spare").output["summary"].startswith("waiting: no hot spare")

    time.sleep(2)  # the shrunk stretch: long enough to measure to the microsecond
    # The drained node itself comes back through the gate (return-to-service: repaired, resumed, into the spares),
    # the only spare on a small cluster: the job is grown back onto the node it was kept off.
    slurm.ensure_in_pool(bad, "spare")
    slurm.ensure_resumed(bad)
    wait_for(lambda: slurm.node_status(bad).state == "hot_spare", timeout=20, what=f"{bad} a ready spare")
    saved_at = trainer_saved(200)  # the trainer saves before the planned stop that grows it back
    with django_capture_on_commit_callbacks(execute=True):
        playbook_advance(execution_id=execution.pk)  # the poll's next look (a countdown, or resume-playbooks)
    execution.refresh_from_db()
    steps = {s.name: (s.status, s.output.get("summary"), s.error) for s in execution.steps.order_by("index")}
    assert execution.status == "succeeded", "\n".join(map(str, steps.items()))
    nodes, hosts = told_at_restart(log, 2)
    assert (nodes, sorted(hosts)) == (len(MAIN), sorted(MAIN))  # all four again, the repaired one included
    trainer_started("a3", 2, 200)

    run = Run.objects.get(name="llm")
    attempts = list(run.attempts.order_by("number"))
    assert run.gpu_count == full  # the record keeps the run's size
    assert [a.gpus for a in attempts] == [full, full - GPUS_PER_NODE, full]
    shrunk = attempts[1]
    interruptions = list(run.interruptions.order_by("fault_at"))
    assert [i.planned for i in interruptions] == [False, True]  # the fault, then growing back on purpose
    assert interruptions[1].fault_at == shrunk.ended_at

    report = selectors.run_goodput_get(run=run, since=None, until=None, now=run.attempts.last().started_at)
    trained = (saved_at - interruptions[0].resumed_at).total_seconds()  # the shrunk stretch's kept training
    assert report.total.shrunk_s == pytest.approx(trained * GPUS_PER_NODE / full, abs=1e-6)
    assert report.total.shrunk_s > 0.4
    steps = {s.name: s.output.get("summary") for s in execution.steps.order_by("index")}
    print(f"\nshrink and continue on Slurm: {json.dumps(steps, indent=1)}\nshrunk {report.total.shrunk_s:.3f} s")
    page = oncall.get(f"/runs/{run.name}").content.decode()
    assert f"{full - GPUS_PER_NODE}/{full}" in page and "shrunk" in page
    assert Attempt.objects.filter(run=run, gpus=full - GPUS_PER_NODE).count() == 1
