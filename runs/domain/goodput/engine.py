"""The engine: a timeline's labelled intervals resolved by priority, tallied by period in whole microseconds."""

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from runs.domain.goodput.spans import (
    STAGES,
    Breakdown,
    CheckpointSpan,
    InterruptionCost,
    InterruptionSpan,
    RunTimeline,
    gpu_hours,
)
from runs.domain.utcdays import day_start, week_start

_DETECTION, _RESCHEDULING, _RELOAD, _OTHER, _REWOUND, _CHECKPOINT, _SHRUNK = range(len(STAGES))


_NO_OWNER = -1  # checkpoint blocking belongs to no interruption


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_US = timedelta(microseconds=1)


_US_PER_S = 1_000_000


def breakdown(timeline: RunTimeline, *, since: datetime, until: datetime, now: datetime) -> Breakdown:
    """Where the run's time in [since, until) went, counting only up to its end (or `now`)."""
    if until <= since:
        return Breakdown()
    return _breakdowns(timeline, [_us(since), _us(until)], now=now)[0]


def daily(timeline: RunTimeline, *, since: datetime, until: datetime, now: datetime) -> list[tuple[date, Breakdown]]:
    """One breakdown per UTC day that meets [since, until), edge days counted in part; zeros where idle."""
    return breakdown_and_daily(timeline, since=since, until=until, now=now)[1]


def breakdown_and_daily(
    timeline: RunTimeline, *, since: datetime, until: datetime, now: datetime
) -> tuple[Breakdown, list[tuple[date, Breakdown]]]:
    """breakdown() and daily() of the same window from one pass over the run.

    The total is the days' sum taken in whole microseconds before any division, so it is exactly what
    breakdown() gives for [since, until); the days of a window add up to it by construction.
    """
    if until <= since:
        return Breakdown(), []
    return _by_period(timeline, since=since, until=until, now=now, period_start=day_start, length=timedelta(days=1))


def weekly(timeline: RunTimeline, *, since: datetime, until: datetime, now: datetime) -> list[tuple[date, Breakdown]]:
    """One breakdown per ISO week (keyed by its Monday, UTC) that meets [since, until)."""
    if until <= since:
        return []
    _total, weeks = _by_period(
        timeline, since=since, until=until, now=now, period_start=week_start, length=timedelta(days=7)
    )
    return weeks


def fleet(timelines: Iterable[RunTimeline], *, since: datetime, until: datetime, now: datetime) -> Breakdown:
    """All runs together in GPU-seconds: goodput = productive GPU-seconds / wall-clock GPU-seconds."""
    total = Breakdown()
    for timeline in timelines:
        total += breakdown(timeline, since=since, until=until, now=now).weighted(timeline.gpus)
    return total


def interruption_costs(timeline: RunTimeline, *, now: datetime) -> list[InterruptionCost]:
    """Each interruption's cost over the whole run, in fault order. Overlaps are charged once, as in breakdown()."""
    resolved = _Resolved.of(timeline, now=now)
    spent = [[0] * len(STAGES) for _ in resolved.interruptions]
    for start, end, rank, owner in resolved.owned:
        spent[owner][rank] += end - start
    costs = []
    for number, (span, stages) in enumerate(zip(resolved.interruptions, spent, strict=True), start=1):
        minutes = {f"{stage}_min": stages[rank] / _US_PER_S / 60 for rank, stage in enumerate(STAGES[:_CHECKPOINT])}
        costs.append(
            InterruptionCost(
                number=number,
                fault_at=span.fault_at,
                cause=span.cause,
                planned=span.planned,
                gpu_hours=gpu_hours(sum(stages) / _US_PER_S, timeline.gpus),
                **minutes,
            )
        )
    return costs


def segments(timeline: RunTimeline, *, now: datetime) -> list[tuple[datetime, datetime, str]]:
    """The run's lost time as disjoint (start, end, stage) spans in time order (UTC); the gaps are productive."""
    resolved = _Resolved.of(timeline, now=now)
    shrunk = [(start, end, _SHRUNK, _NO_OWNER) for start, end, _lost, _of in resolved.shrunk]
    spans = sorted(resolved.in_time_order() + shrunk)
    return [(_datetime(start), _datetime(end), STAGES[rank]) for start, end, rank, _owner in spans]


def _us(moment: datetime) -> int:
    """An aware datetime as whole microseconds since the Unix epoch: exact, a datetime has no finer grain."""
    return (moment - _EPOCH) // _US


def _datetime(microseconds: int) -> datetime:
    return _EPOCH + timedelta(microseconds=microseconds)


