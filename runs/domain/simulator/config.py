"""What a simulated run is made of: its size, rates, costs and seed (SimulationConfig), Llama 3's and the
131,072-GPU frontier's figures, the cost distributions drawn from, and the rates derived from a config
(expected faults, training share, hazard, spares)."""

import math
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from runs.domain import advisor
from runs.domain.simulator.causes import _culprit_share, _hang_share

LLAMA3_GPUS = 16_384


LLAMA3_DAYS = 54


LLAMA3_UNEXPECTED = 419


LLAMA3_PLANNED = 47


# docs/DOMAIN.md section 1: per-GPU MTBF = 50,700 GPU-hours.
LLAMA3_RATE_PER_GPU_HOUR = LLAMA3_UNEXPECTED / (LLAMA3_GPUS * LLAMA3_DAYS * 24)


# A fixed Monday, so that a default run is the same stream whenever it is made.
DEFAULT_START = datetime(2026, 1, 5, tzinfo=UTC)


STEP_EVENT_S = 60.0  # one run.step event per minute of training, whatever the step time


# docs/DOMAIN.md section 2: a 70B model's full training state is about 1.13 TB, a 405B model's about 6.5 TB.
CHECKPOINT_BYTES_PER_PARAM = 16


SPARE_POOL_TARGET = 0.99  # spares cover the nodes in repair at least this often (docs/DOMAIN.md section 5)


# The event schema's rule for names (docs/EVENTS.md); node names add 6 characters to the cluster's.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,193}$")


@dataclass(frozen=True)
class Triangular:
    """A duration in seconds from a triangular distribution: at least `low`, most often `mode`, at most `high`;
    never more than `cap` when one is set (a fix that bounds the stage: the draw is min(draw, cap))."""

    low: float
    mode: float
    high: float
    cap: float | None = None

    def __post_init__(self):
        if not 0 <= self.low <= self.mode <= self.high:
            raise ValueError(f"need 0 <= low <= mode <= high, got {self.low}, {self.mode}, {self.high}")
        if self.cap is not None and not self.cap >= 0:
            raise ValueError(f"a cap must be >= 0, got {self.cap}")

    @property
    def mean(self) -> float:
        """The mean; with a cap, that of min(draw, cap), from the triangle's pieces."""
        if self.cap is None or self.cap >= self.high:
            return (self.low + self.mode + self.high) / 3
        if self.cap <= self.low:
            return self.cap
        return self.cap - _integral_cdf(self, self.cap)

    def draw(self, rng: random.Random) -> float:
        value = rng.triangular(self.low, self.high, self.mode)
        return value if self.cap is None else min(value, self.cap)


def _integral_cdf(t: Triangular, x: float) -> float:
    """The integral of the triangle's CDF from `low` to x (low <= x <= high): E[min(draw, x)] = x minus this."""
    a, c, b = t.low, t.mode, t.high
    if b == a:
        return 0.0
    rising = (min(x, c) - a) ** 3 / (3 * (b - a) * (c - a)) if c > a else 0.0
    if x <= c:
        return rising
    # Above the mode the CDF is 1 - (b - u)^2 / ((b - a)(b - c)).
    falling = (x - c) - ((b - c) ** 3 - (b - x) ** 3) / (3 * (b - a) * (b - c))
    return rising + falling


def _minutes(low: float, mode: float, high: float) -> Triangular:
    return Triangular(low * 60, mode * 60, high * 60)


def _hours(low: float, mode: float, high: float) -> Triangular:
    return Triangular(low * 3600, mode * 3600, high * 3600)


