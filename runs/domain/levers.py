"""Levers: what each fix would give back to one run, from its own record (docs/DOMAIN.md section 3, "Levers").

Pure: no Django import. A lever is a counterfactual RunTimeline, the run's record with one fix applied, put through
the same goodput engine (runs.domain.goodput) as the record itself:

- detection and rescheduling: each unplanned stop's stage shortened to the target; reload: every stop's. The time
  saved is cut out of the run: everything after it happens that much sooner, and the run ends sooner.
- checkpoint: each write blocks for at most the target (an asynchronous copy to host memory). A fault strikes after
  as much running as before, so the time saved is more training.
- interval: the writes laid again at the interval, each with the run's mean blocking and mean drain to durable,
  and every stop restores the newest write durable by its fault: the rewound work follows the new interval.
- lemons: a node that faulted more than once is taken out of the run after its first fault, so its later faults
  never happen; the time from each of them to training again is cut out.

A lever's return is the badput it removes, in GPU-hours and dollars, and the goodput the run would have had. The
levers are sorted by return. "Together" applies every fix but fewer failures at once (the interval then Daly's for
the faster write): the badput it leaves is the floor that only fewer failures can lower.
"""

import math
import statistics
from bisect import bisect_right
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from runs.domain import advisor
from runs.domain.goodput import Breakdown, CheckpointSpan, InterruptionSpan, RunTimeline, breakdown

# Gemini (SOSP'23): restoring from in-memory and peer copies is about 13 times faster than from remote storage.
IN_MEMORY_RELOAD_SPEEDUP = 13.0
LEVERS = ("detection", "rescheduling", "reload", "checkpoint", "interval", "lemons")
LABELS = {
    "detection": "Faster detection",
    "rescheduling": "Automated rescheduling",
    "reload": "In-memory reload",
    "checkpoint": "Asynchronous checkpoint copy",
    "interval": "The advised interval",
    "lemons": "Lemon nodes out after one fault",
    "together": "All but fewer failures, together",
}


@dataclass(frozen=True)
class Targets:
    """What each fix brings its stage down to, in seconds; None leaves that lever out (nothing to measure it by)."""

    detection_s: float | None = None
    rescheduling_s: float | None = None
    reload_s: float | None = None
    blocking_s: float | None = None
    interval_s: float | None = None
    lemons: bool = True


@dataclass(frozen=True)
class Lever:
    """One fix applied to the run's record: the goodput it would give and the badput it returns."""

    name: str
    target_s: float | None  # the stage's target; for "lemons", None
    affected: int  # stops or writes it changed, or faults it removed
    goodput: float
    returned_gpu_hours: float
    returned_usd: float

    @property
    def label(self) -> str:
        return LABELS[self.name]


@dataclass(frozen=True)
class LeverReport:
    """The run's goodput over its whole record, each lever's (largest return first) and all but lemons together."""

    goodput: float
    lost_gpu_hours: float
    levers: list[Lever]
    together: Lever | None

    @property
    def floor(self) -> float | None:
        """The share of the run's time that every fix but fewer failures together still loses."""
        return None if self.together is None else 1 - self.together.goodput


def default_targets(
    timeline: RunTimeline,
    *,
    detection_s: float,
    async_blocking_s: float,
    mtbf_s: float | None,
) -> Targets:
    """Targets from the record and the two stated ones. Rescheduling: the run's own fastest tenth (what its scheduler
    has shown it can do when nothing waits for a person); reload: its median reload over IN_MEMORY_RELOAD_SPEEDUP;
    the interval: Daly's for the run's median write and `mtbf_s` (None without one)."""
    unplanned = [span for span in timeline.interruptions if not span.planned]
    requeues = [(s.running_at - s.detected_at).total_seconds() for s in unplanned if s.running_at is not None]
    reloads = reload_times(timeline)
    requeues = [value for value in requeues if value > 0]
    delta = advisor.write_cost_s(c.blocking_s for c in timeline.checkpoints)
    interval = advisor.daly(delta_s=delta, mtbf_s=mtbf_s) if delta is not None and mtbf_s else None
    return Targets(
        detection_s=detection_s if unplanned else None,
        rescheduling_s=_quantile(requeues, 0.10) if requeues else None,
        reload_s=statistics.median(reloads) / IN_MEMORY_RELOAD_SPEEDUP if reloads else None,
        blocking_s=async_blocking_s if delta is not None else None,
        interval_s=interval,
    )