def _blocking_us(seconds: float) -> int:
    """A blocking cost in whole microseconds, rounded as `timedelta(seconds=...)` rounds (half to even on the
    fraction), so that it ends where CheckpointSpan.blocked_until does. Negative and NaN costs block for 0."""
    if not seconds > 0:
        return 0
    whole = int(seconds)
    return whole * _US_PER_S + round((seconds - whole) * _US_PER_S)


def _by_period(
    timeline: RunTimeline,
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    period_start: Callable[[datetime], datetime],
    length: timedelta,
) -> tuple[Breakdown, list[tuple[date, Breakdown]]]:
    """The window's total and one breakdown per period; since < until."""
    # Period arithmetic in UTC, where days are always 24 h: a DST-aware zone would make some days 23 h long.
    bounds, keys = [_us(since)], []
    start = since
    while start < until:
        first = period_start(start)
        start = min(first + length, until)
        bounds.append(_us(start))
        keys.append(first.date())
    tallies = _tallies(timeline, bounds, now=now)
    total = [sum(column) for column in zip(*tallies, strict=True)]
    return _breakdown(total), [(key, _breakdown(tally)) for key, tally in zip(keys, tallies, strict=True)]


def _breakdowns(timeline: RunTimeline, bounds: list[int], *, now: datetime) -> list[Breakdown]:
    return [_breakdown(tally) for tally in _tallies(timeline, bounds, now=now)]


# A tally of one period, in whole microseconds: one slot per stage (STAGES order), then wall-clock, then the
# count of faults in the period.
_WALL, _FAULTS = len(STAGES), len(STAGES) + 1


def _tallies(timeline: RunTimeline, bounds: list[int], *, now: datetime) -> list[list[int]]:
    """Tallies for the contiguous periods [bounds[i], bounds[i + 1]), from one pass over the resolved timeline."""
    resolved = _Resolved.of(timeline, now=now)
    last = len(bounds) - 1
    tallies = [[0] * (_FAULTS + 1) for _ in range(last)]
    for spans in (resolved.owned, resolved.blocking):
        for start, end, rank, _owner in spans:
            index = bisect_right(bounds, start) - 1
            if index < 0:
                index = 0
            while index < last and bounds[index] < end:
                lo, hi = bounds[index], bounds[index + 1]
                lo, hi = (start if start > lo else lo), (end if end < hi else hi)
                if hi > lo:
                    tallies[index][rank] += hi - lo
                index += 1
    for start, end, lost, of in resolved.shrunk:  # the missing GPUs' share of each piece, in whole microseconds
        index = max(bisect_right(bounds, start) - 1, 0)
        while index < last and bounds[index] < end:
            lo, hi = max(start, bounds[index]), min(end, bounds[index + 1])
            if hi > lo:
                tallies[index][_SHRUNK] += (hi - lo) * lost // of
            index += 1
    for index, tally in enumerate(tallies):
        lo, hi = bounds[index], bounds[index + 1]
        tally[_WALL] = max(min(hi, resolved.run_end) - max(lo, resolved.started), 0)
        tally[_FAULTS] = bisect_left(resolved.faults, hi) - bisect_left(resolved.faults, lo)
    return tallies


def _breakdown(tally: list[int]) -> Breakdown:
    wall, lost = tally[_WALL], sum(tally[:_WALL])
    return Breakdown(
        wall_clock_s=wall / _US_PER_S,
        productive_s=(wall - lost) / _US_PER_S,
        interruptions=tally[_FAULTS],
        **{f"{stage}_s": tally[rank] / _US_PER_S for rank, stage in enumerate(STAGES)},
    )


# start, end (microseconds), rank (index into STAGES, the priority), owner (interruption index or _NO_OWNER)
Span = tuple[int, int, int, int]


