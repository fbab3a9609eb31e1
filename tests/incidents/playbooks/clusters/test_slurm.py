"""The Slurm adapter against a real slurmctld and six slurmd on loopback (tests/slurm.py).

Each test leaves the nodes it touched as it found them: drained ones resumed, moved ones back in their pool,
its jobs cancelled. The pure parts (host lists, error words, states, plans) need no cluster.
"""

import re
import shutil
import subprocess
from datetime import UTC, datetime

import pytest

from incidents.playbooks.clusters.base import NotFoundError, RefusedError, TransientError
from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig, classify, expand_hostlist, node_state
from incidents.playbooks.clusters.slurm.parse import sacct_job
from tests.services import free_ports, wait_for

CHECKS = {
    # The fake GPUs are device files under the cluster's dev/; the sleep keeps the job alive for a second look.
    "gpu_devices": "sleep 2; test $(ls {root}/dev | grep -c nvidia) -eq 8",
    "dcgm_diag_r1": "dcgmi diag -r 1",  # no DCGM here: exit 127, a failed check
}


@pytest.fixture
def slurm(slurm_cluster) -> SlurmAdapter:
    checks = {name: command.format(root=slurm_cluster.root) for name, command in CHECKS.items()}
    return SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, health_checks=checks, timeout_s=20))


