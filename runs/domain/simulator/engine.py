"""A simulated training run on a GPU cluster, as the CloudEvents its scheduler, trainer and node agents would send.

Pure: no Django import, standard library only. `simulate(config)` yields CloudEvents 1.0 dicts (docs/EVENTS.md)
in time order; the same config gives the same stream, byte for byte: every draw comes from random streams seeded
from the config's seed, in a fixed order (no set or hash order is ever iterated). `simulate_timeline(config)` is
the same run as the goodput engine's RunTimeline, the truth the record built from the stream should equal.

One stream per concern (when faults strike, what they are, detection, rescheduling, reload, checkpoint writes,
repairs, planned stops, job ids), so that two configs of one seed that differ in one cost see the same faults at
the same training times and differ only in that cost (common random numbers): a lever's counterfactual
(runs/domain/levers.py) is checked against the simulation of the same seed with the fix applied.

The model (docs/DOMAIN.md sections 1, 2 and 5):
- Unexpected faults strike while the run trains (checkpoint writes included). The cause is drawn in Llama 3's
  Table 5 proportions by count; the culprit node and GPU at random among the run's nodes. GPU causes come with
  the Xid, ECC and health readings an NVML agent would report.
- Each fault is detected (seconds for a crash, 10-30 min for a hang), the culprit node is cordoned and sent to
  repair, the job is rescheduled onto a hot spare (or waits for a repaired node when none is left) and reloads
  the last durable checkpoint; the steps since that checkpoint are computed again. Software faults and NCCL
  timeouts without a culprit restart on the same nodes.
- Checkpoints are asynchronous: training blocks for the copy to host memory (seconds), the drain to storage
  makes the checkpoint durable minutes later. A fault before then loses it and the restart goes further back.
- Planned maintenance waits for the next checkpoint, saves synchronously, stops, and restarts on the same nodes
  after the maintenance window, so it rewinds no work.
- Repaired nodes go through burn-in and a health check, then back into the spare pool.

The rate. Llama 3 measured 419 unexpected interruptions in 54 days of wall-clock on 16,384 GPUs, so the default
`rate_per_gpu_hour` is per GPU-hour of wall-clock. A run can only be interrupted while it trains, and it spends
part of its time restarting; to show the measured count, faults strike during training at rate / training_share
(see `training_share`). This is exact in expectation for a renewal process (faults per wall-clock hour =
h / (1 + h D) = gpus x rate when h = gpus x rate / (1 - gpus x rate x D), D the mean downtime per fault), so the
rate an analysis estimates from the stream (faults / wall-clock GPU-hours) is the rate configured.

Times are float seconds from `config.start` inside; the events carry RFC 3339 UTC with milliseconds.
"""

import heapq
import math
import random
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from runs.domain import advisor
from runs.domain.cloudevents import format_time
from runs.domain.goodput import CheckpointSpan, InterruptionSpan, RunTimeline
from runs.domain.taxonomy import CAUSES, Cause, Group

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


# --- Causes and their signals ----------------------------------------------------------------------------

_DRAWN_CAUSES = [cause for cause, (_, _, count) in CAUSES.items() if count > 0]
_CAUSE_WEIGHTS = [CAUSES[cause][2] for cause in _DRAWN_CAUSES]
_TOTAL_WEIGHT = sum(_CAUSE_WEIGHTS)
# Noticed by a timeout, not a crash: the job hangs in a collective, or keeps training on wrong numbers.
HANG_CAUSES = (Cause.NCCL_WATCHDOG, Cause.NETWORK_SWITCH_CABLE, Cause.NIC, Cause.SILENT_DATA_CORRUPTION)
# No hardware to blame: the job restarts on the same nodes.
NO_CULPRIT_CAUSES = (Cause.SOFTWARE_BUG, Cause.DEPENDENCY, Cause.NCCL_WATCHDOG)