@dataclass(frozen=True)
class _Resolved:
    """A run's lost time as disjoint spans: what interruptions own, and checkpoint blocking nobody else owns.

    Both lists are in time order and disjoint from each other; together they are the priority resolution of
    every labelled interval of the run (each instant to the highest-priority label covering it, once).
    """

    started: int
    run_end: int
    interruptions: list[InterruptionSpan]  # in fault order: owner i is interruptions[i]
    faults: list[int]  # their fault times, ascending
    owned: list[Span]
    blocking: list[Span]
    shrunk: list[tuple[int, int, int, int]] = ()  # start, end, GPUs missing, the run's GPUs: where nothing else is

    @classmethod
    def of(cls, timeline: RunTimeline, *, now: datetime) -> "_Resolved":
        started, run_end = _us(timeline.started_at), _us(timeline.end(now))
        keyed = sorted(((_us(span.fault_at), index) for index, span in enumerate(timeline.interruptions)))
        interruptions = [timeline.interruptions[index] for _, index in keyed]
        faults = [fault for fault, _ in keyed]
        writes = []  # clipped to the run
        written: dict[int, list[_Write]] = {}  # by step, looked up once per interruption
        for checkpoint in timeline.checkpoints:
            # The hot loop of a long run (thousands of checkpoints): _us() inlined, a plain tuple a write.
            start = (checkpoint.started_at - _EPOCH) // _US
            if checkpoint.blocking_s is None:  # never completed: blocks for nothing counted, bounds a restore of it
                written.setdefault(checkpoint.step, []).append((start, None, checkpoint))
                continue
            end = start + _blocking_us(checkpoint.blocking_s)
            written.setdefault(checkpoint.step, []).append((start, end, checkpoint))
            start, end = (start if start > started else started), (end if end < run_end else run_end)
            if start < end:
                writes.append((start, end))
        owned = _resolve(_labelled(interruptions, faults, written, started, run_end))
        blocking = _uncovered(_union(writes), owned, _CHECKPOINT)
        shrunk = []
        if timeline.shrunk and timeline.gpus > 0:
            taken = sorted((start, end, rank, owner) for start, end, rank, owner in owned + blocking)
            for stretch in timeline.shrunk:
                lost = timeline.gpus - min(max(stretch.gpus, 0), timeline.gpus)
                start = max(_us(stretch.started_at), started)
                end = min(_us(stretch.ended_at) if stretch.ended_at is not None else run_end, run_end)
                if lost and start < end:
                    pieces = _uncovered([(start, end)], taken, _SHRUNK)
                    shrunk += [(lo, hi, lost, timeline.gpus) for lo, hi, _rank, _owner in pieces]
        return cls(started, run_end, interruptions, faults, owned, blocking, shrunk)

    def in_time_order(self) -> list[Span]:
        return sorted(self.owned + self.blocking)


# Tiers whose copy lives on the run's own nodes until it is made durable.
_NODE_TIERS = frozenset({"memory", "local"})


# One step's checkpoint write: its blocking [start, end) in microseconds (end None: it never completed) and its span.
_Write = tuple[int, int | None, CheckpointSpan]


def _survives(write: _Write, fault: int, node_named: bool) -> bool:
    """Still there after the fault: written by then, and durable by then or a memory or local copy (on the run's own
    nodes) that the fault spared, naming no node."""
    _start, end, checkpoint = write
    if end is None or end > fault:
        return False
    if checkpoint.durable_at is not None and _us(checkpoint.durable_at) <= fault:
        return True
    return checkpoint.tier in _NODE_TIERS and not node_named


def _labelled(
    interruptions: list[InterruptionSpan],
    faults: list[int],
    written: dict[int, list[_Write]],
    started: int,
    run_end: int,
) -> list[Span]:
    """Every labelled interval the interruptions own, clipped to [started, run_end); they may overlap."""
    spans: list[Span] = []
    previous_end = started
    count = len(interruptions)
    # A run that failed again before it trained again resumes, in the end, from the checkpoint of the restore that
    # finally succeeded: each interruption not resumed before the next fault takes that later restore's step.
    resumed_from: list[int | None] = [None] * count
    for owner in range(count - 1, -1, -1):
        span = interruptions[owner]
        if span.resumed_at is not None or span.resumed_from_step is not None or owner + 1 == count:
            resumed_from[owner] = span.resumed_from_step
        else:
            resumed_from[owner] = resumed_from[owner + 1]
    for owner, span in enumerate(interruptions):
        fault = faults[owner]
        # A stage still open ends where the run does, or at the next fault: a failure during reload starts
        # a new interruption, it does not extend the old one.
        open_end = min(run_end, faults[owner + 1]) if owner + 1 < count else run_end
        running = None if span.running_at is None else _us(span.running_at)
        resumed = None if span.resumed_at is None else _us(span.resumed_at)
        detected = max(_us(span.detected_at), fault)
        spans.append((fault, detected, _DETECTION, owner))
        # "other" covers the whole downtime at lower priority than the stages. It shows through only where they
        # leave a gap: training resumed but the restart time is unknown (resumed_at without running_at), so
        # [detected_at, resumed_at) cannot be split between them. Where the stages cover it, it is left out.
        if running is not None:
            reload_end = resumed if resumed is not None else open_end
            spans.append((detected, running, _RESCHEDULING, owner))
            spans.append((running, reload_end, _RELOAD, owner))
            down_until, covered = max(detected, running, reload_end), detected <= running <= reload_end
        elif resumed is None:
            spans.append((detected, open_end, _RESCHEDULING, owner))
            down_until, covered = max(detected, open_end), True
        else:
            down_until = max(detected, resumed)
            covered = down_until == detected
        if not covered:
            spans.append((fault, down_until, _OTHER, owner))
        rewound = _rewound_from(resumed_from[owner], fault, span.node is not None, written, max(previous_end, started))
        spans.append((rewound, fault, _REWOUND, owner))
        previous_end = resumed if resumed is not None else open_end
    clipped = []
    for start, end, rank, owner in spans:
        start, end = (start if start > started else started), (end if end < run_end else run_end)
        if start < end:
            clipped.append((start, end, rank, owner))
    return clipped