def submit(cluster, *args: str) -> str:
    return cluster.run("sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *args).strip().split(";")[0]


def back_in_service(slurm: SlurmAdapter, name: str) -> None:
    slurm.ensure_resumed(name)
    wait_for(lambda: slurm.node_status(name).raw_state == "IDLE", timeout=15, what=f"{name} idle")


def test_it_reads_nodes_in_fleetops_terms(slurm):
    node = slurm.node_status("gpu-001")
    assert (node.state, node.raw_state, node.pool, node.jobs, node.reason) == ("in_service", "IDLE", "main", [], "")

    spare = slurm.node_status("gpu-005")
    assert (spare.state, spare.pool) == ("hot_spare", "spare")


def test_it_drains_with_the_reason_slurm_shows_and_only_once(slurm, slurm_cluster):
    try:
        done = slurm.ensure_drained("gpu-004", "xid 79 on GPU 3")
        assert done.changed
        assert (done.node.state, done.node.raw_state, done.node.reason) == ("cordoned", "IDLE+DRAIN", "xid 79 on GPU 3")
        assert re.search(r"^xid 79 on GPU 3 .* gpu-004$", slurm_cluster.run("sinfo", "-R", "-h"), re.M)

        again = slurm.ensure_drained("gpu-004", "a second opinion")
        assert not again.changed
        assert again.node.reason == "xid 79 on GPU 3"  # the first reason stays
    finally:
        back_in_service(slurm, "gpu-004")


def test_it_resumes_a_drained_node(slurm, slurm_cluster):
    slurm_cluster.run("scontrol", "update", "nodename=gpu-003", "state=drain", "reason=by hand")

    done = slurm.ensure_resumed("gpu-003")
    assert done.changed
    node = wait_for(
        lambda: (status := slurm.node_status("gpu-003")).raw_state == "IDLE" and status,
        timeout=15,
        what="gpu-003 idle",  # `idle*` for about a second while slurmd answers
    )
    assert (node.state, node.reason) == ("in_service", "")
    assert not slurm.ensure_resumed("gpu-003").changed


def test_it_lists_spares_and_moves_nodes_between_pools(slurm, slurm_cluster):
    spares = slurm.list_spares()
    assert [(s.name, s.state, s.pool) for s in spares] == [
        ("gpu-005", "hot_spare", "spare"),
        ("gpu-006", "hot_spare", "spare"),
    ]

    try:
        moved = slurm.ensure_in_pool("gpu-005", "main")
        assert moved.changed
        assert (moved.node.state, moved.node.pool) == ("in_service", "main")
        assert slurm_cluster.run("sinfo", "-h", "-p", "gpu", "-N", "-o", "%N").split() == [
            "gpu-001",
            "gpu-002",
            "gpu-003",
            "gpu-004",
            "gpu-005",
        ]
        assert slurm_cluster.run("sinfo", "-h", "-p", "spare", "-N", "-o", "%N").split() == ["gpu-006"]
        assert not slurm.ensure_in_pool("gpu-005", "main").changed
        assert [s.name for s in slurm.list_spares()] == ["gpu-006"]
    finally:
        back = slurm.ensure_in_pool("gpu-005", "spare")
    assert (back.node.state, back.node.pool) == ("hot_spare", "spare")
    assert slurm_cluster.run("sinfo", "-h", "-p", "gpu", "-N", "-o", "%N").split() == [
        f"gpu-00{i}" for i in range(1, 5)
    ]


def test_drain_and_requeue_moves_a_job_from_the_bad_node_onto_a_spare(slurm, slurm_cluster):
    """The playbook's core on a two-node training job: drain the bad node, requeue onto the hot spare."""
    job_id = submit(slurm_cluster, "--partition=gpu", "--nodes=2", "--requeue", "--wrap=sleep 300")
    bad = None
    try:
        job = wait_for(lambda: (j := slurm.job_status(job_id)).state == "running" and j, timeout=15, what="job running")
        assert (len(job.nodes), job.restart_count) == (2, 0)
        bad = job.nodes[0]

        drained = slurm.ensure_drained(bad, "xid 79")
        assert (drained.node.state, drained.node.jobs) == ("draining", [job_id])  # Slurm lets the job run on

        requeued = slurm.requeue_job(job_id, seen_restart_count=0, exclude=[bad], onto=["gpu-005"])
        assert requeued.changed
        assert requeued.job.restart_count == 1
        assert slurm.node_status("gpu-005").pool == "main"  # the spare joined the job's partition
        placed = slurm_cluster.run("scontrol", "-o", "show", "job", job_id)
        assert "ReqNodeList=gpu-005 " in placed and f"ExcNodeList={bad} " in placed
        # A retry of the same step (the engine crashed after the requeue) finds the restart done.
        repeat = slurm.requeue_job(job_id, seen_restart_count=0, exclude=[bad], onto=["gpu-005"])
        assert not repeat.changed and repeat.job.restart_count == 1
        assert "already restarted" in repeat.summary

        wait_for(lambda: slurm.job_status(job_id).state == "pending", timeout=10, what="job pending")
        assert not slurm.requeue_job(job_id).changed  # waiting to run already

        again = wait_for(
            lambda: (j := slurm.job_status(job_id)).state == "running" and j, timeout=40, what="job running again"
        )
        assert again.restart_count == 1
        assert "gpu-005" in again.nodes and bad not in again.nodes
        assert slurm.node_status(bad).state == "cordoned"  # drained, and nothing left on it
    finally:
        slurm_cluster.run("scancel", job_id)
        slurm.ensure_in_pool("gpu-005", "spare")
        if bad:
            back_in_service(slurm, bad)


def test_health_checks_run_in_the_repair_pool(slurm):
    node = "gpu-006"
    try:
        slurm.ensure_drained(node, "burn-in after GPU swap")
        with pytest.raises(RefusedError, match="drained"):
            slurm.health_check(node, "gpu_devices")

        in_repair = slurm.ensure_in_pool(node, "repair")
        assert (in_repair.node.state, in_repair.node.pool) == ("in_repair", "repair")
        assert slurm.ensure_resumed(node).node.state == "in_repair"  # takes only health checks now

        started = slurm.health_check(node, "gpu_devices")
        assert started.state in ("pending", "running") and started.ref
        assert slurm.health_check(node, "gpu_devices").ref == started.ref  # one run at a time
        failing = slurm.health_check(node, "dcgm_diag_r1")

        passed = wait_for(
            lambda: (r := slurm.health_check_result(node, "gpu_devices")).done and r, timeout=30, what="check done"
        )
        assert (passed.state, passed.ref, passed.details) == ("passed", started.ref, "exit code 0")
        failed = wait_for(
            lambda: (r := slurm.health_check_result(node, "dcgm_diag_r1")).done and r, timeout=30, what="check done"
        )
        assert (failed.state, failed.ref, failed.details) == ("failed", failing.ref, "FAILED, exit code 127")

        with pytest.raises(NotFoundError):
            slurm.health_check_result(node, "nvidia_smi")
    finally:
        slurm.ensure_in_pool(node, "spare")
        back_in_service(slurm, node)
    assert slurm.node_status(node).state == "hot_spare"


def test_errors_are_typed(slurm, slurm_cluster):
    with pytest.raises(NotFoundError):
        slurm.node_status("gpu-999")
    with pytest.raises(NotFoundError):
        slurm.ensure_drained("gpu-999", "xid 79")
    with pytest.raises(NotFoundError):
        slurm.ensure_in_pool("gpu-999", "spare")
    with pytest.raises(NotFoundError):
        slurm.job_status("999999")
    with pytest.raises(RefusedError, match="unknown pool"):
        slurm.ensure_in_pool("gpu-001", "gpu")
    with pytest.raises(RefusedError, match="unknown health check"):
        slurm.health_check("gpu-001", "memtest")
    with pytest.raises(RefusedError, match="needs a reason"):
        slurm.ensure_drained("gpu-001", " ")

    done = submit(slurm_cluster, "--partition=gpu", "--wrap=true")
    pinned = submit(slurm_cluster, "--partition=gpu", "--no-requeue", "--wrap=sleep 300")
    try:
        wait_for(lambda: slurm.job_status(done).state == "completed", timeout=15, what="job completed")
        with pytest.raises(RefusedError, match="has ended"):
            slurm.requeue_job(done)
        wait_for(lambda: slurm.job_status(pinned).state == "running", timeout=15, what="job running")
        with pytest.raises(RefusedError, match="presently disabled"):  # submitted with --no-requeue
            slurm.requeue_job(pinned)
    finally:
        slurm_cluster.run("scancel", pinned)


class Counting(SlurmAdapter):
    """The real adapter, remembering which client each call ran."""

    def __init__(self, config):
        super().__init__(config)
        self.ran = []

    def _run(self, args):
        self.ran.append(args[0])
        return super()._run(args)


def test_jobs_are_read_at_once_with_how_they_ended(slurm_cluster):
    """The reconciliation's read: one squeue for every job asked; one sacct for those squeue no longer shows, which
    a cluster without accounting refuses, so a job Slurm has forgotten is left out rather than guessed."""
    done = submit(slurm_cluster, "--partition=gpu", "--wrap=true")
    failed = submit(slurm_cluster, "--partition=gpu", "--wrap=sleep 1; exit 3")
    going = submit(slurm_cluster, "--partition=gpu", "--wrap=sleep 300")
    slurm = Counting(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=20))
    try:
        wait_for(lambda: slurm.job_status(done).state == "completed", timeout=15, what="job completed")
        wait_for(lambda: slurm.job_status(failed).state == "failed", timeout=15, what="job failed")
        slurm.ran.clear()

        jobs = slurm.jobs_status([done, failed, going, "999999", done])

        assert slurm.ran == ["squeue", "sacct"]
        assert set(jobs) == {done, failed, going}
        assert (jobs[done].state, jobs[done].raw_state, jobs[done].reason) == ("completed", "COMPLETED", "")
        assert (jobs[failed].state, jobs[failed].reason) == ("failed", "NonZeroExitCode, exit code 3")
        assert jobs[done].ended_at is not None and jobs[failed].ended_at is not None
        assert (jobs[going].state, jobs[going].ended_at, jobs[going].reason) in {
            ("running", None, ""),
            ("pending", None, ""),
        }
    finally:
        slurm_cluster.run("scancel", going)


