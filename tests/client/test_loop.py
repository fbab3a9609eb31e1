"""The whole loop on real parts (issue 19): a GPU falls off the bus under a distributed training job, and FleetOps
brings the job back on a spare with nobody typing anything; every stage of the interruption in FleetOps' goodput
matches the job's own wall-clock log within 2 s, and no event is lost or doubled.

- the project's Slurm cluster on loopback (tests/slurm.py): gpu-001..004 in `gpu`, gpu-005 and gpu-006 hot spares;
- FleetOps under gunicorn, a Celery worker, PostgreSQL and Redis (tests/services.py);
- the node agent in fake-NVML mode on every node (heartbeats, health; the fault injected into one of them);
- a real job: tests/client/trainer.py (torch on CPU, gloo, DDP), 2 nodes x 2 ranks under srun, submitted with
  sbatch --requeue, reporting through fleetops_client, checkpointing with torch.distributed.checkpoint every 10
  steps; its batch script posts the attempt's run.started with contrib/slurm/prolog.sh, as a Prolog would.

The job's own log (job.jsonl): each attempt's start (the batch script's first line), each restore and checkpoint (rank
0 of the trainer). The fault's moment is the test's own stamp of the injection.
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from incidents.detection.services import sdc_detect, stragglers_detect
from incidents.models import Alert, Incident, PlaybookExecution
from runs.models import Checkpoint, Cluster, Event, Interruption, Run
from tests.conftest import make_token, require
from tests.services import Gunicorn, free_ports, session_database_url, wait_for
from tests.slurm import put_back

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
NODES = [f"gpu-{i:03d}" for i in range(1, 7)]
RUN = "loop-run"
CLUSTER = "loopback"
TOLERANCE_S = 2.0


def _database_env() -> dict[str, str]:
    return {"DATABASE_URL": session_database_url(), "CELERY_TASK_ALWAYS_EAGER": "false", "PYTHONUNBUFFERED": "1"}


class Agents:
    """fleetops-agent --fake on every node, each with its own token, spool and fault-injection file."""

    def __init__(self, root: Path, url: str, suffix: str):
        self.root, self.processes = root, []
        for node in NODES:
            scenario = root / f"{node}.json"
            scenario.write_text(json.dumps({"gpus": [{}, {}], "inject": str(self.inject_file(node))}))
            token = make_token(f"agent-{node}-{suffix}", ["events:write"], role="agent", node=node)
            env = os.environ | {"FLEETOPS_TOKEN": token, "FLEETOPS_AGENT_FAKE_NVML": str(scenario)}
            argv = [sys.executable, "-m", "fleetops_agent.main", "--fake", "--url", url, "--node", node]
            argv += ["--cluster", CLUSTER, "--spool-dir", str(root / f"spool-{node}"), "--interval", "5"]
            argv += ["--storm-window", "1", "--log-level", "WARNING"]
            log = (root / f"agent-{node}.log").open("wb")
            self.processes.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))

    def inject_file(self, node: str) -> Path:
        return self.root / f"{node}.inject.jsonl"

    def inject(self, node: str, **event) -> float:
        with self.inject_file(node).open("a") as f:
            f.write(json.dumps(event) + "\n")
        return time.time()

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


class Harness:
    """The loopback Slurm cluster as FleetOps' cluster `loopback`, FleetOps under gunicorn (the worker fixture beside
    it), the agents, the tokens, and a shared folder for the jobs (checkpoints, the client's spools, the job log)."""

    def __init__(self, slurm_cluster, tmp_path: Path):
        self.slurm = slurm_cluster
        Cluster.objects.update_or_create(
            name=CLUSTER, defaults={"scheduler": "slurm", "api_url": slurm_cluster.conf, "max_out_share": 0.5}
        )
        self.shared = Path(tempfile.mkdtemp(prefix="fleetops-loop-"))  # the nodes' shared file system
        self.shared.chmod(0o755)
        self.web = Gunicorn(tmp_path, _database_env())
        self.agents = Agents(tmp_path, self.web.url, suffix=self.shared.name)
        self.scheduler = make_token(f"loop-prolog-{self.shared.name}", ["events:write"], role="scheduler")
        self.trainer = make_token(f"loop-trainer-{self.shared.name}", ["events:write"], role="trainer")
        self.reader = make_token(f"loop-reader-{self.shared.name}", ["read"], role="scheduler")
        self.jobs: list[str] = []
        self.bad = self.spare = None

    def submit(self, run: str, *trainer_args: str, **env: str) -> str:
        """A 2-node, 2-rank-a-node job of tests/client/trainer.py, requeueable; its id."""
        settings = {"FLEETOPS_FLUSH_S": "0.2", "FLEETOPS_STEP_EVERY_S": "0", "FLEETOPS_SAMPLE_EVERY_S": "2", **env}
        script = self.shared / f"{run}.sh"
        script.write_text(
            f"""#!/bin/bash
LOG={self.shared}/{run}.jsonl
printf '{{"t": %s, "event": "start", "restart": %s}}\\n' "$(date +%s.%N)" "${{SLURM_RESTART_COUNT:-0}}" >> $LOG
export FLEETOPS_URL={self.web.url} FLEETOPS_CLUSTER={CLUSTER} FLEETOPS_GPUS_PER_NODE=2
FLEETOPS_TOKEN={self.scheduler} bash {ROOT}/contrib/slurm/prolog.sh
export FLEETOPS_TOKEN={self.trainer} FLEETOPS_SPOOL_DIR={self.shared}/client-spool PYTHONPATH={ROOT} OMP_NUM_THREADS=1
export {" ".join(f"{k}={v}" for k, v in settings.items())}
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$(({free_ports(4)} + ${{SLURM_RESTART_COUNT:-0}}))
exec srun {sys.executable} {ROOT}/tests/client/trainer.py --job-log $LOG --pid-dir {self.shared}/pids \\
  --checkpoint-dir {self.shared}/{run}-checkpoints {" ".join(trainer_args)}
"""
        )
        script.chmod(0o755)
        job_id = self.slurm.run(
            "sbatch",
            "--parsable",
            f"--job-name={run}",
            "--partition=gpu",
            "--nodes=2",
            "--ntasks-per-node=2",
            "--requeue",
            f"--output={self.shared}/{run}-%j.out",
            f"--chdir={self.shared}",
            str(script),
        )
        self.jobs.append(job_id.strip().split(";")[0])
        return self.jobs[-1]

    def fail_a_gpu_mid_interval(self, run_name: str) -> tuple[Run, float]:
        """Start the loop's job; once it has two durable checkpoints and is half an interval past the last, a GPU of
        its second node falls off the bus: the agent sees Xid 79 and the job's ranks there die with it (the others
        wait in their all-reduce, as a job whose peer is gone does, until the scheduler ends them). The run and the
        fault's moment (the injection's own stamp)."""
        self.submit(run_name, "--steps", "100000", "--step-seconds", "0.1", "--batch", "256", "--checkpoint-every=10")
        durable = Checkpoint.objects.filter(run__name=run_name, status="completed", tier="durable")
        wait_for(lambda: durable.count() >= 2, timeout=180, what="two durable checkpoints")
        run = Run.objects.get(name=run_name)
        last = durable.order_by("-step").first()
        wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= last.step + 5, timeout=60, what="five more steps")
        self.bad = sorted(run.attempts.get().nodes.values_list("hostname", flat=True))[1]  # rank 0 runs on the first
        fault_at = self.agents.inject(self.bad, gpu=1, xid=79)
        for pid_file in (self.shared / "pids").glob(f"{self.bad}.*.pid"):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        return run, fault_at

    def recovered(self, run: Run) -> tuple[PlaybookExecution, Interruption]:
        """FleetOps' drain-and-replace, succeeded, and the interruption once the job trains again (five new steps)."""
        execution = wait_for(
            lambda: PlaybookExecution.objects.filter(run=run, status__in=("succeeded", "failed")).first(),
            timeout=120,
            what="FleetOps' drain-and-replace to finish",
        )
        assert execution.status == "succeeded", execution.error
        self.spare = execution.steps.get(name="pick spare").output["spare"]
        interruption = wait_for(
            lambda: Interruption.objects.filter(run=run, resumed_at__isnull=False).first(),
            timeout=120,
            what="the job to train again from its checkpoint",
        )
        steps_since = Event.objects.filter(run_name=run.name, type="run.step", time__gt=interruption.resumed_at)
        wait_for(lambda: steps_since.count() >= 5, timeout=60, what="five steps after the restore")
        return execution, interruption

    def log(self, run: str) -> list[dict]:
        path = self.shared / f"{run}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def finished(self, job_id: str) -> bool:
        return "JobState=COMPLETED" in self.slurm.run("scontrol", "show", "job", job_id)

    def close(self) -> None:
        for job_id in self.jobs:
            self.slurm.run("scancel", job_id)
        self.agents.stop()
        try:
            put_back(
                self.slurm,
                _adapter(self.slurm),
                job_id=self.jobs[0] if self.jobs else "0",
                bad=self.bad,
                spare=self.spare,
            )
        finally:
            self.web.stop()