@dataclass(frozen=True)
class SimulationConfig:
    """One run on one cluster. Durations are seconds (Triangular ones too), rates per GPU-hour of wall-clock.

    `planned_stops` None: Llama 3's 47 per 54 days at 16,384 GPUs, scaled by days and by fleet size, so that
    planned and unexpected stops keep Llama 3's 47 : 419 mix at any size. `spare_nodes` None: sized so that the
    nodes in repair exceed the spares less than 1% of the time (Poisson, docs/DOMAIN.md section 5).
    """

    gpus: int = LLAMA3_GPUS
    days: float = LLAMA3_DAYS
    seed: int = 1
    start: datetime = DEFAULT_START
    gpus_per_node: int = 8
    rate_per_gpu_hour: float = LLAMA3_RATE_PER_GPU_HOUR
    planned_stops: int | None = None
    # Every 30 min of training; async writes block 20-60 s (docs/DOMAIN.md section 2) and are durable 1-5 min later.
    checkpoint_interval_s: float = 1800.0
    checkpoint_blocking: Triangular = Triangular(20, 30, 60)
    checkpoint_drain: Triangular = _minutes(1, 2, 5)
    step_s: float = 6.0  # one optimizer step; about Llama 3 405B's 16M-token batch on 16k H100s
    # A run.step event each this many seconds of training; a checkpoint starts at the first one past its interval,
    # so this is also the grain of the interval (a minute; finer for intervals of a minute or two).
    step_event_s: float = STEP_EVENT_S
    model_params: int = 405_000_000_000
    # docs/DOMAIN.md section 2: a crash is noticed in seconds, a hang by the NCCL watchdog after 10-30 min.
    detection_crash: Triangular = Triangular(5, 20, 120)
    detection_hang: Triangular = _minutes(10, 15, 30)
    # Automated drain-and-replace from hot spares, then process start, NCCL init and checkpoint load.
    rescheduling: Triangular = _minutes(2, 5, 15)
    reload: Triangular = _minutes(3, 7, 15)
    maintenance: Triangular = _minutes(10, 20, 60)
    repair: Triangular = _hours(12, 48, 132)
    burn_in: Triangular = _hours(2, 4, 8)
    spare_nodes: int | None = None
    # Faults per second of training, given: the same fault process whatever the stops cost (a counterfactual's
    # simulation). None: derived from rate_per_gpu_hour, so that the stream shows that wall-clock rate.
    hazard_per_s: float | None = None
    # The share of those faults that never happen (lemon nodes taken out): the fault process thinned, which is the
    # same Poisson process at (1 - share) of the hazard, with the faults that remain where they were.
    faults_avoided: float = 0.0
    # Two tiers (docs/DOMAIN.md section 3, "Checkpoint tiers"): with fast_blocking set, writes go to host memory with
    # a copy on a peer (tier "memory", restorable as soon as written), and every durable_every-th write goes to
    # durable storage as above. A fault leaves the newest memory copy usable with probability fast_survives; the
    # job then reloads it in fast_reload instead of going back to the durable one.
    fast_blocking: Triangular | None = None
    durable_every: int = 1
    fast_survives: float = 0.0
    fast_reload: Triangular = Triangular(10, 20, 60)
    # A run.completed at the end: a finished run's goodput and failure rate stop at its end. False leaves it
    # running, for a live demo that ends now; a past run left running would count every day since as training.
    completes: bool = True
    cluster: str = "sim-cluster"
    run: str = "llama3-405b-sim"
    source: str = "fleetops/simulator"

    def __post_init__(self):
        if self.start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        object.__setattr__(self, "start", self.start.astimezone(UTC))
        if self.gpus_per_node < 1 or self.gpus_per_node > 256:
            raise ValueError("gpus_per_node must be 1-256")
        if self.gpus < 1 or self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus must be a positive multiple of gpus_per_node ({self.gpus_per_node})")
        if self.step_event_s < 1 or self.step_event_s < self.step_s:
            raise ValueError("step_event_s must be at least 1 s and at least one step")
        if self.days <= 0 or self.rate_per_gpu_hour < 0 or self.checkpoint_interval_s <= 0 or self.step_s <= 0:
            raise ValueError("days, checkpoint_interval_s and step_s must be positive, rate_per_gpu_hour >= 0")
        for name in ("cluster", "run"):
            if not _NAME.match(getattr(self, name)):
                raise ValueError(
                    f"{name} must be 1-194 letters, digits, '.', '_', ':' or '-', starting with one of the first two"
                )
        if (self.hazard_per_s or 0) < 0 or not 0 <= self.faults_avoided < 1:
            raise ValueError("hazard_per_s must be >= 0 and faults_avoided in [0, 1)")
        if self.durable_every < 1 or not 0 <= self.fast_survives <= 1:
            raise ValueError("durable_every must be >= 1 and fast_survives in [0, 1]")
        if (self.planned_stops or 0) < 0 or (self.spare_nodes or 0) < 0 or self.model_params < 1:
            raise ValueError("planned_stops and spare_nodes must be >= 0, model_params >= 1")

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @property
    def duration_s(self) -> float:
        return self.days * 86400

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.duration_s)

    @property
    def planned_count(self) -> int:
        if self.planned_stops is not None:
            return self.planned_stops
        return round(LLAMA3_PLANNED * (self.days / LLAMA3_DAYS) * (self.gpus / LLAMA3_GPUS))

    @property
    def spare_count(self) -> int:
        return self.spare_nodes if self.spare_nodes is not None else default_spare_nodes(self)

    @property
    def checkpoint_bytes(self) -> int:
        return self.model_params * CHECKPOINT_BYTES_PER_PARAM