def test_a_controller_that_does_not_answer_is_transient(slurm_cluster, tmp_path):
    port = free_ports(1)
    conf = slurm_cluster.root.joinpath("slurm.conf").read_text()
    conf = re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={port}", conf) + "MessageTimeout=1\n"
    (tmp_path / "slurm.conf").write_text(conf)
    shutil.copy(slurm_cluster.root / "gres.conf", tmp_path / "gres.conf")
    down = SlurmAdapter(SlurmConfig(slurm_conf=str(tmp_path / "slurm.conf"), timeout_s=20))

    with pytest.raises(TransientError):
        down.node_status("gpu-001")
    with pytest.raises(TransientError):
        down.ensure_drained("gpu-001", "xid 79")
    with pytest.raises(TransientError):
        down.requeue_job("1")

    slow = SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=0.001))
    with pytest.raises(TransientError, match="did not answer within"):
        slow.node_status("gpu-001")


def test_a_missing_client_is_refused(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RefusedError, match="not installed"):
        SlurmAdapter(SlurmConfig()).node_status("gpu-001")


# -- without a cluster


def test_dry_run_plans_are_the_commands():
    slurm = SlurmAdapter(SlurmConfig(health_checks={"nvidia_smi": "nvidia-smi -L"}))
    assert slurm.describe_plan("ensure_drained", name="gpu-003", reason="xid 79") == (
        "scontrol update nodename=gpu-003 state=drain reason='xid 79'"
    )
    assert slurm.describe_plan("ensure_resumed", name="gpu-003") == "scontrol update nodename=gpu-003 state=resume"
    assert slurm.describe_plan("requeue_job", job_id="4242") == "scontrol requeue 4242"
    assert slurm.describe_plan("requeue_job", job_id="4242", exclude=["gpu-003"], onto=["gpu-005"]).endswith(
        "; scontrol requeue 4242; scontrol update jobid=4242 excnodelist=gpu-003 reqnodelist=gpu-005"
    )
    assert slurm.describe_plan("job_status", job_id="4242") == "squeue --json (job 4242)"
    assert slurm.describe_plan("list_spares") == "sinfo --json (the nodes of partition spare)"
    assert slurm.describe_plan("ensure_in_pool", name="gpu-005", pool="main").startswith(
        "scontrol update partitionname=gpu nodes=<its nodes>,gpu-005; scontrol update partitionname=spare"
    )
    assert slurm.describe_plan("health_check", name="gpu-003", check="nvidia_smi") == (
        "sbatch --parsable --partition='<its partition>' --nodelist=gpu-003 --job-name=fleetops-hc:nvidia_smi "
        "--time=30 --no-requeue --output=/dev/null --chdir=/ --wrap='nvidia-smi -L'"
    )
    with pytest.raises(ValueError, match="no plan"):
        slurm.describe_plan("reboot", name="gpu-003")