@pytest.fixture
def harness(slurm_cluster, worker, tmp_path):
    require(shutil.which("srun") is not None, "Slurm's srun")
    require(importlib.util.find_spec("torch") is not None, "PyTorch (torch==2.13.0, make test installs it)")
    loop = Harness(slurm_cluster, tmp_path)
    try:
        yield loop
    finally:
        loop.close()


def test_a_gpu_falls_off_the_bus_and_the_job_trains_again_on_a_spare_from_its_last_checkpoint(harness):
    run, fault_at = harness.fail_a_gpu_mid_interval(RUN)
    execution, interruption = harness.recovered(run)
    bad, spare = harness.bad, harness.spare
    incident = wait_for(
        lambda: Incident.objects.filter(run=run, status="mitigated").first(),
        timeout=60,
        what="the restore to mitigate the incident",
    )
    log = harness.log(RUN)
    headers = {"Authorization": f"Bearer {harness.reader}"}
    answer = requests.get(f"{harness.web.url}/api/v1/runs/{RUN}/goodput", headers=headers, timeout=30)
    # What FleetOps did, with nobody typing anything.
    assert (incident.status, incident.mitigated_at) == ("mitigated", interruption.resumed_at)
    assert [s.name for s in execution.steps.order_by("index")] == [
        "drain",
        "pick spare",
        "requeue job",
        "wait running",
        "send to repair",
    ]
    assert interruption.node.hostname == bad and interruption.xid == 79 and interruption.cause == "faulty_gpu"
    second = run.attempts.order_by("number").last()
    assert spare in second.nodes.values_list("hostname", flat=True) and bad not in second.nodes.values_list(
        "hostname", flat=True
    )
    # The job's own stamps: when it started again, what it restored from and when, its checkpoints.
    restart = next(e["t"] for e in log if e["event"] == "start" and e["restart"] == 1)
    restored = next(e for e in log if e["event"] == "restored")
    checkpoints = {e["step"]: e["t"] for e in log if e["event"] == "checkpoint" and e["t"] < fault_at}
    assert (
        restored["step"]
        == interruption.resumed_from_step
        == max(s for s in checkpoints if Checkpoint.objects.get(run=run, step=s).durable_at.timestamp() < fault_at)
    )
    # The interruption's moments in FleetOps' record, and its goodput stage by stage (GET .../goodput over the run's
    # life: this one interruption's), against the job's log and the injection's stamp.
    assert answer.status_code == 200, answer.text
    badput = answer.json()["badput"]
    fleetops = {
        "fault": interruption.fault_at.timestamp(),
        "detected": interruption.detected_at.timestamp(),
        "running again": interruption.running_at.timestamp(),
        "training again": interruption.resumed_at.timestamp(),
    }
    job = {
        "fault": fault_at,
        "detected": fault_at,  # an agent watching NVML reports the Xid as it happens: noticed at the fault
        "running again": restart,
        "training again": restored["t"],
    }
    for moment, stamp in job.items():
        assert abs(fleetops[moment] - stamp) < TOLERANCE_S, (moment, fleetops[moment] - stamp)
    stages = {stage: badput[f"{stage}_s"] for stage in ("detection", "rescheduling", "reload", "rewound")}
    truth = {
        "detection": 0.0,
        "rescheduling": restart - fault_at,
        "reload": restored["t"] - restart,
        "rewound": fault_at - checkpoints[restored["step"]],
    }
    for stage, seconds in stages.items():
        assert abs(seconds - truth[stage]) < TOLERANCE_S, (stage, seconds, truth[stage])
    print(f"\nfault to training again: {fleetops['training again'] - fault_at:.1f} s; stages (s): {stages}")
    for checkpoint in Checkpoint.objects.filter(run=run, status="completed"):  # asynchronous: blocked for the copy
        assert checkpoint.tier == "durable" and checkpoint.durable_at == checkpoint.completed_at
        assert 0 < checkpoint.blocking_s <= (checkpoint.completed_at - checkpoint.started_at).total_seconds()
    _assert_nothing_lost_or_doubled(run, log)


