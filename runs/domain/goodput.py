"""Goodput of training runs: where each second of a run's wall-clock time went (DOMAIN.md section 2).

Pure: no Django import. Selectors turn Run, Interruption and Checkpoint rows into the frozen dataclasses
below and pass an explicit window [since, until) and `now`.

Times are timezone-aware datetimes (UTC). Durations are seconds (floats) unless a name says otherwise;
a Breakdown made by `weighted()` or `fleet()` holds GPU-seconds in the same fields.

How time is attributed: every interruption and checkpoint becomes labelled intervals, overlaps are resolved
by a fixed priority (STAGES order: downtime first, then rewound work, then checkpoint blocking; between two
interruptions with the same stage, the earlier one), everything is clipped to the window and to the run's
own span, and whatever no label covers is productive. Sums are kept in timedelta (exact microseconds) until
the end, so productive + stages == wall-clock and windows add up to float rounding only.
"""

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime, time, timedelta
from operator import itemgetter

# The order is the priority: where labelled intervals overlap, the earlier stage owns the time.
# "other" is downtime of an interruption that none of its three stages explains (see _downtime).
STAGES = ("detection", "rescheduling", "reload", "other", "rewound", "checkpoint")
_RANK = {stage: rank for rank, stage in enumerate(STAGES)}
_NO_OWNER = -1  # checkpoint blocking belongs to no interruption


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


@dataclass(frozen=True)
class CheckpointSpan:
    """The blocking part of one checkpoint: training stood still for blocking_s seconds from started_at."""

    step: int
    started_at: datetime
    blocking_s: float

    @property
    def blocked_until(self) -> datetime:
        # `not > 0` also turns a NaN cost into an empty span instead of an exception.
        return self.started_at + timedelta(seconds=self.blocking_s if self.blocking_s > 0 else 0.0)


@dataclass(frozen=True)
class RunTimeline:
    """One run. ended_at None means it is still going (running or restarting) up to `now`."""

    started_at: datetime
    ended_at: datetime | None = None
    gpus: int = 0
    interruptions: tuple[InterruptionSpan, ...] = ()
    checkpoints: tuple[CheckpointSpan, ...] = ()


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


def breakdown(timeline: RunTimeline, *, since: datetime, until: datetime, now: datetime) -> Breakdown:
    """Where the run's time in [since, until) went, counting only up to its end (or `now`)."""
    if until <= since:
        return Breakdown()
    return _breakdowns(timeline, [(since, until)], now=now)[0]


def daily(timeline: RunTimeline, *, since: datetime, until: datetime, now: datetime) -> list[tuple[date, Breakdown]]:
    """One breakdown per UTC day that meets [since, until), edge days counted in part; zeros where idle."""
    return _by_period(timeline, since=since, until=until, now=now, period_start=_day_start, length=timedelta(days=1))


def weekly(timeline: RunTimeline, *, since: datetime, until: datetime, now: datetime) -> list[tuple[date, Breakdown]]:
    """One breakdown per ISO week (keyed by its Monday, UTC) that meets [since, until)."""
    return _by_period(timeline, since=since, until=until, now=now, period_start=_week_start, length=timedelta(days=7))


def fleet(timelines: Iterable[RunTimeline], *, since: datetime, until: datetime, now: datetime) -> Breakdown:
    """All runs together in GPU-seconds: goodput = productive GPU-seconds / wall-clock GPU-seconds."""
    total = Breakdown()
    for timeline in timelines:
        total += breakdown(timeline, since=since, until=until, now=now).weighted(timeline.gpus)
    return total


def interruption_costs(timeline: RunTimeline, *, now: datetime) -> list[InterruptionCost]:
    """Each interruption's cost over the whole run, in fault order. Overlaps are charged once, as in breakdown()."""
    run_end = timeline.ended_at or now
    interruptions = _in_fault_order(timeline)
    spent = [dict.fromkeys(STAGES, timedelta()) for _ in interruptions]
    for start, end, stage, owner in _resolve(_labelled(timeline, run_end)):
        if owner != _NO_OWNER:
            spent[owner][stage] += end - start
    costs = []
    for number, (span, stages) in enumerate(zip(interruptions, spent, strict=True), start=1):
        minutes = {f"{stage}_min": stages[stage].total_seconds() / 60 for stage in STAGES if stage != "checkpoint"}
        lost_s = sum(stages.values(), timedelta()).total_seconds()
        costs.append(
            InterruptionCost(
                number=number,
                fault_at=span.fault_at,
                cause=span.cause,
                planned=span.planned,
                gpu_hours=gpu_hours(lost_s, timeline.gpus),
                **minutes,
            )
        )
    return costs


def segments(timeline: RunTimeline, *, now: datetime) -> list[tuple[datetime, datetime, str]]:
    """The run's lost time as disjoint (start, end, stage) spans in time order; the gaps are productive."""
    run_end = timeline.ended_at or now
    return [(start, end, stage) for start, end, stage, _owner in _resolve(_labelled(timeline, run_end))]


# -- periods ---------------------------------------------------------------------------------------------


def _day_start(moment: datetime) -> datetime:
    return datetime.combine(moment.astimezone(UTC).date(), time(), tzinfo=UTC)


def _week_start(moment: datetime) -> datetime:
    day = _day_start(moment)
    return day - timedelta(days=day.weekday())


def _by_period(
    timeline: RunTimeline,
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    period_start: Callable[[datetime], datetime],
    length: timedelta,
) -> list[tuple[date, Breakdown]]:
    # Period arithmetic in UTC, where days are always 24 h: a DST-aware zone would make some days 23 h long.
    periods, keys = [], []
    start = since
    while start < until:
        end = min(period_start(start) + length, until)
        periods.append((start, end))
        keys.append(period_start(start).date())
        start = end
    return list(zip(keys, _breakdowns(timeline, periods, now=now), strict=True))