def test_accounting_records_read_as_jobs():
    """`sacct --json` rows in the shape of Slurm 22.05's dbv0.0.38 job schema (the OpenAPI description its
    openapi_dbv0_0_38 plugin carries) and of 23.02 on, where numbers are {"set", "number"} and states lists."""
    old = {
        "job_id": 4711,
        "nodes": "gpu-[001-002]",
        "state": {"current": "TIMEOUT", "reason": "None"},
        "exit_code": {"status": "SIGNALED", "return_code": 0, "signal": {"signal_id": 15, "name": "TERM"}},
        "time": {"end": 1772361000, "start": 1772300000},
    }
    job = sacct_job(old)
    assert (job.job_id, job.state, job.raw_state, job.reason) == ("4711", "failed", "TIMEOUT", "signal 15")
    assert (job.nodes, job.ended_at) == (["gpu-001", "gpu-002"], datetime(2026, 3, 1, 10, 30, tzinfo=UTC))

    new = {
        "job_id": 4712,
        "state": {"current": ["COMPLETED"], "reason": "None"},
        "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "infinite": False, "number": 0}},
        "time": {"end": 1772361000},
    }
    assert (sacct_job(new).state, sacct_job(new).reason) == ("completed", "")
    assert sacct_job({"job_id": 4713, "state": {"current": "RUNNING"}}).ended_at is None
    assert sacct_job({"job_id": 4714, "state": {}}) is None  # no state said: not read as a failure


def test_host_lists_expand_like_scontrol_show_hostnames():
    assert expand_hostlist("gpu-[001-003,007],login1") == ["gpu-001", "gpu-002", "gpu-003", "gpu-007", "login1"]
    assert expand_hostlist("rack[1-2]-n[08-09]") == ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]
    assert expand_hostlist("") == expand_hostlist("(null)") == []
    if shutil.which("scontrol"):
        shown = subprocess.run(
            ["scontrol", "show", "hostnames", "gpu-[001-003,007],login1"], capture_output=True, text=True, check=False
        )
        if shown.returncode == 0:  # it needs no controller, but some builds want a slurm.conf
            assert shown.stdout.split() == expand_hostlist("gpu-[001-003,007],login1")


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("slurm_load_partitions: Unable to contact slurm controller (connect failure)", TransientError),
        ("Unexpected message received for job 2", TransientError),
        ("slurm_update error: Invalid node name specified", NotFoundError),
        ("Invalid job id specified for job 99999", NotFoundError),
        ("Requested operation is presently disabled for job 3", RefusedError),
        ("slurm_update error: Access/permission denied", RefusedError),
    ],
)
def test_client_words_decide_the_error_type(message, kind):
    assert type(classify(message)) is kind


@pytest.mark.parametrize(
    ("base", "flags", "running", "pool", "state"),
    [
        ("idle", [], False, "main", "in_service"),
        ("mixed", ["DRAIN"], True, "main", "draining"),
        ("idle", ["DRAIN"], False, "main", "cordoned"),
        ("idle", ["NOT_RESPONDING"], False, "main", "suspect"),
        ("down", [], False, "main", "suspect"),
        ("idle", [], False, "spare", "hot_spare"),
        ("idle", ["DRAIN"], False, "spare", "cordoned"),
        ("idle", [], False, "repair", "in_repair"),
    ],
)
def test_slurm_states_map_to_fleetops_states(base, flags, running, pool, state):
    assert node_state(base, flags, running_jobs=running, pool=pool) == state


