"""A real Slurm 22.05 cluster on loopback for the adapter, playbook and fault tests: the `slurm_cluster` fixture
(registered for every test by tests/conftest.py), started once per session, stopped at the end.

Six fake GPU nodes: gpu-001..004 in the partition `gpu` (FleetOps' main pool), gpu-005 and gpu-006 in `spare`,
and an empty root-only `repair` (slurm/start.sh). Ports are picked free, so a cluster someone else runs on
this machine does not get in the way.
"""

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require
from tests.services import alive, free_ports, wait_for

# The start and stop scripts, beside the Slurm adapter's tests.
SCRIPTS = Path(__file__).resolve().parent / "incidents" / "playbooks" / "clusters" / "slurm"
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
            ["bash", str(SCRIPTS / "start.sh"), str(root), str(NODES)],
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
        subprocess.run(["bash", str(SCRIPTS / "stop.sh"), str(root)], timeout=60, check=False)
        left = [pid for pid in pids if alive(pid)]
        assert not left, f"Slurm daemons still running after stop.sh: {left}"
        shutil.rmtree(root, ignore_errors=True)


def start_training_job(slurm_cluster: SlurmCluster, slurm, *, nodes: int = 2, script: str = "sleep 300"):
    """A requeueable job on `nodes` nodes of the main partition running `script`, once it runs: (job id, its
    JobStatus)."""
    job_id = (
        slurm_cluster.run(
            "sbatch",
            "--parsable",
            "--output=/dev/null",
            "--chdir=/tmp",
            "--partition=gpu",
            f"--nodes={nodes}",
            "--requeue",
            f"--wrap={script}",
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