# NVIDIA's Xid catalog (docs/DOMAIN.md section 4): message and the recovery action NVML reports (field 230).
XID_MESSAGES = {
    48: ("DBE (Double Bit Error) ECC Error", 1),
    62: ("Internal micro-controller halt", 1),
    64: ("ECC page retirement or row remapper recording failure", 4),
    79: ("GPU has fallen off the bus", 2),
    94: ("Contained ECC error", 0),
    95: ("Uncontained ECC error", 1),
    119: ("GSP RPC timeout", 1),
    120: ("GSP error", 1),
}


@dataclass(frozen=True)
class _GpuSignal:
    xids: tuple[int, ...]  # one is drawn; () when the fault raises no Xid
    ecc: bool = False  # an uncorrectable ECC error shows in the running totals
    thermal: bool = False  # the health reading shows thermal slowdown
    health: bool = True  # the agent reads health at the fault


_GPU_SIGNALS = {
    Cause.FAULTY_GPU: _GpuSignal((79,)),
    Cause.GPU_HBM3: _GpuSignal((48, 95, 64), ecc=True),
    Cause.GPU_SRAM: _GpuSignal((94, 95), ecc=True),
    Cause.GPU_SYSTEM_PROCESSOR: _GpuSignal((119, 120, 62)),
    Cause.GPU_THERMAL: _GpuSignal((), thermal=True),
    Cause.SILENT_DATA_CORRUPTION: _GpuSignal((), health=False),  # nothing shows but the loss
}

_REASONS = {
    Cause.SOFTWARE_BUG: "Trainer crashed: unhandled exception in the training loop",
    Cause.DEPENDENCY: "Trainer crashed: incompatible library after an image update",
    Cause.NETWORK_SWITCH_CABLE: "NCCL watchdog: collective operation timeout; InfiniBand link down",
    Cause.HOST_MAINTENANCE: "Host taken down for unplanned maintenance",
    Cause.NIC: "NCCL watchdog: collective operation timeout; NIC reset",
    Cause.NCCL_WATCHDOG: "NCCL watchdog: collective operation timeout",
    Cause.GPU_THERMAL: "GPU thermal slowdown, then shutdown",
    Cause.SILENT_DATA_CORRUPTION: "Loss spike traced to silent data corruption",
    Cause.SSD: "Local SSD I/O errors",
    Cause.POWER_SUPPLY: "Node lost power: power supply failure",
    Cause.SERVER_CHASSIS: "Server chassis fault: node unreachable",
    Cause.IO_EXPANSION_BOARD: "IO expansion board fault: PCIe devices lost",
    Cause.CPU: "Machine check exception on a CPU",
    Cause.SYSTEM_MEMORY: "Uncorrectable host memory error",
}
_MAINTENANCE = (
    "kernel and driver upgrade",
    "firmware update",
    "switch firmware rollout",
    "storage maintenance",
    "training configuration change",
)


def _culprit_share() -> float:
    culprit = sum(CAUSES[c][2] for c in _DRAWN_CAUSES if c not in NO_CULPRIT_CAUSES)
    return culprit / _TOTAL_WEIGHT


def _hang_share() -> float:
    return sum(CAUSES[c][2] for c in HANG_CAUSES) / _TOTAL_WEIGHT


# --- Derived rates ----------------------------------------------------------------------------------------


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


# --- The stream -------------------------------------------------------------------------------------------


def simulate_timeline(config: SimulationConfig) -> RunTimeline:
    """The run as the goodput engine should see it from a complete record of its stream: each stop's fault, detection,
    restart and resume, and each write the record counts. What happens after the end is not in the stream, so a
    restart or resume after it is unknown (None), as it is in the record."""
    # A step event a minute is most of a stream, and no part of the timeline; no event at all is made, only the truth.
    run = _Simulation(config, steps=False, emit=False)
    for _event in run.events():
        pass
    end = config.duration_s

    def moment(seconds: float | None) -> datetime | None:
        if seconds is None or seconds > end:
            return None
        return config.start + timedelta(milliseconds=round(seconds * 1000))

    stops = []
    for fault, detected, running, resumed, step, planned, cause, node in run.stops:
        stops.append(
            InterruptionSpan(
                fault_at=moment(fault),
                detected_at=config.start + timedelta(milliseconds=round(detected * 1000)),
                running_at=moment(running),
                resumed_at=moment(resumed),
                resumed_from_step=step if resumed <= end else None,
                planned=planned,
                cause=cause,
                node=node,
            )
        )
    writes = [
        CheckpointSpan(step, moment(started), blocking, moment(durable), tier)
        for step, started, blocking, durable, tier in run.writes
    ]
    return RunTimeline(config.start, config.end if config.completes else None, config.gpus, tuple(stops), tuple(writes))