@pytest.mark.reliability(
    "A node drained in Slurm while FleetOps' record says it is in service (forged or stale state)",
    how="the real Slurm cluster, gpu-003 drained with scontrol behind FleetOps' back, the record all in service, "
    "the breaker capped at one node out; a drain of gpu-004 asked for",
    outcome="out_of_service() reads gpu-003 from sinfo; the breaker counts it and refuses gpu-004 (before: it "
    "counted the record's states only)",
)
def test_the_breaker_counts_what_slurm_itself_holds_out(slurm, slurm_cluster, db, settings):
    from types import SimpleNamespace

    from incidents.playbooks import breaker
    from runs.models import Cluster, Node

    cluster = Cluster.objects.create(name="loopback")
    Node.objects.bulk_create([Node(hostname=f"gpu-00{i}", cluster=cluster) for i in range(1, 7)])
    settings.PLAYBOOK_MAX_OUT_NODES, settings.PLAYBOOK_MAX_OUT_SHARE = 1, 0.5  # the cap decides, not the share
    execution = SimpleNamespace(node=Node.objects.get(hostname="gpu-004"), incident_id=None)
    assert slurm.out_of_service() == set()
    breaker.check(execution=execution, cluster=cluster, adapter=slurm)  # nothing out: allowed
    slurm_cluster.run("scontrol", "update", "nodename=gpu-003", "state=drain", "reason=by hand")
    try:
        assert slurm.out_of_service() == {"gpu-003"}
        with pytest.raises(RefusedError, match="over the cap of 1 .out of service now: 1 of 6"):
            breaker.check(execution=execution, cluster=cluster, adapter=slurm)
    finally:
        back_in_service(slurm, "gpu-003")


@pytest.mark.reliability(
    "A run.started listing 400 invented hostnames, to grow the fleet the breaker takes its share of",
    how="the real Slurm cluster (6 nodes), a scheduler token of its cluster starts a run on gpu-001 and 400 made-up "
    "hosts through the intake; gpu-003 drained in Slurm; the breaker capped at 20%; a drain of gpu-004 asked for",
    outcome="refused, 'out of service now: 1 of 6; with this drain: 2 of 6 = 33.3%': the fleet is sinfo's node list, "
    "the invented rows count nowhere (before: 1 of 406, and the drain passed)",
)
def test_the_breaker_takes_its_share_of_what_slurm_lists(
    slurm, slurm_cluster, db, settings, django_capture_on_commit_callbacks
):
    import json
    from types import SimpleNamespace

    from django.utils import timezone

    from incidents.playbooks import breaker
    from runs.models import Cluster, Node
    from tests.security.conftest import client_for
    from tests.stories import event

    cluster = Cluster.objects.create(name="loopback")
    Node.objects.bulk_create([Node(hostname=f"gpu-00{i}", cluster=cluster) for i in range(1, 7)])
    invented = [f"made-up-{i:03d}" for i in range(400)]
    start = event(
        "run.started",
        timezone.now(),
        "s1",
        run="r1",
        job_id="9",
        cluster="loopback",
        gpus=8,
        nodes=["gpu-001", *invented],
    )
    client = client_for(role="scheduler", clusters=["loopback"])
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/events", json.dumps([start]), content_type="application/json")
    assert response.status_code == 202, response.content
    assert Node.objects.filter(cluster=cluster).count() == 406  # what the record holds: every name it was given
    settings.PLAYBOOK_MAX_OUT_NODES, settings.PLAYBOOK_MAX_OUT_SHARE = 100, 0.2
    execution = SimpleNamespace(node=Node.objects.get(hostname="gpu-004"), incident_id=None)
    slurm_cluster.run("scontrol", "update", "nodename=gpu-003", "state=drain", "reason=by hand")
    try:
        with pytest.raises(RefusedError, match=r"out of service now: 1 of 6; with this drain: 2 of 6 = 33.3%"):
            breaker.check(execution=execution, cluster=cluster, adapter=slurm)
    finally:
        back_in_service(slurm, "gpu-003")
    breaker.check(execution=execution, cluster=cluster, adapter=slurm)  # none out: 1 of 6 may go