def _assert_nothing_lost_or_doubled(run: Run, log: list[dict]) -> None:
    """Every durable checkpoint and every restore the job logged is in FleetOps once, and no rank's sample is counted
    twice or dropped."""
    logged = sorted(e["step"] for e in log if e["event"] == "durable")
    completed = Event.objects.filter(run_name=RUN, type="checkpoint.completed")
    assert sorted(e.data["step"] for e in completed) == logged
    assert Event.objects.filter(run_name=RUN, type="run.restored").count() == 1
    samples = Event.objects.filter(run_name=RUN, type="rank.step_time").values_list("event_id", "data")
    keys = [(event_id.rsplit(":", 2)[0], data["rank"], data["step"]) for event_id, data in samples]
    assert len(keys) == len(set(keys)) and all(data["dropped"] == 0 for _, data in samples)


def _adapter(slurm_cluster):
    from incidents.playbooks.clusters.slurm import SlurmAdapter, SlurmConfig

    return SlurmAdapter(SlurmConfig(slurm_conf=slurm_cluster.conf, timeout_s=20))


def _trained(harness: Harness, run: str, job_id: str) -> None:
    wait_for(lambda: harness.finished(job_id), timeout=240, what=f"job {job_id} ({run}) to finish")
    assert Run.objects.get(name=run).state == Run.State.RUNNING  # left running: the detectors judge running runs


