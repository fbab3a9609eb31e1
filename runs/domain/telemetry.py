"""The high-rate half of a simulated fleet's stream: per-rank samples from the training client and readings from the
node agents, at stated rates, for any stretch of a run's time.

`simulate()` (runs/domain/simulator/) makes the run's story: starts, faults, restarts, checkpoints, a step event a
minute, the agents' readings around each fault. What it leaves out is the steady telemetry every rank and node
sends whether anything happens or not; at 131,072 GPUs that is most of the traffic (thousands of events a second),
and fourteen days of it would be billions of rows, so it is made here for a stretch at a time, for the benchmarks
that stream it (tests/benchmarks/test_scale.py).

Pure: standard library only; the same arguments give the same events, byte for byte.

The rates (docs/PERFORMANCE.md, "A 131,072-GPU fleet"):
- `SHIPPED`: what the client and agent send with their defaults (docs/CLIENT.md, docs/AGENT.md): one
  rank.step_time per rank every 10 s (FLEETOPS_SAMPLE_EVERY_S), a rank.grad_norm on every 10th step
  (FLEETOPS_GRAD_NORM_EVERY), and every 30 s a node.heartbeat and, per GPU, a gpu.ecc and a gpu.health
  (fleetops-agent --interval 30).
- `AT_SCALE`: what a 131,072-GPU deployment is configured to send (docs/DEPLOY.md): a step-time sample a rank every
  60 s (five in each of the straggler detector's 300 s windows; NVIDIA's resiliency extension reports straggler
  scores every 300 s), a gradient norm every 100 steps (10 minutes at 6 s a step: the silent-data-corruption check
  compares 20 such steps), heartbeats every 30 s, and a GPU's ECC and health readings every 10th poll
  (fleetops-agent --readings-every 10: 5 minutes; an ECC event from NVML is still read at once).
"""

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from runs.domain.cloudevents import format_time
from runs.domain.simulator import SimulationConfig

FLUSH_S = 1  # the client's sender thread posts what its ranks queued once a second (FLEETOPS_FLUSH_S)


@dataclass(frozen=True)
class TelemetryRates:
    """How often each reporter sends, in seconds (steps for the gradient norm)."""

    step_time_every_s: int = 60
    grad_norm_every: int = 100  # steps
    heartbeat_every_s: int = 30
    readings_every_s: int = 300  # a GPU's gpu.ecc and gpu.health

    def __post_init__(self):
        for name in ("step_time_every_s", "grad_norm_every", "heartbeat_every_s", "readings_every_s"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a whole number, at least 1")

    def per_s(self, config: SimulationConfig) -> dict[str, float]:
        """Events a second of each type the fleet sends while the run trains."""
        return {
            "rank.step_time": config.gpus / self.step_time_every_s,
            "rank.grad_norm": config.gpus / (self.grad_norm_every * config.step_s),
            "node.heartbeat": config.nodes / self.heartbeat_every_s,
            "gpu.ecc": config.gpus / self.readings_every_s,
            "gpu.health": config.gpus / self.readings_every_s,
        }

    def total_per_s(self, config: SimulationConfig) -> float:
        return sum(self.per_s(config).values())


SHIPPED = TelemetryRates(step_time_every_s=10, grad_norm_every=10, heartbeat_every_s=30, readings_every_s=30)
AT_SCALE = TelemetryRates()


def telemetry(
    config: SimulationConfig,
    rates: TelemetryRates = AT_SCALE,
    *,
    start_s: int,
    seconds: int,
    source: str = "fleetops/telemetry",
    slow_ranks: frozenset[int] = frozenset(),
    slow_factor: float = 1.5,
) -> Iterator[dict]:
    """The telemetry of `seconds` whole seconds of training from `start_s` (seconds after config.start), second by
    second in time order: within a second, each reporter's events spread over it.

    Each periodic reporter sends at its own phase, so a second carries 1/period of the population rather than
    everyone at once; gradient norms are the exception: every rank reports the same step (the cross-replica check
    compares them), spread over the client's flush second after the step. `slow_ranks` train `slow_factor` times
    slower than the others (a straggler for the detector to find); step times otherwise vary by 2% around
    config.step_s.
    """
    if start_s < 0 or seconds < 0:
        raise ValueError("start_s and seconds must be >= 0")
    rng = random.Random(f"{config.seed}:{start_s}:{seconds}")
    gpn = config.gpus_per_node
    hosts = [f"{config.cluster}-{i:05d}" for i in range(config.nodes)]
    step_s = config.step_s
    ids = 0

    def event(at: float, type_: str, data: dict) -> dict:
        nonlocal ids
        ids += 1
        when = config.start + timedelta(milliseconds=round(at * 1000))
        return {
            "specversion": "1.0",
            "id": f"{config.run}-{config.seed}-t{start_s}-{ids:09d}",
            "source": source,
            "type": type_,
            "time": format_time(when),
            "data": data,
        }

    for second in range(start_s, start_s + seconds):
        due: list[tuple[float, str, dict]] = []
        for rank in _phase(second, rates.step_time_every_s, config.gpus):
            seconds_ = step_s * rng.gauss(1.0, 0.02) * (slow_factor if rank in slow_ranks else 1.0)
            step = int(second // step_s)
            data = {"run": config.run, "rank": rank, "node": hosts[rank // gpn], "step": step}
            due.append((rng.random(), "rank.step_time", data | {"seconds": round(seconds_, 4)}))
        grad_step = _grad_norm_step(second, step_s, rates.grad_norm_every)
        if grad_step is not None:
            for rank in range(config.gpus):
                data = {"run": config.run, "rank": rank, "node": hosts[rank // gpn], "step": grad_step}
                due.append((rng.random(), "rank.grad_norm", data | {"value": round(rng.gauss(2.0, 0.01), 6)}))
        for node in _phase(second, rates.heartbeat_every_s, config.nodes):
            due.append((rng.random(), "node.heartbeat", {"node": hosts[node], "cluster": config.cluster}))
        for gpu in _phase(second, rates.readings_every_s, config.gpus):
            node, index = hosts[gpu // gpn], gpu % gpn
            ecc = {"node": node, "gpu": index, "corrected": 0, "uncorrected": 0}
            health = {
                "node": node,
                "gpu": index,
                "temperature_c": rng.randint(55, 75),
                "throttle_reasons": [],
                "nvlink_errors": 0,
                "recovery_action": 0,
            }
            at = rng.random()
            due.append((at, "gpu.ecc", ecc))
            due.append((at, "gpu.health", health))
        due.sort(key=lambda item: item[0])
        for offset, type_, data in due:
            yield event(second + offset, type_, data)


def _phase(second: int, period: int, population: int) -> range:
    """The members (0..population-1) whose turn falls in this second of their `period`: each sends once a period,
    member m in second floor(m x period / population) of it."""
    into = second % period
    return range(math.ceil(into * population / period), math.ceil((into + 1) * population / period))


def _grad_norm_step(second: int, step_s: float, every: int) -> int | None:
    """The sampled step whose norms are sent in this second: step k is reached at k x step_s, and its norms leave in
    the client's flush second after that; None when no sampled step's norms leave now."""
    reached = second - FLUSH_S
    if reached < 0:
        return None
    step = math.ceil(reached / step_s)
    if step < 1 or step % every or math.floor(step * step_s) != reached:
        return None
    return step