def _rewound_from(step: int | None, fault: int, node_named: bool, written: dict[int, list[_Write]], floor: int) -> int:
    """Where the work lost by this fault began (docs/DOMAIN.md section 2, "The rewound work"), never before `floor`
    (the run's start, or where the previous interruption ended). `step` is the checkpoint the run resumed from: its
    own restore's, or that of the restore that finally succeeded after a failure during its reload.

    1. the end of the blocking of that step's completed write, if it ended by the fault (the trainer loaded it);
    2. else the start of that step's write, if it started by the fault (its completion lost, or cut by the fault);
    3. else the latest blocking end of an earlier step's write that survived the fault (_survives);
    4. else `floor`.
    Not resumed yet (no step): rule 3 over every step, the last checkpoint the restore can load (the live figure
    of a run still down; its restore, once it comes, says where it was), else `floor`.
    """
    own = written.get(step, ()) if step is not None else ()
    point = max((end for _start, end, _ in own if end is not None and end <= fault), default=None)
    if point is None:
        point = max((start for start, _end, _ in own if start <= fault), default=None)
    if point is None:  # rule 3: before its step, or any step when there is none yet
        kept = (
            w[1] for k, ws in written.items() if step is None or k < step for w in ws if _survives(w, fault, node_named)
        )
        point = max(kept, default=floor)
    return point if point > floor else floor


def _resolve(spans: list[Span]) -> list[Span]:
    """Disjoint, time-ordered spans: each instant goes to the highest-priority label covering it, once.

    Spans that overlap nothing are taken as they are; only clusters of overlapping ones go through the sweep.
    """
    spans.sort()
    resolved: list[Span] = []
    index, count = 0, len(spans)
    while index < count:
        reach, last = spans[index][1], index + 1
        while last < count and spans[last][0] < reach:
            if spans[last][1] > reach:
                reach = spans[last][1]
            last += 1
        for span in spans[index:last] if last == index + 1 else _sweep(spans[index:last]):
            _append(resolved, span)
        index = last
    return resolved


def _sweep(spans: list[Span]) -> list[Span]:
    """The priority resolution of a few overlapping spans: the lowest (rank, owner) active wins each instant."""
    edges = sorted([edge for s, e, rank, owner in spans for edge in ((s, 1, rank, owner), (e, -1, rank, owner))])
    active: dict[tuple[int, int], int] = {}
    swept: list[Span] = []
    previous = edges[0][0]
    for at, change, rank, owner in edges:
        if previous < at and active:
            swept.append((previous, at, *min(active)))
        key = (rank, owner)
        active[key] = active.get(key, 0) + change
        if not active[key]:
            del active[key]
        previous = at
    return swept


def _append(resolved: list[Span], span: Span) -> None:
    if resolved and resolved[-1][1] == span[0] and resolved[-1][2:] == span[2:]:
        resolved[-1] = (resolved[-1][0], span[1], span[2], span[3])
    else:
        resolved.append(span)


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching intervals merged; in time order."""
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _uncovered(blocking: list[tuple[int, int]], owned: list[Span], rank: int) -> list[Span]:
    """The parts of the (merged, ordered) intervals that no span of `owned` (disjoint, ordered) covers, as `rank`:
    checkpoint blocking less what interruptions own, and a shrunk stretch less both.

    Both have a lower priority than what they are cut by, so they need no sweep: each is what is left once the owned
    spans are cut out.
    """
    pieces: list[Span] = []
    first, count = 0, len(owned)
    for start, end in blocking:
        while first < count and owned[first][1] <= start:
            first += 1
        at, index = start, first
        while index < count and owned[index][0] < end:
            if owned[index][0] > at:
                pieces.append((at, owned[index][0], rank, _NO_OWNER))
            at = max(at, owned[index][1])
            index += 1
        if at < end:
            pieces.append((at, end, rank, _NO_OWNER))
    return pieces