def simulate(config: SimulationConfig) -> Iterator[dict]:
    """The run's CloudEvents in non-decreasing time order, ids numbered in stream order; none after config.end."""
    return _Simulation(config).events()


@dataclass
class Summary:
    """Counts over a stream, for a command to print."""

    events: int = 0
    unexpected: int = 0
    planned: int = 0
    checkpoints: int = 0  # completed
    checkpoints_lost: int = 0  # failed: the job stopped before the write was durable
    steps: int = 0  # run.step events
    first_time: str = ""
    last_time: str = ""
    by_type: dict[str, int] = field(default_factory=dict)

    @property
    def interruptions(self) -> int:
        return self.unexpected + self.planned

    def add(self, event: dict) -> None:
        kind = event["type"]
        self.events += 1
        self.by_type[kind] = self.by_type.get(kind, 0) + 1
        self.first_time = self.first_time or event["time"]
        self.last_time = event["time"]
        if kind == "run.failed":
            if event["data"].get("planned"):
                self.planned += 1
            else:
                self.unexpected += 1
        elif kind == "run.step":
            self.steps += 1
        elif kind == "checkpoint.completed":
            self.checkpoints += 1
        elif kind == "checkpoint.failed":
            self.checkpoints_lost += 1


def summary(events: Iterable[dict]) -> Summary:
    result = Summary()
    for event in events:
        result.add(event)
    return result


class _Streams:
    """The simulation's random streams, one per concern, each seeded from the run's seed and its own name."""

    NAMES = (
        "faults", "avoided", "cause", "detection", "rescheduling", "reload", "checkpoint", "repair", "planned", "jobs",
        "tiers",
    )  # fmt: skip
    faults: random.Random
    avoided: random.Random
    cause: random.Random
    detection: random.Random
    rescheduling: random.Random
    reload: random.Random
    checkpoint: random.Random
    repair: random.Random
    planned: random.Random
    jobs: random.Random
    tiers: random.Random

    def __init__(self, seed: int):
        for name in self.NAMES:
            setattr(self, name, random.Random(f"{seed}/{name}"))


@dataclass(frozen=True)
class _Stop:
    kind: str  # fault, planned, end
    at: float  # seconds from the start