# Kokolis et al. (arXiv 2410.21680) project a job MTTF of 0.23 h at 131,072 GPUs: a fault every 14 minutes.
FRONTIER_GPUS = 131_072


FRONTIER_MTTF_S = 0.23 * 3600


def frontier_config(*, days: float = 14.0, seed: int = 1) -> SimulationConfig:
    """A 131,072-GPU run (16,384 nodes) at the fault rate projected for that size, run as such a run has to be:

    - restarts of the kind fault-tolerant training reaches at ~100,000 GPUs (Meta's HSDP, arXiv 2602.00277: about
      3 minutes of stall a failure): rescheduling onto a hot spare 1-4 min, reload 1-4 min. With Llama 3's 5 and 7
      minutes a restart would outlast the time between faults and the run would barely train;
    - checkpoints at Daly's interval for that MTTF and the default write (mean blocking ~37 s): about 4 minutes,
      with a step event every 30 s so the interval's grain is finer than the interval.
    """
    rate = 1 / (FRONTIER_MTTF_S / 3600 * FRONTIER_GPUS)
    blocking = SimulationConfig.checkpoint_blocking
    interval = advisor.daly(delta_s=blocking.mean, mtbf_s=FRONTIER_MTTF_S)
    return SimulationConfig(
        gpus=FRONTIER_GPUS,
        days=days,
        seed=seed,
        rate_per_gpu_hour=rate,
        checkpoint_interval_s=round(interval),
        step_event_s=30.0,
        rescheduling=_minutes(1, 2, 4),
        reload=_minutes(1, 2, 4),
        cluster="frontier",
        run="frontier-sim",
    )


def expected_unexpected(config: SimulationConfig) -> float:
    """Expected unexpected interruptions over the run: gpus x rate x wall-clock hours."""
    return config.gpus * config.rate_per_gpu_hour * config.days * 24


def training_share(config: SimulationConfig) -> float:
    """Expected fraction of wall-clock the run trains (checkpoint writes included); at least 0.1.

    1 - (faults per second x mean downtime per fault) - (planned stops per second x mean downtime per stop).
    Waits for a spare when the pool is empty are not counted: the spare pool is sized to make them rare.
    """
    faults_per_s = config.gpus * config.rate_per_gpu_hour / 3600
    hang = _hang_share()
    detection = hang * config.detection_hang.mean + (1 - hang) * config.detection_crash.mean
    fault_down = detection + config.rescheduling.mean + config.reload.mean
    planned_per_s = config.planned_count / config.duration_s
    planned_down = config.maintenance.mean + config.reload.mean
    return max(1 - faults_per_s * fault_down - planned_per_s * planned_down, 0.1)


def fault_hazard_per_s(config: SimulationConfig) -> float:
    """Faults per second of training: the given hazard_per_s, else the wall-clock rate over the training share (module
    docstring)."""
    if config.hazard_per_s is not None:
        return config.hazard_per_s
    return config.gpus * config.rate_per_gpu_hour / 3600 / training_share(config)


def default_spare_nodes(config: SimulationConfig) -> int:
    """Hot spares so that the nodes in repair outnumber them less than 1% of the time (Poisson), at least 1."""
    node_faults_per_s = config.gpus * config.rate_per_gpu_hour / 3600 * _culprit_share()
    away_s = config.repair.mean + config.burn_in.mean + 1800  # plus cordon and drain
    return max(_poisson_quantile(node_faults_per_s * away_s, SPARE_POOL_TARGET), 1)


def _poisson_quantile(mean: float, p: float) -> int:
    """The least k with P(Poisson(mean) <= k) >= p."""
    if mean > 500:  # exp(-mean) underflows; the normal approximation is close by then
        return math.ceil(mean + 2.33 * math.sqrt(mean))
    k, term = 0, math.exp(-mean)
    total = term
    while total < p:
        k += 1
        term *= mean / k
        total += term
    return k
