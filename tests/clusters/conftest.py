"""A real Slurm 22.05 cluster on loopback for the adapter tests: started once per session, stopped at the end.

Six fake GPU nodes: gpu-001..004 in the partition `gpu` (FleetOps' main pool), gpu-005 and gpu-006 in `spare`,
and an empty root-only `repair` (slurm/start.sh). Ports are picked free, so a cluster someone else runs on
this machine does not get in the way.
"""

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require

HERE = Path(__file__).resolve().parent
NODES = 6
SPARES = 2


@dataclass(frozen=True)
class SlurmCluster:
    root: Path

    @property
    def conf(self) -> str:
        return str(self.root / "slurm.conf")

    def run(self, *args: str, timeout: float = 20) -> str:
        """A Slurm client command against this cluster; its stdout."""
        env = {**os.environ, "SLURM_CONF": self.conf}
        result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        assert result.returncode == 0, f"{' '.join(args)}: {result.stderr}"
        return result.stdout


def wait_for(predicate, *, timeout: float, what: str, every: float = 0.25):
    """Poll until predicate() returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(every)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports."""
    for _ in range(100):
        first = random.randrange(20000, 40000)
        if all(_free(first + i) for i in range(count)):
            return first
    raise RuntimeError("no free ports")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"  # a zombie has exited; init reaps it later
    except FileNotFoundError:
        return False


@pytest.fixture(scope="session")
def slurm_cluster():
    daemons = ("slurmctld", "slurmd", "munged", "sinfo", "scontrol", "sbatch")
    require(all(shutil.which(d) for d in daemons), "Slurm (apt-get install -y slurm-wlm slurmrestd munge)")
    # Not under pytest's 0700 temp folders: munged wants every folder above its socket world-executable.
    root = Path(tempfile.mkdtemp(prefix="fleetops-slurm-"))
    root.chmod(0o755)
    ports = free_ports(NODES + 1)
    env = {**os.environ, "SPARES": str(SPARES), "SLURMCTLD_PORT": str(ports), "SLURMD_PORT": str(ports + 1)}
    try:
        started = subprocess.run(
            ["bash", str(HERE / "slurm" / "start.sh"), str(root), str(NODES)],
            capture_output=True,
            text=True,
            env=env,
            timeout=90,
            check=False,
        )
        if started.returncode != 0:
            pytest.fail(f"the Slurm cluster did not start:\n{started.stdout}\n{started.stderr}")
        yield SlurmCluster(root)
    finally:
        pids = [int(p.read_text()) for p in (root / "run").glob("*.pid") if p.read_text().strip().isdigit()]
        subprocess.run(["bash", str(HERE / "slurm" / "stop.sh"), str(root)], timeout=60, check=False)
        left = [pid for pid in pids if _alive(pid)]
        assert not left, f"Slurm daemons still running after stop.sh: {left}"
        shutil.rmtree(root, ignore_errors=True)


def start_training_job(slurm_cluster: SlurmCluster, slurm):
    """A requeueable two-node job in the main partition, once it runs: (job id, its JobStatus)."""
    job_id = (
        slurm_cluster.run(
            "sbatch",
            "--parsable",
            "--output=/dev/null",
            "--chdir=/tmp",
            "--partition=gpu",
            "--nodes=2",
            "--requeue",
            "--wrap=sleep 300",
        )
        .strip()
        .split(";")[0]
    )
    job = wait_for(lambda: (j := slurm.job_status(job_id)).state == "running" and j, timeout=15, what="job running")
    return job_id, job


def put_back(slurm_cluster: SlurmCluster, slurm, *, job_id: str, bad: str | None, spare: str | None) -> None:
    """Undo what a drain-and-replace did, so the next test finds the cluster as it started."""
    slurm_cluster.run("scancel", job_id)
    if spare:
        slurm.ensure_in_pool(spare, "spare")
    if bad:
        slurm.ensure_in_pool(bad, "main")
        slurm.ensure_resumed(bad)
        wait_for(lambda: slurm.node_status(bad).raw_state == "IDLE", timeout=20, what=f"{bad} idle")
