"""The client's settings, read from the environment the scheduler and the launcher set (docs/CLIENT.md).

The run is named as the Slurm prolog names it (contrib/slurm/prolog.sh): FLEETOPS_RUN, else the job's name, else
slurm-<job id>, with anything but letters, digits, '.', '_', ':' and '-' turned into '-'; so the trainer's events
and the scheduler's land on one run. The rank and world size come from torch.distributed when it is initialised,
else from what torchrun (RANK, WORLD_SIZE) or srun (SLURM_PROCID, SLURM_NTASKS) exported.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]")


def _number(env: Mapping[str, str], name: str, default, kind=int):
    """The setting `name` as an int (or `kind`), `default` when unset; a clear error naming it when it is not one."""
    raw = env.get(name, "")
    try:
        return kind(raw) if raw.strip() else default
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{name} must be {what}, got {raw!r}") from None


def run_name(env: Mapping[str, str], default: str | None = None) -> str:
    raw = env.get("FLEETOPS_RUN") or env.get("SLURM_JOB_NAME")
    if not raw and env.get("SLURM_JOB_ID"):
        raw = f"slurm-{env['SLURM_JOB_ID']}"
    raw = raw or default
    if not raw:
        raise ValueError("name the run: FLEETOPS_RUN (or run under Slurm, whose job name is used)")
    return _UNSAFE.sub("-", raw)[:200]


def _distributed() -> tuple[int, int] | None:
    """(rank, world size) from torch.distributed when it is imported and initialised; never imports torch."""
    import sys

    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # a half-initialised process group: fall back to the launcher's variables
        return None
    return None


def incarnation(env: Mapping[str, str]) -> str:
    """One attempt of the job: what makes a step run again after a requeue a new event, not a duplicate.

    Slurm's job id and restart count, or torchelastic's run id (when it names one: a plain `torchrun` says "none"),
    each with torchelastic's restart count when there; else a random one per process, so that the same run launched
    again by hand is never taken for a resend of the last launch.
    """
    if env.get("FLEETOPS_INCARNATION"):
        return _UNSAFE.sub("-", env["FLEETOPS_INCARNATION"])
    if env.get("SLURM_JOB_ID"):
        parts = [env["SLURM_JOB_ID"], env.get("SLURM_RESTART_COUNT") or "0"]
    elif env.get("TORCHELASTIC_RUN_ID", "none") != "none":
        parts = [env["TORCHELASTIC_RUN_ID"]]
    else:
        parts = [uuid.uuid4().hex[:12]]
    if env.get("TORCHELASTIC_RESTART_COUNT"):
        parts += [f"e{env['TORCHELASTIC_RESTART_COUNT']}"]
    return _UNSAFE.sub("-", ".".join(parts))


@dataclass
class Config:
    url: str | None
    token: str | None
    run: str
    rank: int = 0
    world_size: int = 1
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    cluster: str | None = None
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    spool_dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "fleetops-client"))
    spool_max_mb: int = 64
    samples_max: int = 10_000  # high-rate samples held in memory; beyond it the oldest are dropped and counted
    records_max: int = 10_000  # lifecycle events (restores, checkpoints, ...) held in memory
    flush_s: float = 1.0  # how often the sender thread spools and sends
    step_every_s: float = 1.0  # run.step at most this often (the hang watchdog's input)
    sample_every_s: float = 10.0  # one rank.step_time per rank per window: the mean of its steps
    grad_norm_every: int = 10  # rank.grad_norm on steps divisible by this, the same steps on every rank
    batch: int = 500
    timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    @property
    def source(self) -> str:
        return f"fleetops-client://{self.run}/rank-{self.rank}"

    @property
    def spool_path(self) -> str:
        return os.path.join(self.spool_dir, f"{self.run}.rank-{self.rank}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> Config:
        env = os.environ if env is None else env
        dist = _distributed()
        rank, world = dist if dist else (_number(env, "RANK", _number(env, "SLURM_PROCID", 0)), 0)
        if not world:
            world = _number(env, "WORLD_SIZE", _number(env, "SLURM_NTASKS", 1))
        url = env.get("FLEETOPS_URL") or None
        values = dict(
            url=url,
            token=env.get("FLEETOPS_TOKEN") or None,
            # Without a URL nothing is sent, so nothing needs a name: training goes on unreported, never stopped.
            run=run_name(env) if url or overrides.get("url") else run_name(env, default="unreported"),
            rank=rank,
            world_size=world,
            node=env.get("FLEETOPS_NODE") or env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
            cluster=env.get("FLEETOPS_CLUSTER") or env.get("SLURM_CLUSTER_NAME") or None,
            incarnation=incarnation(env),
            spool_dir=env.get("FLEETOPS_SPOOL_DIR") or os.path.join(tempfile.gettempdir(), "fleetops-client"),
            spool_max_mb=_number(env, "FLEETOPS_SPOOL_MAX_MB", 64),
            samples_max=_number(env, "FLEETOPS_SAMPLES_MAX", 10_000),
            flush_s=_number(env, "FLEETOPS_FLUSH_S", 1.0, float),
            step_every_s=_number(env, "FLEETOPS_STEP_EVERY_S", 1.0, float),
            sample_every_s=_number(env, "FLEETOPS_SAMPLE_EVERY_S", 10.0, float),
            grad_norm_every=_number(env, "FLEETOPS_GRAD_NORM_EVERY", 10),
        )
        values.update(overrides)
        config = cls(**values)
        if config.samples_max < 1 or config.grad_norm_every < 1 or config.flush_s <= 0:
            raise ValueError("FLEETOPS_SAMPLES_MAX and FLEETOPS_GRAD_NORM_EVERY must be >= 1, FLEETOPS_FLUSH_S > 0")
        return config