def levers(
    timeline: RunTimeline, *, now: datetime, targets: Targets, mtbf_s: float | None, usd_per_gpu_hour: float
) -> LeverReport:
    """Each lever of `targets` on the run's whole record up to `now`, largest return first."""
    base = _whole(timeline, now)
    found = []
    for name in LEVERS:
        target = None if name == "lemons" else getattr(targets, f"{name}_s" if name != "checkpoint" else "blocking_s")
        if (name == "lemons" and not targets.lemons) or (name != "lemons" and target is None):
            continue
        counterfactual, affected = apply(name, timeline, now=now, target_s=target)
        found.append(_lever(name, target, affected, base, counterfactual, now, timeline.gpus, usd_per_gpu_hour))
    found.sort(key=lambda lever: (-lever.returned_gpu_hours, lever.name))
    together = None
    applied, affected = timeline, 0
    for name in ("checkpoint", "interval", "detection", "rescheduling", "reload"):
        target = getattr(targets, f"{name}_s" if name != "checkpoint" else "blocking_s")
        if name == "interval" and target is not None and targets.blocking_s is not None and mtbf_s:
            # The faster write moves Daly's interval down with it.
            delta = advisor.write_cost_s(c.blocking_s for c in applied.checkpoints)
            target = advisor.daly(delta_s=delta, mtbf_s=mtbf_s) if delta is not None else target
        if target is not None:
            applied, changed = apply(name, applied, now=now, target_s=target)
            affected += changed
    if applied is not timeline:
        together = _lever("together", None, affected, base, applied, now, timeline.gpus, usd_per_gpu_hour)
    return LeverReport(base.goodput, base.lost_s * timeline.gpus / 3600, found, together)


def apply(name: str, timeline: RunTimeline, *, now: datetime, target_s: float | None = None) -> tuple[RunTimeline, int]:
    """The run's record with one fix applied, and how many stops or writes it changed."""
    if name in ("detection", "rescheduling", "reload"):
        return _shorten(name, timeline, now=now, target=timedelta(seconds=target_s or 0.0))
    if name == "checkpoint":
        return _faster_writes(timeline, target_s or 0.0, now=now)
    if name == "interval":
        return _relaid(timeline, now=now, interval_s=target_s or 0.0)
    if name == "lemons":
        return _without_lemons(timeline, now=now)
    raise ValueError(f"unknown lever {name!r}")


def reload_times(timeline: RunTimeline) -> list[float]:
    """Each stop's reload, from its restart to training again, in seconds (those the record times, and positive)."""
    return [
        seconds
        for s in timeline.interruptions
        if s.running_at is not None
        and s.resumed_at is not None
        and (seconds := (s.resumed_at - s.running_at).total_seconds()) > 0
    ]


def lemon_repeats(timeline: RunTimeline) -> list[int]:
    """Indexes of the unplanned stops that name a node which had already faulted in this run, in fault order."""
    seen, repeats = set(), []
    for index, span in sorted(enumerate(timeline.interruptions), key=lambda item: item[1].fault_at):
        if span.planned or span.node is None:
            continue
        if span.node in seen:
            repeats.append(index)
        seen.add(span.node)
    return repeats


# -- the counterfactuals ---------------------------------------------------------------------------------------


def _shorten(stage: str, timeline: RunTimeline, *, now: datetime, target: timedelta) -> tuple[RunTimeline, int]:
    """Cut each stop's stage down to `target`: detection and rescheduling of unplanned stops, reload of every stop."""
    cuts = []
    for span in timeline.interruptions:
        if stage != "reload" and span.planned:
            continue
        start, end = {
            "detection": (span.fault_at, span.detected_at),
            "rescheduling": (span.detected_at, span.running_at),
            "reload": (span.running_at, span.resumed_at),
        }[stage]
        if start is not None and end is not None and end - start > target:
            cuts.append((start + target, end))
    return _cut(timeline, cuts, now=now), len(cuts)