def _breakdowns(timeline: RunTimeline, periods: list[tuple[datetime, datetime]], *, now: datetime) -> list[Breakdown]:
    """Breakdowns for contiguous, ordered periods, from one pass over the resolved timeline."""
    run_end = timeline.ended_at or now
    starts = [start for start, _ in periods]
    spent = [dict.fromkeys(STAGES, timedelta()) for _ in periods]
    for start, end, stage, _owner in _resolve(_labelled(timeline, run_end)):
        index = max(bisect_right(starts, start) - 1, 0)
        while index < len(periods) and periods[index][0] < end:
            spent[index][stage] += _overlap(start, end, *periods[index])
            index += 1
    faults = sorted(span.fault_at for span in timeline.interruptions)
    result = []
    for (start, end), stages in zip(periods, spent, strict=True):
        wall = _overlap(start, end, timeline.started_at, run_end)
        lost = sum(stages.values(), timedelta())
        result.append(
            Breakdown(
                wall_clock_s=wall.total_seconds(),
                productive_s=(wall - lost).total_seconds(),
                interruptions=bisect_left(faults, end) - bisect_left(faults, start),
                **{f"{stage}_s": stages[stage].total_seconds() for stage in STAGES},
            )
        )
    return result


def _overlap(start: datetime, end: datetime, lo: datetime, hi: datetime) -> timedelta:
    return max(min(end, hi) - max(start, lo), timedelta())


# -- labelling and overlap resolution ----------------------------------------------------------------------

Span = tuple[datetime, datetime, str, int]  # start, end, stage, owner (interruption index or _NO_OWNER)


def _in_fault_order(timeline: RunTimeline) -> list[InterruptionSpan]:
    return sorted(timeline.interruptions, key=lambda span: span.fault_at)


def _labelled(timeline: RunTimeline, run_end: datetime) -> list[Span]:
    """Every labelled interval of the run, clipped to [started_at, run_end); they may overlap."""
    spans: list[Span] = [(c.started_at, c.blocked_until, "checkpoint", _NO_OWNER) for c in timeline.checkpoints]
    interruptions = _in_fault_order(timeline)
    written: dict[int, list[datetime]] = {}  # step -> when its blocking ended, looked up once per interruption
    for checkpoint in timeline.checkpoints:
        written.setdefault(checkpoint.step, []).append(checkpoint.blocked_until)
    previous_end = timeline.started_at
    for owner, span in enumerate(interruptions):
        # A stage still open ends where the run does, or at the next fault: a failure during reload starts
        # a new interruption, it does not extend the old one.
        later = [nxt.fault_at for nxt in interruptions[owner + 1 : owner + 2]]
        open_end = min([run_end, *later])
        spans += [(start, end, stage, owner) for start, end, stage in _downtime(span, open_end)]
        rewound_from = _rewound_from(span, written, max(previous_end, timeline.started_at))
        spans.append((rewound_from, span.fault_at, "rewound", owner))
        previous_end = span.resumed_at if span.resumed_at is not None else open_end
    clipped = [(max(start, timeline.started_at), min(end, run_end), stage, owner) for start, end, stage, owner in spans]
    return [span for span in clipped if span[0] < span[1]]


def _downtime(span: InterruptionSpan, open_end: datetime) -> list[tuple[datetime, datetime, str]]:
    """Detection, rescheduling and reload, plus "other" over the whole downtime at lower priority.

    "other" shows through only where the stages leave a gap: training resumed but the restart time is
    unknown (resumed_at without running_at), so [detected_at, resumed_at) cannot be split between them.
    """
    fault, running, resumed = span.fault_at, span.running_at, span.resumed_at
    detected = max(span.detected_at, fault)
    stages = [(fault, detected, "detection")]
    if running is not None:
        stages.append((detected, running, "rescheduling"))
        stages.append((running, resumed if resumed is not None else open_end, "reload"))
    elif resumed is None:
        stages.append((detected, open_end, "rescheduling"))
    down_until = max(end for _, end, _ in stages)
    if resumed is not None:
        down_until = max(down_until, resumed)
    stages.append((fault, down_until, "other"))
    return stages


def _rewound_from(span: InterruptionSpan, written: dict[int, list[datetime]], fallback: datetime) -> datetime:
    """Where the work lost by this fault began: the end of the blocking part of the checkpoint it resumed from.

    Only a checkpoint whose blocking ended by the fault counts. Without one (not resumed yet, or the step is
    unknown) all training since the run started or the previous interruption ended is taken as lost.
    """
    if span.resumed_from_step is None:
        return fallback
    ends = [end for end in written.get(span.resumed_from_step, ()) if end <= span.fault_at]
    return max(ends, default=fallback)


def _resolve(spans: Iterable[Span]) -> list[Span]:
    """Disjoint, time-ordered spans: each instant goes to the highest-priority label covering it, once."""
    edges = []
    for start, end, stage, owner in spans:
        key = (_RANK[stage], owner)
        edges += [(start, 1, key), (end, -1, key)]
    edges.sort(key=itemgetter(0))
    active: Counter = Counter()
    resolved: list[Span] = []
    previous = None
    for at, change, key in edges:
        if previous is not None and previous < at and active:
            rank, owner = min(active)
            _append(resolved, (previous, at, STAGES[rank], owner))
        active[key] += change
        if not active[key]:
            del active[key]
        previous = at
    return resolved


def _append(resolved: list[Span], span: Span) -> None:
    if resolved and resolved[-1][1] == span[0] and resolved[-1][2:] == span[2:]:
        resolved[-1] = (resolved[-1][0], span[1], span[2], span[3])
    else:
        resolved.append(span)