def _flagged(detect, run: str, kind: str) -> dict[str, str]:
    """The detector run at the moment of the run's last sample: the nodes it flagged and the alert kinds."""
    last = Event.objects.filter(run_name=run, type=kind).latest("time").time
    detect(now=last + timedelta(milliseconds=1))
    return dict(Alert.objects.values_list("node__hostname", "kind"))


def _nodes_of(run: str) -> list[str]:
    """The run's nodes in rank order: ranks 0 and 1 on the first, 2 and 3 on the second (srun's block layout)."""
    ranks = Event.objects.filter(run_name=run, type="rank.step_time").values_list("data", flat=True)
    by_rank = {data["rank"]: data["node"] for data in ranks}
    return [by_rank[0], by_rank[2]]


def test_a_rank_made_30_percent_slower_flags_its_node_and_no_other(harness, settings):
    """The DDP hook's per-rank compute (not the wall-clock step every rank shares) shows the slow rank; the straggler
    detector, over 3 windows of 2 s, flags its node and not the other."""
    settings.STRAGGLER_WINDOW_S = 2
    run = "loop-slow"
    job_id = harness.submit(
        run,
        "--steps",
        "80",
        "--step-seconds",
        "0.1",
        "--batch",
        "256",
        "--slow-rank",
        "2",
        "--leave-running",
        FLEETOPS_SAMPLE_EVERY_S="0.5",
    )
    _trained(harness, run, job_id)
    by_rank: dict[int, list[float]] = {}
    for data in Event.objects.filter(run_name=run, type="rank.step_time").values_list("data", flat=True):
        by_rank.setdefault(data["rank"], []).append(data["seconds"])
    means = {rank: sum(v) / len(v) for rank, v in by_rank.items()}
    assert 1.2 < means[2] / (sum(means[r] for r in (0, 1, 3)) / 3) < 1.5, means
    first, second = _nodes_of(run)
    assert _flagged(stragglers_detect, run, "rank.step_time") == {second: "straggler"}


def test_a_rank_whose_local_gradients_are_scaled_flags_its_host_and_no_other(harness, settings):
    """Each rank's local gradient norm before the all-reduce (the DDP hook), every step: rank 1's, scaled by 1.5,
    disagrees with its replicas; the healthy ones agree within the detector's tolerance (a large batch a rank)."""
    run = "loop-sdc"
    job_id = harness.submit(
        run,
        "--steps",
        "30",
        "--step-seconds",
        "0",
        "--batch",
        "32768",
        "--sdc-rank",
        "1",
        "--leave-running",
        FLEETOPS_GRAD_NORM_EVERY="1",
    )
    _trained(harness, run, job_id)
    norms: dict[int, dict[int, float]] = {}
    for data in Event.objects.filter(run_name=run, type="rank.grad_norm").values_list("data", flat=True):
        norms.setdefault(data["step"], {})[data["rank"]] = data["value"]
    assert len(norms) == 30 and all(len(by_rank) == 4 for by_rank in norms.values())
    for by_rank in norms.values():
        healthy = sorted(by_rank[r] for r in (0, 2, 3))
        assert healthy[-1] / healthy[0] - 1 < settings.SDC_REL_TOLERANCE
        assert 1.3 < by_rank[1] / healthy[1] < 1.7
    first, second = _nodes_of(run)
    assert _flagged(sdc_detect, run, "rank.grad_norm") == {first: "sdc"}