def _faster_writes(timeline: RunTimeline, target_s: float, *, now: datetime) -> tuple[RunTimeline, int]:
    """Each write blocks for at most `target_s`. The interval is counted in training, so within a stretch of training
    every later write starts sooner by what the earlier ones saved (and is durable sooner by that and its own saving),
    and where the savings make room before the stretch ends, one more write at the run's own cadence fits: the write
    a fault caught before it was durable (the record keeps no such write) may now be durable in time. A stop in a
    stretch that gained a write restores the newest write durable by its fault. The save a planned stop waited for keeps
    its cost: the stop still waits for it to be durable."""
    kept = {id(c) for c in _planned_saves(timeline).values()}
    cadence, drain = _cadence(timeline), _mean_drain(timeline.checkpoints)
    writes, changed, gained = [], 0, set()
    step = max((c.step for c in timeline.checkpoints), default=0)
    for _first, last, stop, members in _stretches(timeline, now=now):
        saved, last_end = timedelta(0), None
        for write in members:
            blocking = write.blocking_s
            faster = blocking is not None and blocking > target_s and id(write) not in kept
            own = timedelta(seconds=blocking - target_s) if faster else timedelta(0)
            durable = None if write.durable_at is None else write.durable_at - saved - own
            cost = target_s if faster else blocking
            moved = replace(write, started_at=write.started_at - saved, blocking_s=cost, durable_at=durable)
            writes.append(moved)
            changed += faster
            saved += own
            if moved.blocking_s is not None:
                last_end = moved.blocked_until
        if cadence is None or last_end is None or saved <= timedelta(0) or (stop is not None and stop.planned):
            continue
        at = last_end + cadence
        while at < last:
            step += 1
            blocking = timedelta(seconds=target_s)
            writes.append(CheckpointSpan(step, at, target_s, at + blocking + drain, "durable"))
            gained.add(id(stop))
            at += blocking + cadence
    restores = _restores(timeline.interruptions, writes, only=gained)
    stops = tuple(
        replace(span, resumed_from_step=restores[id(span)]) if id(span) in gained else span
        for span in timeline.interruptions
    )
    return replace(timeline, interruptions=stops, checkpoints=tuple(writes)), changed


def _restores(
    stops: tuple[InterruptionSpan, ...], writes: list[CheckpointSpan], *, only: set[int] | None = None
) -> dict[int, int]:
    """The step each stop (by id()) restores: the newest write durable by its fault, the one the simulator's trainer
    loads; -1, a step no write has, where none is (the engine then rewinds to where the run last resumed)."""
    durable = sorted((c.durable_at, c.blocked_until, c.step) for c in writes if c.durable_at is not None)
    ready = [moment for moment, _, _ in durable]
    newest, best = [], None  # newest[i]: of durable[:i + 1], the one whose blocking ended last
    for row in durable:
        best = row if best is None or row[1] > best[1] else best
        newest.append(best)
    restores = {}
    for span in stops:
        if only is None or id(span) in only:
            index = bisect_right(ready, span.fault_at) - 1
            restores[id(span)] = newest[index][2] if index >= 0 else -1
    return restores


def _stretches(
    timeline: RunTimeline, *, now: datetime
) -> list[tuple[datetime, datetime, InterruptionSpan | None, list[CheckpointSpan]]]:
    """The run's stretches of training: (from, to, the stop that ended it or None at the end, its writes by start)."""
    spans = sorted(timeline.interruptions, key=lambda s: s.fault_at)
    bounds, start = [], timeline.started_at
    for span in spans:
        if start is not None and start < span.fault_at:
            bounds.append((start, span.fault_at, span))
        start = span.resumed_at
    end = timeline.end(now)
    if start is not None and start < end:
        bounds.append((start, end, None))
    firsts = [first for first, _, _ in bounds]
    members: list[list[CheckpointSpan]] = [[] for _ in bounds]
    for write in sorted(timeline.checkpoints, key=lambda c: c.started_at):
        index = bisect_right(firsts, write.started_at) - 1
        if index >= 0 and write.started_at < bounds[index][1]:
            members[index].append(write)
    return [(first, last, stop, members[i]) for i, (first, last, stop) in enumerate(bounds)]


def _cadence(timeline: RunTimeline) -> timedelta | None:
    """The run's own interval: the median training between one write's blocking end and the next write's start."""
    completed = sorted((c for c in timeline.checkpoints if c.blocking_s is not None), key=lambda c: c.started_at)
    gaps = [
        (after.started_at - before.blocked_until).total_seconds()
        for before, after in zip(completed, completed[1:], strict=False)
        if after.started_at > before.blocked_until
    ]
    return timedelta(seconds=statistics.median(gaps)) if gaps else None


def _mean_drain(writes) -> timedelta:
    """The mean time from a write's blocking end to its durable time (0 with none known)."""
    drains = [
        max((c.durable_at - c.blocked_until).total_seconds(), 0.0)
        for c in writes
        if c.blocking_s is not None and c.durable_at is not None
    ]
    return timedelta(seconds=statistics.fmean(drains)) if drains else timedelta(0)


def _planned_saves(timeline: RunTimeline) -> dict[int, CheckpointSpan]:
    """The write each planned stop waited for, by the stop's id(): the latest completed one whose blocking ended by
    the stop."""
    completed = sorted((c for c in timeline.checkpoints if c.blocking_s is not None), key=lambda c: c.blocked_until)
    ends = [c.blocked_until for c in completed]
    saves = {}
    for span in timeline.interruptions:
        index = bisect_right(ends, span.fault_at) - 1
        if span.planned and index >= 0:
            saves[id(span)] = completed[index]
    return saves