class _Simulation:
    """The run's state as it moves forward in time; events go to a heap and leave it in time order.

    Every push is at or after the time the simulation has reached, so everything up to that time can leave.
    """

    def __init__(self, config: SimulationConfig, *, steps: bool = True, emit: bool = True):
        self.c = config
        self.steps = steps
        self.emit = emit  # False: only the truth (stops, writes) is kept, no event is made (simulate_timeline)
        self.rng = _Streams(config.seed)
        self.hazard = fault_hazard_per_s(config)
        self.trained = 0.0  # seconds of training so far, checkpoint writes included: the faults' clock
        self.next_fault = self._fault_after(0.0)
        hosts = [f"{config.cluster}-{i:05d}" for i in range(config.nodes + config.spare_count)]
        self.nodes = hosts[: config.nodes]
        self.spares = deque(hosts[config.nodes :])
        self.repairs: list[tuple[float, str]] = []  # (back in the pool at, hostname), a heap
        self.ecc: dict[tuple[str, int], list[int]] = {}  # running totals: corrected, uncorrected, remapped rows
        self.heap: list[tuple[float, int, str, dict]] = []
        self.pushed = 0
        self.emitted = 0
        self.step = 0
        self.durable_step = 0  # the newest durable checkpoint's step; 0 restarts from scratch
        self.in_flight: int | None = None  # a checkpoint's step that was not durable when the run stopped
        self.in_flight_at = 0.0  # when that write started
        # The truth the record should hold (simulate_timeline): every stop and every write, seconds from the start.
        self.stops: list[tuple[float, float, float, float, int, bool, str, str | None]] = []
        # step, started, blocking, durable, tier
        self.writes: list[tuple[int, float, float | None, float | None, str]] = []
        self.written = 0  # writes started: with two tiers, every durable_every-th is durable
        self.fast_step: int | None = None  # the newest memory copy's step, while newer than the durable one
        self.job = 100_000 + self.rng.jobs.randrange(900_000)
        self.planned = self._planned_times()

    # -- the main loop

    def events(self) -> Iterator[dict]:
        end = self.c.duration_s
        self._fleet_at_start()
        self._attempt(0.0, first=True)
        at = 0.0
        while at < end:
            stop = self._train(at)
            self.trained += stop.at - at
            yield from self._flush(min(stop.at, end))
            if stop.kind == "end":
                break
            if stop.kind == "fault":
                self.next_fault = self._fault_after(self.trained)
            at = self._fault(stop.at) if stop.kind == "fault" else self._planned_stop(stop.at)
            yield from self._flush(min(at, end))
        if self.in_flight is not None:
            self._write_lost(at=math.inf)  # no checkpoint.failed at the end: the record holds it started
        self._fleet_at_end()
        if self.c.completes:
            self._push(end, "run.completed", run=self.c.run)
        yield from self._flush(end)

    def _fault_after(self, trained: float) -> float:
        """When, on the training clock, the next fault after `trained` strikes (infinite at hazard 0)."""
        if self.hazard <= 0:
            return math.inf
        gap = self.rng.faults.expovariate(self.hazard)
        while self.c.faults_avoided and self.rng.avoided.random() < self.c.faults_avoided:
            gap += self.rng.faults.expovariate(self.hazard)  # this one never happens: training goes on
        return trained + gap

    def _train(self, start: float) -> _Stop:
        """Train from `start` until a fault, a due planned stop or the end; returns the stop.

        A step event each step_event_s of training (a minute) carries the last step done. A checkpoint starts at the
        first step event at or after each `checkpoint_interval_s` of training (an interval rounds up to that grain).
        """
        c = self.c
        # Faults come on the run's own training clock, not redrawn after a planned stop (the same process, as it is
        # memoryless): then two configs of one seed meet the same faults at the same training times.
        fault_at = start + self.next_fault - self.trained
        limit = min(fault_at, c.duration_s)
        kind = "fault" if fault_at < c.duration_s else "end"
        base, at, trained, since_checkpoint = self.step, start, 0.0, 0.0
        self.in_flight = None
        tick = c.step_event_s
        while at + tick <= limit:
            at += tick
            trained += tick
            since_checkpoint += tick
            self.step = base + int(trained // c.step_s)
            if self.steps:
                self._push(at, "run.step", run=c.run, step=self.step)
            if since_checkpoint < c.checkpoint_interval_s:
                continue
            since_checkpoint = 0.0
            if self.planned and self.planned[0] <= at:
                done = self._final_checkpoint(at, limit)
                if done is not None:
                    self.planned.popleft()
                    return _Stop("planned", done)
                break
            at = self._checkpoint(at, limit)
        return _Stop(kind, limit)

    # -- checkpoints

    def _checkpoint(self, at: float, limit: float) -> float:
        """An asynchronous checkpoint from `at`; returns when training goes on (or `limit`, the run stopped)."""
        c = self.c
        self.written += 1
        if c.fast_blocking is not None and self.written % c.durable_every:
            return self._fast_checkpoint(at, limit)
        self._push(at, "checkpoint.started", run=c.run, step=self.step)
        blocking = round(c.checkpoint_blocking.draw(self.rng.checkpoint), 1)
        durable = at + blocking + c.checkpoint_drain.draw(self.rng.checkpoint)
        if durable > limit:
            self.in_flight, self.in_flight_at = self.step, at
            return min(at + blocking, limit)
        self._completed(at, durable, blocking)
        return at + blocking

    def _fast_checkpoint(self, at: float, limit: float) -> float:
        """A copy to host memory (and a peer's): restorable once its blocking ends, never durable."""
        c = self.c
        self._push(at, "checkpoint.started", run=c.run, step=self.step)
        blocking = round(c.fast_blocking.draw(self.rng.checkpoint), 1)
        if at + blocking > limit:
            self.in_flight, self.in_flight_at = self.step, at
            return limit
        self._completed(at, at + blocking, blocking, tier="memory")
        return at + blocking

    def _final_checkpoint(self, at: float, limit: float) -> float | None:
        """The synchronous save before planned maintenance; when it is durable, or None if the run stopped first."""
        c = self.c
        self._push(at, "checkpoint.started", run=c.run, step=self.step)
        rng = self.rng.checkpoint
        write = round(c.checkpoint_blocking.draw(rng) + c.checkpoint_drain.draw(rng), 1)
        if at + write > limit:
            self.in_flight, self.in_flight_at = self.step, at
            return None
        self._completed(at, at + write, write)
        return at + write

    def _write_lost(self, *, at: float) -> None:
        """The write in flight when the run stopped: the record holds it as started and never completed, unless its
        checkpoint.failed (at `at`) arrived within the run, which takes it out of the engine's count."""
        if at > self.c.duration_s:
            self.writes.append((self.in_flight or 0, self.in_flight_at, None, None, "durable"))

    def _completed(self, started: float, at: float, blocking_s: float, *, tier: str = "durable") -> None:
        """A write completed at `at`: a durable one is durable then, a memory copy restorable (and never durable)."""
        c = self.c
        self.writes.append((self.step, started, blocking_s, at if tier == "durable" else None, tier))
        self._push(
            at,
            "checkpoint.completed",
            run=c.run,
            step=self.step,
            blocking_s=blocking_s,
            bytes=c.checkpoint_bytes,
            tier=tier,
        )
        if tier == "durable":
            self.durable_step, self.fast_step = self.step, None
        else:
            self.fast_step = self.step

    # -- stops and restarts

    def _fault(self, at: float) -> float:
        """An unexpected fault at `at`: its signals, the report, the culprit's repair, the restart; returns resume."""
        c, rng = self.c, self.rng.cause
        cause = rng.choices(_DRAWN_CAUSES, weights=_CAUSE_WEIGHTS)[0]
        detected = at + (c.detection_hang if cause in HANG_CAUSES else c.detection_crash).draw(self.rng.detection)
        details: dict = {}
        if cause not in NO_CULPRIT_CAUSES:
            details["node"] = rng.choice(self.nodes)
        if cause in _GPU_SIGNALS:
            details["gpu"] = rng.randrange(c.gpus_per_node)
            xid = self._gpu_signals(cause, details["node"], details["gpu"], at)
            if xid is not None:
                details["xid"] = xid
        reason = f"Xid {details['xid']}: {XID_MESSAGES[details['xid']][0]}" if "xid" in details else _REASONS[cause]
        if self.in_flight is not None:
            self._write_lost(at=detected)
            self._push(
                detected,
                "checkpoint.failed",
                run=c.run,
                step=self.in_flight,
                reason="The job stopped before it was durable",
            )
        self._push(
            at,
            "run.failed",
            run=c.run,
            reason=reason,
            category=cause.value,
            detected_at=self._time(detected),
            **details,
        )
        running = detected + c.rescheduling.draw(self.rng.rescheduling)
        if "node" in details:
            self._repair(details["node"], cause, detected, gpu=details.get("gpu"))
            running = self._replace(details["node"], running)
        # The newest memory copy, where one is newer than the durable checkpoint and it survived the fault.
        fast = self.fast_step is not None and self.rng.tiers.random() < c.fast_survives
        restore = self.fast_step if fast else self.durable_step
        resumed = self._attempt(running, restore=restore, reload=c.fast_reload if fast else c.reload)
        self.stops.append((at, detected, running, resumed, restore, False, cause.value, details.get("node")))
        return resumed

    def _planned_stop(self, at: float) -> float:
        """Planned maintenance right after its checkpoint was durable; the run comes back on the same nodes."""
        c = self.c
        reason = f"Planned maintenance: {self.rng.planned.choice(_MAINTENANCE)}"
        self._push(
            at,
            "run.failed",
            run=c.run,
            reason=reason,
            category=Cause.PLANNED_MAINTENANCE.value,
            planned=True,
            detected_at=self._time(at),
        )
        running = at + c.maintenance.draw(self.rng.planned)
        resumed = self._attempt(running, restore=self.durable_step, reload=c.reload)
        planned = Cause.PLANNED_MAINTENANCE.value
        self.stops.append((at, at, running, resumed, self.durable_step, True, planned, None))
        return resumed

    def _attempt(self, at: float, *, first: bool = False, restore: int = 0, reload: Triangular | None = None) -> float:
        """A new attempt starts at `at`; after a stop it reloads the checkpoint of step `restore` in `reload`. Returns
        when it trains again."""
        c = self.c
        self.job += 1 + self.rng.jobs.randrange(40)  # other jobs took the ids between
        self._push(
            at,
            "run.started",
            run=c.run,
            cluster=c.cluster,
            gpus=c.gpus,
            nodes=list(self.nodes),
            job_id=str(self.job),
            model_params=c.model_params,
            checkpoint_interval_s=c.checkpoint_interval_s,
        )
        if first:
            return at
        resumed = at + (reload or c.reload).draw(self.rng.reload)
        self._push(resumed, "run.restored", run=c.run, from_step=restore)
        self.step = restore
        self.fast_step = None  # the restarted job writes its memory copies again
        return resumed

    # -- hardware

    def _gpu_signals(self, cause: Cause, node: str, gpu: int, at: float) -> int | None:
        """The Xid, ECC totals and health reading the node agent reports at the fault; returns the Xid."""
        signal, rng = _GPU_SIGNALS[cause], self.rng.cause
        xid = rng.choice(signal.xids) if signal.xids else None
        if xid is not None:
            self._push(at, "gpu.xid", node=node, gpu=gpu, xid=xid, message=XID_MESSAGES[xid][0])
        if signal.ecc:
            totals = self.ecc.setdefault((node, gpu), [0, 0, 0])
            totals[0] += rng.randint(1, 500)
            totals[1] += 1
            totals[2] += 1
            self._push(
                at,
                "gpu.ecc",
                node=node,
                gpu=gpu,
                corrected=totals[0],
                uncorrected=totals[1],
                remapped_rows_uncorrected=totals[2],
                remapped_rows_pending=xid != 64,
                remapped_rows_failure=xid == 64,
            )
        if signal.health:
            hot = signal.thermal
            self._push(
                at,
                "gpu.health",
                node=node,
                gpu=gpu,
                temperature_c=round(rng.uniform(92, 100) if hot else rng.uniform(55, 80), 1),
                throttle_reasons=["hw_thermal_slowdown", "sw_thermal_slowdown"] if hot else [],
                nvlink_errors=0,
                recovery_action=XID_MESSAGES[xid][1] if xid is not None else 0,
            )
        return xid

    def _repair(self, node: str, cause: Cause, detected: float, *, gpu: int | None = None) -> None:
        """Cordon, repair, burn-in and health check; the node is back in the spare pool afterwards. The agent,
        started again on the repaired node, reads its faulted GPU clean: without that reading the record keeps the
        fault's (a driver asking for a reboot, a pending row remap) on a node back in service for ever."""
        c, rng = self.c, self.rng.repair
        label = CAUSES[cause][0]
        cordoned = detected + rng.uniform(5, 60)
        self._push(cordoned, "node.state", node=node, state="cordoned", reason=f"{label}: drained from {c.run}")
        in_repair = cordoned + rng.uniform(600, 1800)
        self._push(in_repair, "node.state", node=node, state="in_repair", reason=f"{label}: repair ticket opened")
        burn_in = in_repair + c.repair.draw(rng)
        fix = "GPU replaced (RMA)" if CAUSES[cause][1] == Group.GPU else f"{label} repaired"
        self._push(burn_in, "node.state", node=node, state="burn_in", reason=fix)
        signal = _GPU_SIGNALS.get(cause)
        if gpu is not None and signal is not None:
            self._clean_reading(node, gpu, signal, burn_in + 60)
        ready = burn_in + c.burn_in.draw(rng)
        self._push(ready, "healthcheck.result", node=node, check="dcgm_diag_r3", passed=True)
        self._push(ready, "node.state", node=node, state="hot_spare", reason="Passed burn-in and DCGM diagnostics")
        heapq.heappush(self.repairs, (ready, node))
        # A replaced GPU starts its ECC totals from zero.
        for key in [key for key in self.ecc if key[0] == node]:
            del self.ecc[key]

    def _clean_reading(self, node: str, gpu: int, signal: "_GpuSignal", at: float) -> None:
        """A repaired GPU's first readings: no recovery action, idle and cool; ECC totals from zero (replaced).
        No random draw, so the rest of the stream is the one the seed gave before."""
        if signal.health:
            self._push(
                at,
                "gpu.health",
                node=node,
                gpu=gpu,
                temperature_c=40.0,
                throttle_reasons=[],
                nvlink_errors=0,
                recovery_action=0,
            )
        if signal.ecc:
            self._push(
                at,
                "gpu.ecc",
                node=node,
                gpu=gpu,
                corrected=0,
                uncorrected=0,
                remapped_rows_uncorrected=0,
                remapped_rows_pending=False,
                remapped_rows_failure=False,
            )

    def _replace(self, node: str, at: float) -> float:
        """Swap `node` for a hot spare; returns when the job can start, later if it had to wait for a repair."""
        while self.repairs and self.repairs[0][0] <= at:
            self.spares.append(heapq.heappop(self.repairs)[1])
        if not self.spares:
            ready, host = heapq.heappop(self.repairs)
            self.spares.append(host)
            at = max(at, ready + 60)
        spare = self.spares.popleft()
        self.nodes[self.nodes.index(node)] = spare
        reason = f"Joined {self.c.run} in place of {node}"
        self._push(at, "node.state", node=spare, state="in_service", reason=reason, cluster=self.c.cluster)
        return at

    def _fleet_at_start(self) -> None:
        c = self.c
        for host in [*self.nodes, *self.spares]:
            self._push(0.0, "node.heartbeat", node=host, cluster=c.cluster)
        for host in self.spares:
            self._push(0.0, "node.state", node=host, state="hot_spare", reason="Passed burn-in", cluster=c.cluster)

    def _fleet_at_end(self) -> None:
        """A last heartbeat from every node not in repair, so that a live demo's nodes look alive."""
        end = self.c.duration_s
        back = [host for ready, host in self.repairs if ready <= end]
        for host in sorted([*self.nodes, *self.spares, *back]):
            self._push(end, "node.heartbeat", node=host, cluster=self.c.cluster)

    def _planned_times(self) -> deque[float]:
        """One planned stop in each of `planned_count` equal slots of the run, away from the slot edges."""
        count = self.c.planned_count
        slot = self.c.duration_s / count if count else 0.0
        return deque(slot * (i + self.rng.planned.uniform(0.1, 0.9)) for i in range(count))

    # -- output

    def _push(self, at: float, type_: str, **data) -> None:
        if not self.emit:
            return
        heapq.heappush(self.heap, (at, self.pushed, type_, data))
        self.pushed += 1

    def _flush(self, until: float) -> Iterator[dict]:
        """Events up to `until` (seconds), in time order; the same instant keeps the order they were pushed in."""
        c = self.c
        while self.heap and self.heap[0][0] <= until:
            at, _, type_, data = heapq.heappop(self.heap)
            self.emitted += 1
            yield {
                "specversion": "1.0",
                "id": f"{c.run}-{c.seed}-{self.emitted:07d}",
                "source": c.source,
                "type": type_,
                "time": self._time(at),
                "data": data,
            }

    def _time(self, seconds: float) -> str:
        at = self.c.start + timedelta(milliseconds=round(seconds * 1000))
        return format_time(at)
