"""What the engine reads and returns: a run's timeline (its interruptions, checkpoint writes and shrunk
attempts) and the breakdown of its time by stage, in seconds."""

from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta

# The order is the priority: where labelled intervals overlap, the earlier stage owns the time.
# "other" is downtime of an interruption that none of its three stages explains (see _labelled). "shrunk" is last and
# a share: of the time no other stage owns while the run trains on fewer GPUs than its own, the missing GPUs' part.
STAGES = ("detection", "rescheduling", "reload", "other", "rewound", "checkpoint", "shrunk")


@dataclass(frozen=True)
class InterruptionSpan:
    """One stop of a run. running_at / resumed_at are None while the run is still restarting."""

    fault_at: datetime
    detected_at: datetime
    running_at: datetime | None = None  # the next attempt started
    resumed_at: datetime | None = None  # training stepped again
    resumed_from_step: int | None = None  # the checkpoint it resumed from
    planned: bool = False
    cause: str = "unknown"
    node: object = None  # the node the fault named, if any: its memory and local checkpoint copies went with it


@dataclass(frozen=True)
class CheckpointSpan:
    """One step's write: training stood still for blocking_s seconds from started_at.

    blocking_s None: a write started and never completed (its cost unknown, so it blocks for nothing counted; it
    still says the run had reached its step at started_at). durable_at None: not known durable (a memory or local
    copy, on the run's own nodes; the record gives a durable-tier write its completion time)."""

    step: int
    started_at: datetime
    blocking_s: float | None
    durable_at: datetime | None = None
    tier: str = "durable"

    @property
    def blocked_until(self) -> datetime:
        # `not > 0` also turns a NaN cost (and an unknown one) into an empty span instead of an exception.
        seconds = self.blocking_s if self.blocking_s is not None and self.blocking_s > 0 else 0.0
        return self.started_at + timedelta(seconds=seconds)


@dataclass(frozen=True)
class ShrunkSpan:
    """An attempt that ran on fewer GPUs than the run's own (shrunk to continue without a node): from its start to
    its end (None: still on, up to the run's end). It trains at gpus / the run's GPUs of the run's throughput."""

    started_at: datetime
    ended_at: datetime | None
    gpus: int


@dataclass(frozen=True)
class RunTimeline:
    """One run. ended_at None means it is still going (running or restarting) up to `now`.

    heard_until: a run silent while restarting is counted only up to here (its last event plus the silence allowed,
    docs/DOMAIN.md section 2): nobody has said what became of it after, so its downtime stops growing; None: up to
    `now`. A new event moves it, and the whole gap counts again."""

    started_at: datetime
    ended_at: datetime | None = None
    gpus: int = 0
    interruptions: tuple[InterruptionSpan, ...] = ()
    checkpoints: tuple[CheckpointSpan, ...] = ()
    heard_until: datetime | None = None
    shrunk: tuple[ShrunkSpan, ...] = ()

    def end(self, now: datetime) -> datetime:
        """Where the run's record ends: its end, else `now`, but no later than it was heard from."""
        if self.ended_at is not None:
            return self.ended_at
        return now if self.heard_until is None else min(now, self.heard_until)


@dataclass(frozen=True)
class Breakdown:
    """Seconds of wall-clock time by where they went (GPU-seconds once weighted). productive + stages == wall."""

    wall_clock_s: float = 0.0
    productive_s: float = 0.0
    detection_s: float = 0.0
    rescheduling_s: float = 0.0
    reload_s: float = 0.0
    rewound_s: float = 0.0
    checkpoint_s: float = 0.0
    other_s: float = 0.0
    shrunk_s: float = 0.0  # throughput lost to training on fewer GPUs than the run's own
    interruptions: int = 0  # faults in the window, a count: never weighted

    def __add__(self, other: "Breakdown") -> "Breakdown":
        if not isinstance(other, Breakdown):
            return NotImplemented
        return Breakdown(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def stages_s(self) -> dict[str, float]:
        """Badput per stage, in STAGES order."""
        return {stage: getattr(self, f"{stage}_s") for stage in STAGES}

    @property
    def lost_s(self) -> float:
        return sum(self.stages_s.values())

    @property
    def goodput(self) -> float:
        """productive / wall-clock, in [0, 1]; 0 for an empty window. GPU-hour weighted once weighted."""
        if self.wall_clock_s <= 0:
            return 0.0
        return min(max(self.productive_s / self.wall_clock_s, 0.0), 1.0)

    def weighted(self, gpus: int) -> "Breakdown":
        """The same breakdown in GPU-seconds, so that sums over runs weigh each run by its size."""
        durations = {f.name: getattr(self, f.name) * gpus for f in fields(self) if f.name.endswith("_s")}
        return replace(self, **durations)

    def gpu_hours(self, gpus: int = 1) -> dict[str, float]:
        """GPU-hours of wall-clock, productive and each stage; gpus=1 for a breakdown already weighted."""
        names = ("wall_clock", "productive", *STAGES)
        return {name: gpu_hours(getattr(self, f"{name}_s"), gpus) for name in names}


@dataclass(frozen=True)
class InterruptionCost:
    """What one interruption cost: minutes per stage and GPU-hours lost over those stages."""

    number: int  # 1-based, in fault order
    fault_at: datetime
    cause: str
    planned: bool
    detection_min: float
    rescheduling_min: float
    reload_min: float
    rewound_min: float
    other_min: float
    gpu_hours: float

    @property
    def total_min(self) -> float:
        return self.detection_min + self.rescheduling_min + self.reload_min + self.rewound_min + self.other_min


def gpu_hours(seconds: float, gpus: int) -> float:
    """Seconds of a gpus-wide run as GPU-hours."""
    return seconds * gpus / 3600