def _relaid(timeline: RunTimeline, *, now: datetime, interval_s: float) -> tuple[RunTimeline, int]:
    """The writes laid again every `interval_s` of training in each stretch between a resume and the next fault.

    Each blocks for the run's mean blocking and is durable after its mean drain (the record's durable times); a
    stretch that ends in a planned stop keeps its own last write (the save the stop waited for). Every stop restores
    the newest write durable by its fault."""
    saves = _planned_saves(timeline)
    waited = {id(c) for c in saves.values()}
    completed = [c for c in timeline.checkpoints if c.blocking_s is not None and c.blocking_s >= 0]
    # The cost of a write the training goes on after: the planned stops' saves, which wait to be durable, left out.
    usual = [c for c in completed if id(c) not in waited] or completed
    if not completed or interval_s <= 0:
        return timeline, 0
    blocking = statistics.fmean(c.blocking_s for c in usual)
    writes, step = [], 0
    cadence = timedelta(seconds=interval_s + blocking)
    durable = timedelta(seconds=blocking) + _mean_drain(usual)
    for first, last, stop, _members in _stretches(timeline, now=now):
        at = first + timedelta(seconds=interval_s)
        while at < last:
            step += 1
            writes.append(CheckpointSpan(step, at, blocking, at + durable, "durable"))
            at += cadence
        save = saves.get(id(stop))
        if save is not None and first <= save.started_at:
            step += 1
            writes.append(replace(save, step=step))
    restores = _restores(timeline.interruptions, writes)
    stops = tuple(replace(span, resumed_from_step=restores[id(span)]) for span in timeline.interruptions)
    return replace(timeline, interruptions=stops, checkpoints=tuple(writes)), len(writes)


def _without_lemons(timeline: RunTimeline, *, now: datetime) -> tuple[RunTimeline, int]:
    """The run had every node that faulted in it been taken out after its first fault: its later faults never
    happen, and the time from each to training again (or to the run's end) is cut out."""
    repeats = lemon_repeats(timeline)
    if not repeats:
        return timeline, 0
    end = timeline.end(now)
    cuts = []
    for index in repeats:
        span = timeline.interruptions[index]
        cuts.append((span.fault_at, span.resumed_at or end))
    dropped = set(repeats)
    kept = tuple(span for index, span in enumerate(timeline.interruptions) if index not in dropped)
    return _cut(replace(timeline, interruptions=kept), cuts, now=now), len(repeats)


def _cut(timeline: RunTimeline, cuts: list[tuple[datetime, datetime]], *, now: datetime) -> RunTimeline:
    """The run with the spans in `cuts` taken out of its time: every moment after a cut moves earlier by the cut's
    length, a moment inside one moves to its start. The run's end (or `now`'s) moves too, so it ends sooner."""
    merged: list[list[datetime]] = []
    for start, end in sorted(cuts):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif start < end:
            merged.append([start, end])
    if not merged:
        return timeline
    starts = [start for start, _ in merged]
    before, total = [], timedelta(0)
    for start, end in merged:
        before.append(total)
        total += end - start

    def move(moment: datetime | None) -> datetime | None:
        if moment is None:
            return None
        index = bisect_right(starts, moment) - 1
        if index < 0:
            return moment
        start, end = merged[index]
        return start - before[index] if moment < end else moment - before[index] - (end - start)

    stops = tuple(
        replace(
            span,
            fault_at=move(span.fault_at),
            detected_at=move(span.detected_at),
            running_at=move(span.running_at),
            resumed_at=move(span.resumed_at),
        )
        for span in timeline.interruptions
    )
    writes = tuple(
        replace(c, started_at=move(c.started_at), durable_at=move(c.durable_at)) for c in timeline.checkpoints
    )
    return replace(
        timeline,
        ended_at=move(timeline.end(now)),
        interruptions=stops,
        checkpoints=writes,
        heard_until=None,
    )


# -- figures -------------------------------------------------------------------------------------------------


def _whole(timeline: RunTimeline, now: datetime) -> Breakdown:
    end = timeline.end(now)
    return breakdown(timeline, since=timeline.started_at, until=max(end, timeline.started_at), now=now)


def _lever(
    name: str,
    target_s: float | None,
    affected: int,
    base: Breakdown,
    counterfactual: RunTimeline,
    now: datetime,
    gpus: int,
    usd_per_gpu_hour: float,
) -> Lever:
    after = _whole(counterfactual, now)
    returned = max(base.lost_s - after.lost_s, 0.0) * gpus / 3600
    return Lever(name, target_s, affected, after.goodput, returned, returned * usd_per_gpu_hour)


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
