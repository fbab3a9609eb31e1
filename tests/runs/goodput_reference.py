"""A deliberately simple, slow reference model of goodput attribution.

Written only from docs/DOMAIN.md section 2 ("How each second of a run is attributed") and docs/EVENTS.md (the
"Runs" table), never from the engine, so that a differential test can hold the engine to the written rules.

It labels every whole second of a run's span, one second at a time, by asking every labelled interval whether it
covers that second. No interval arithmetic, no sweep lines: slow and obvious on purpose.

Public functions:

- ``label_seconds(events, now=...)`` -> ``(span_start, labels)``: one label per whole second of the span.
- ``totals(span_start, labels, since=..., until=...)`` -> seconds per label plus ``"wall_clock"``.

Choices where the text can be read more than one way are marked ``# AMBIGUOUS:``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction

# "each instant goes to one label only, the first in this order: detection, rescheduling, reload, other, rewound,
# checkpoint"
PRIORITY = ("detection", "rescheduling", "reload", "other", "rewound", "checkpoint")
LABELS = ("productive", *PRIORITY)
# "shrunk" labels no second: it takes a share of the productive seconds of an attempt on fewer GPUs than the run's.
SHARED = "shrunk"

LIFECYCLE_TYPES = ("run.started", "run.failed", "run.restored", "run.completed", "run.cancelled")
CHECKPOINT_TYPES = ("checkpoint.started", "checkpoint.completed", "checkpoint.failed")
# run.step is a run event too, but no rule of the attribution reads it: it is accepted and ignored.
RELEVANT_TYPES = (*LIFECYCLE_TYPES, "run.step", *CHECKPOINT_TYPES)

ENDS_ATTEMPT = ("run.failed", "run.completed", "run.cancelled")
ENDS_RUN = ("run.completed", "run.cancelled")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NEVER = 2**62  # a time later than any event: "no next fault"


# --------------------------------------------------------------------------------------------------------------
# Times: whole seconds since the epoch, so that "second by second" is exact.
# --------------------------------------------------------------------------------------------------------------


def _to_datetime(value, what: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    else:
        assert isinstance(value, str), f"{what}: expected an RFC 3339 string, got {value!r}"
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        moment = datetime.fromisoformat(text)
    assert moment.tzinfo is not None, f"{what}: {value!r} has no zone"
    return moment.astimezone(UTC)


def _seconds(value, what: str) -> int:
    """An aware time as whole seconds since the epoch; the model is exact only for whole seconds."""
    moment = _to_datetime(value, what)
    assert moment.microsecond == 0, f"{what}: {value!r} is not a whole second (the reference model needs whole seconds)"
    return int((moment - EPOCH).total_seconds())


def _datetime(seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def _blocking_seconds(value, what: str) -> int:
    """`blocking_s`: "negative or NaN: for nothing". Missing is read as nothing too."""
    if value is None:
        return 0
    assert isinstance(value, int | float) and not isinstance(value, bool), f"{what}: blocking_s {value!r} not a number"
    if math.isnan(value) or value < 0:
        return 0
    assert float(value).is_integer(), f"{what}: blocking_s {value!r} is not a whole number of seconds"
    return int(value)


# --------------------------------------------------------------------------------------------------------------
# The events: "a repeat of an event (same source and id) is the event once".
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Event:
    type: str
    time: int
    source: str
    id: str
    data: dict


def _unique_relevant_events(events: list[dict]) -> list[Event]:
    """Keep the first occurrence of each (source, id); keep only run lifecycle and checkpoint events."""
    seen: set[tuple[str, str]] = set()
    kept: list[Event] = []
    for raw in events:
        key = (str(raw["source"]), str(raw["id"]))
        if key in seen:
            continue
        seen.add(key)
        if raw["type"] not in RELEVANT_TYPES:
            continue
        what = f"event {key}"
        kept.append(Event(raw["type"], _seconds(raw["time"], what + " time"), key[0], key[1], raw.get("data") or {}))
    return kept


def _lifecycle_order(event: Event) -> tuple:
    """ "taken in time order; at the same instant an attempt ends (run.failed, run.completed, run.cancelled) before the
    next one starts (run.started), and starts before it restores (run.restored); then by source, then by id"."""
    if event.type in ENDS_ATTEMPT:
        rank = 0
    elif event.type == "run.started":
        rank = 1
    else:
        rank = 2
    return (event.time, rank, event.source, event.id)


# --------------------------------------------------------------------------------------------------------------
# From events to attempts and interruptions.
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Interruption:
    fault: int  # "fault = its time" (of the first report)
    earliest_detection: int  # the earliest (detected_at, or time) of any report, before clamping to the fault
    node: str | None  # the first report's node, or the first later report's that names one
    restart: int | None = None  # "The first run.started after an interruption is its restart"
    resume: int | None = None  # "The first run.restored of that restarted attempt is its resume"
    from_step: int | None = None  # the resume's from_step

    @property
    def detected(self) -> int:
        """ "a detection stamped before the fault counts from the fault"."""
        return max(self.fault, self.earliest_detection)


@dataclass
class Attempt:
    start: int
    restarted: Interruption | None  # the interruption this attempt is the restart of, if any
    restored: bool = False  # whether its first run.restored has been seen


def _report_detection(event: Event) -> int:
    """ "detected = its detected_at, or its time when it has none (detection 0 s)"."""
    detected_at = event.data.get("detected_at")
    if detected_at is None:
        return event.time
    return _seconds(detected_at, f"event {(event.source, event.id)} detected_at")


def _walk_lifecycle(lifecycle: list[Event]) -> tuple[int | None, list[Interruption]]:
    """Walk the sorted lifecycle events; return the run's first start and its interruptions in fault order.

    - "Each run.started begins an attempt. One that comes while an attempt is still open ends that attempt
      ("superseded"): no interruption is counted".
    - "A run.failed while an attempt is open ends it and opens an interruption".
    - "A run.failed while no attempt is open and the last interruption has not restarted yet is another report of
      that fault ... one interruption, with the earliest fault (the first report), the earliest detection of any
      report, and what the first report lacked (node, GPU, Xid, cause) from the others."
    - "A run.failed before the run's first run.started ends nothing ... One after the run completed or was cancelled
      lies outside the run's span and counts nothing either."
    - "The first run.started after an interruption is its restart ... The first run.restored of that restarted
      attempt is its resume, from its from_step; later restores of the same attempt change nothing. A run.restored in
      an attempt that restarted no interruption (the first attempt, or one that superseded another) counts nothing."
    """
    first_start: int | None = None
    attempt: Attempt | None = None  # the open attempt
    ended = False  # a run.completed / run.cancelled came and no run.started since
    interruptions: list[Interruption] = []

    for event in lifecycle:
        if event.type == "run.started":
            if first_start is None:
                first_start = event.time
            ended = False
            # A run.started while an attempt is open supersedes it: nothing is counted for that.
            restarted = None
            if interruptions and interruptions[-1].restart is None:
                # AMBIGUOUS: the first run.started after an interruption is its restart even when a run.completed /
                # run.cancelled came in between (a run.started after it reopens the run); read literally.
                interruptions[-1].restart = event.time
                restarted = interruptions[-1]
            attempt = Attempt(start=event.time, restarted=restarted)

        elif event.type == "run.failed":
            if first_start is None:
                continue  # before the first run.started: nothing ran yet, counts nothing
            if attempt is not None:
                attempt = None
                interruptions.append(
                    Interruption(
                        fault=event.time,
                        earliest_detection=_report_detection(event),
                        node=event.data.get("node") or None,
                    )
                )
            elif ended:
                # AMBIGUOUS: a run.failed after a run.completed / run.cancelled (and before any later run.started)
                # counts nothing, even when the last interruption had not restarted yet: "after the run completed
                # or was cancelled" is taken to win over "another report of that fault".
                continue
            elif interruptions and interruptions[-1].restart is None:
                # Another report of the same fault. Sorted by time, the first report has the earliest fault already.
                # AMBIGUOUS: "the earliest detection of any report" is the minimum of the reports' raw detections
                # (detected_at, or time), and only then clamped to the interruption's fault (not each report
                # clamped to its own time first).
                same = interruptions[-1]
                same.earliest_detection = min(same.earliest_detection, _report_detection(event))
                if same.node is None:
                    same.node = event.data.get("node") or None
            # (No other case exists: with no attempt open and not ended, the last interruption is unrestarted.)

        elif event.type == "run.restored":
            if attempt is None or attempt.restarted is None or attempt.restored:
                continue  # not in an attempt that restarted an interruption, or not its first restore
            attempt.restored = True
            attempt.restarted.resume = event.time
            # AMBIGUOUS: a restore without an integer from_step still resumes (training again) but gives no S.
            step = event.data.get("from_step")
            attempt.restarted.from_step = step if isinstance(step, int) and not isinstance(step, bool) else None

        elif event.type in ENDS_RUN:
            attempt = None
            if first_start is not None:
                ended = True

    return first_start, interruptions


def _span_end(lifecycle: list[Event], now: int) -> int:
    """ "The run's span runs from its first run.started to its last run.completed or run.cancelled (a run.started
    after it reopens the run), or to now while it is running or restarting."

    The end is the last completion / cancellation in lifecycle order, unless some run.started comes after it (then
    the run is open again and its span runs to now).
    """
    # AMBIGUOUS: the span is one stretch [first start, end); the time between a run.completed / run.cancelled and
    # the run.started that reopens the run is wall-clock like any other (productive unless a label covers it, e.g.
    # the rewound work of a later fault, whose rule 4 floor is still the run's first start or the previous
    # interruption's end).
    last_end_index = None
    for index, event in enumerate(lifecycle):
        if event.type in ENDS_RUN:
            last_end_index = index
    if last_end_index is None:
        return now
    if any(event.type == "run.started" for event in lifecycle[last_end_index + 1 :]):
        return now
    return lifecycle[last_end_index].time


# --------------------------------------------------------------------------------------------------------------
# Checkpoint writes: "A run has one write a step".
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Write:
    step: int
    start: int | None  # the latest checkpoint.started of the step
    completion: int | None  # the latest checkpoint.completed of the step
    blocking: int  # whole seconds; 0 for negative/NaN/missing
    tier: str | None
    durable: int | None  # when it became durable, None if never
    failed: bool  # "one that failed (checkpoint.failed, unless a completion of the step came too)"

    @property
    def completed(self) -> bool:
        return self.completion is not None

    @property
    def blocking_start(self) -> int:
        """ "A completed write blocks training from its start for its blocking_s ... a completion with no start known
        ends its blocking at the completion."."""
        assert self.completion is not None
        if self.start is not None:
            return self.start
        return self.completion - self.blocking

    @property
    def blocking_end(self) -> int:
        # AMBIGUOUS: with a blocking of nothing (negative/NaN), the blocking ends where it starts: at the write's start,
        # or at the completion when no start is known.
        return self.blocking_start + self.blocking


def _writes(checkpoint_events: list[Event]) -> dict[int, Write]:
    """ "the latest checkpoint.started of that step and its latest checkpoint.completed (a step written again after a
    rewind replaces the earlier write ...)". A completed write "is durable at its durable_at, or at its completion for
    the durable tier; a memory or local copy without durable_at lives on the run's own nodes"."""
    # "two completions of one step at the same time: the one with the larger blocking_s" (equal starts are one start).
    # AMBIGUOUS: the latest start and the latest completion are paired as they are, even if that start came after
    # that completion.
    ordered = sorted(
        checkpoint_events,
        key=lambda e: (
            e.time,
            _blocking_seconds(e.data.get("blocking_s"), "") if e.type == "checkpoint.completed" else 0,
        ),
    )
    latest_start: dict[int, Event] = {}
    latest_completion: dict[int, Event] = {}
    failed_steps: set[int] = set()
    for event in ordered:
        step = event.data.get("step")
        if event.type == "checkpoint.started":
            latest_start[step] = event
        elif event.type == "checkpoint.completed":
            latest_completion[step] = event
        elif event.type == "checkpoint.failed":
            # AMBIGUOUS: any checkpoint.failed of the step makes its one write failed (when no completion of the step
            # came), whether it came before or after the latest checkpoint.started.
            failed_steps.add(step)

    writes: dict[int, Write] = {}
    for step in set(latest_start) | set(latest_completion):
        start_event = latest_start.get(step)
        done = latest_completion.get(step)
        start = start_event.time if start_event is not None else None
        if done is not None and start is not None and done.time < start:
            done = None  # "a latest completion older than the latest start was the earlier write's"
        if done is None:
            writes[step] = Write(step, start, None, 0, None, None, failed=step in failed_steps)
            continue
        what = f"event {(done.source, done.id)}"
        tier = done.data.get("tier")
        if done.data.get("durable_at") is not None:
            durable = _seconds(done.data["durable_at"], what + " durable_at")
        elif tier == "durable":
            durable = done.time
        else:
            durable = None
        blocking = _blocking_seconds(done.data.get("blocking_s"), what)
        writes[step] = Write(step, start, done.time, blocking, tier, durable, failed=False)
    return writes


# --------------------------------------------------------------------------------------------------------------
# The rewound work of an interruption.
# --------------------------------------------------------------------------------------------------------------


def _resume_step_for_rewind(interruptions: list[Interruption], index: int) -> int | None:
    """S: "the step the run resumed from (its own resume's, below for chains)". "A run that fails again before it
    trained again ... resumes, in the end, from the checkpoint of the restore that finally succeeds: each interruption
    of such a chain takes that restore's S for its own rewind." Not resumed yet: no S."""
    for later in interruptions[index:]:
        if later.resume is not None:
            return later.from_step
    return None


def _survived(write: Write, fault: int, node: str | None) -> bool:
    """Rule 3's "a completed write ... that survived the fault: its blocking ended by F, and it was durable by F, or
    it is a memory or local copy and the fault named no node"."""
    if not write.completed or write.blocking_end > fault:
        return False
    durable_by_fault = write.durable is not None and write.durable <= fault
    # AMBIGUOUS: "a memory or local copy" is read from the tier alone, with or without a durable_at.
    return durable_by_fault or (write.tier in ("memory", "local") and node is None)


def _rewind_point(writes: dict[int, Write], s: int | None, fault: int, node: str | None, previous_end: int) -> int:
    """ "The rewound work of an interruption runs from a rewind point up to the fault. With S the step the run resumed
    from ... and F the fault:
    1. the end of the blocking of S's completed write, if that ended by F ...;
    2. else the start of S's write, if it started by F and did not fail ...;
    3. else the latest blocking end of a completed write of an earlier step that survived the fault: its blocking
       ended by F, and it was durable by F, or it is a memory or local copy and the fault named no node ...;
    4. else where the previous interruption ended (its resume, or where its open stage stopped), or the run's start
       for the first one: all training since then is lost.
    The rewind point is never before where the previous interruption ended. Not resumed yet (no S), the rewind point
    is rule 3's over the writes of every step (the last checkpoint that survived the fault), else rule 4's."
    """
    point = None
    if s is None:
        survivors = [w.blocking_end for w in writes.values() if isinstance(w.step, int) and _survived(w, fault, node)]
        return max(max(survivors, default=previous_end), previous_end)
    own = writes.get(s)
    if own is not None and own.completed and own.blocking_end <= fault:  # rule 1
        point = own.blocking_end
    elif own is not None and own.start is not None and own.start <= fault and not own.failed:  # rule 2
        point = own.start
    else:  # rule 3
        survivors = [
            w.blocking_end
            for w in writes.values()
            if isinstance(w.step, int) and w.step < s and _survived(w, fault, node)
        ]
        if survivors:
            point = max(survivors)
    if point is None:  # rule 4
        point = previous_end
    return max(point, previous_end)


# --------------------------------------------------------------------------------------------------------------
# Labelled intervals, then labelling second by second.
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Labelled:
    """Half-open [start, end) in epoch seconds, with its stage. `minus` lists intervals it does not cover (for
    "other": the downtime the interruption's own three stages cannot split)."""

    label: str
    start: int
    end: int
    minus: tuple[tuple[int, int], ...] = ()

    def covers(self, second: int) -> bool:
        if not (self.start <= second < self.end):
            return False
        for a, b in self.minus:
            if a <= second < b:
                return False
        return True


def _interruption_intervals(
    interruptions: list[Interruption], writes: dict[int, Write], span_start: int, span_end: int
) -> list[Labelled]:
    """ "Each interruption, in order of fault time, labels:
    - detection: fault to detected;
    - rescheduling: detected to its restart;
    - reload: restart to resume;
    - other: downtime the three stages cannot split ... Where the three stages cover the downtime there is no other;
    - rewound: the rewind point to the fault.
    A stage not yet ended stays open to the run's end (or now), or to the next fault if that comes first ... With
    neither a restart nor a resume yet, everything after detection is rescheduling."
    """
    intervals: list[Labelled] = []
    previous_end = span_start  # "or the run's start for the first one"
    for index, it in enumerate(interruptions):
        next_fault = interruptions[index + 1].fault if index + 1 < len(interruptions) else NEVER
        # Where an open stage stops: the run's end (or now), or the next fault if that comes first.
        open_until = min(span_end, next_fault)
        # The interruption ends at its resume, or where its open stage stopped.
        ends_at = it.resume if it.resume is not None else open_until

        fault, detected = it.fault, it.detected
        # AMBIGUOUS: detection has an end (detected), so it is never "a stage not yet ended": it is not cut at the
        # next fault or anywhere else (the priority order settles any overlap; the span clips it).
        own: list[tuple[int, int]] = [(fault, detected)]
        intervals.append(Labelled("detection", fault, detected))
        if it.restart is not None:
            own.append((detected, it.restart))
            intervals.append(Labelled("rescheduling", detected, it.restart))
            reload_end = it.resume if it.resume is not None else open_until
            own.append((it.restart, reload_end))
            intervals.append(Labelled("reload", it.restart, reload_end))
        elif it.resume is None:
            # "With neither a restart nor a resume yet, everything after detection is rescheduling."
            own.append((detected, open_until))
            intervals.append(Labelled("rescheduling", detected, open_until))
        # (A resume with no known restart cannot arise from the walk: a resume is a restore of a restart's attempt.
        # If it did, detected-to-resumed would be left to "other" below, as the text says.)

        # "other": the downtime [fault, end of the interruption) that its own three stages do not cover.
        intervals.append(Labelled("other", fault, ends_at, minus=tuple(own)))

        s = _resume_step_for_rewind(interruptions, index)
        point = _rewind_point(writes, s, fault, it.node, previous_end)
        intervals.append(Labelled("rewound", point, fault))

        previous_end = ends_at
    return intervals


def _checkpoint_intervals(writes: dict[int, Write]) -> list[Labelled]:
    """ "Each completed write labels checkpoint from its start for its blocking; overlapping writes are counted once."
    A write never completed, or one that failed, "blocks for no time counted"."""
    return [
        Labelled("checkpoint", write.blocking_start, write.blocking_end) for write in writes.values() if write.completed
    ]


def label_seconds(events: list[dict], *, now: datetime) -> tuple[datetime | None, list[str]]:
    """Label every whole second of the run's span [start, end).

    Returns the span's start (None, with no labels, for a run with no run.started: "A run with no run.started has no
    span and no wall-clock") and one label per second, each the first in the order detection, rescheduling, reload,
    other, rewound, checkpoint whose interval covers it, or "productive" ("what no label covers").

    `now` (aware, a whole second) ends the span of a run still running or restarting.
    """
    now_s = _seconds(now, "now")
    relevant = _unique_relevant_events(events)
    lifecycle = sorted((e for e in relevant if e.type in LIFECYCLE_TYPES), key=_lifecycle_order)
    checkpoints = [e for e in relevant if e.type in CHECKPOINT_TYPES]

    span_start, interruptions = _walk_lifecycle(lifecycle)
    if span_start is None:
        return None, []
    span_end = _span_end(lifecycle, now_s)

    writes = _writes(checkpoints)
    intervals = _interruption_intervals(interruptions, writes, span_start, span_end)
    intervals += _checkpoint_intervals(writes)
    # Empty intervals (start >= end) cover no second; leaving them out changes nothing but the speed.
    by_label = {label: [i for i in intervals if i.label == label and i.start < i.end] for label in PRIORITY}

    labels: list[str] = []
    for second in range(span_start, span_end):
        chosen = "productive"  # "Productive is what no label covers"
        for label in PRIORITY:  # the first label, in priority order, with an interval covering this second
            for interval in by_label[label]:
                if interval.covers(second):
                    chosen = label
                    break
            if chosen != "productive":
                break
        labels.append(chosen)
    return _datetime(span_start), labels


def shrunk_shares(events: list[dict], *, now: datetime) -> tuple[list[int], int]:
    """Per whole second of the span (as label_seconds gives it): how many of the run's GPUs the attempt running then
    lacked (0 outside any attempt), and the run's GPUs: the share is the one over the other.

    - "The run's GPUs are the most any run.started claimed".
    - "An attempt runs from its run.started until the next run.failed, run.completed, run.cancelled or run.started",
      in the lifecycle order, and "claims the gpus its run.started says".
    """
    now_s = _seconds(now, "now")
    lifecycle = sorted((e for e in _unique_relevant_events(events) if e.type in LIFECYCLE_TYPES), key=_lifecycle_order)
    starts = [e for e in lifecycle if e.type == "run.started"]
    if not starts:
        return [], 0
    span_start, span_end = starts[0].time, _span_end(lifecycle, now_s)
    size = max(int(e.data.get("gpus") or 0) for e in starts)
    stretches: list[tuple[int, int, int]] = []  # start, end, gpus
    open_at: tuple[int, int] | None = None
    for event in lifecycle:
        if event.type in ENDS_ATTEMPT or event.type == "run.started":
            if open_at is not None:
                stretches.append((open_at[0], event.time, open_at[1]))
                open_at = None
        if event.type == "run.started":
            open_at = (event.time, int(event.data.get("gpus") or 0))
    if open_at is not None:
        stretches.append((open_at[0], span_end, open_at[1]))
    lacked = [0] * (span_end - span_start)
    for start, end, gpus in stretches:
        if size > 0 and gpus < size:
            for second in range(max(start, span_start), min(end, span_end)):
                lacked[second - span_start] = size - gpus
    return lacked, size


def totals(
    start: datetime | None,
    labels: list[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    shares: tuple[list[int], int] | None = None,
) -> dict[str, float]:
    """Seconds per label (all seven, zeros included), "shrunk" and "wall_clock" for the seconds inside [since, until).

    "Wall-clock: the part of the window [since, until) inside the run's span. Every label is clipped to it."
    Without since / until, the whole span. `shares` (shrunk_shares): "of a second no other label takes, the share of
    the run's GPUs its attempt lacked is shrunk, the rest productive".
    """
    counts = dict.fromkeys(LABELS, 0)
    counts["wall_clock"] = 0
    lacked, size = shares or ([], 0)
    missing = 0  # GPU-seconds the attempts lacked, over productive seconds: over `size`, the shrunk seconds
    if start is None:
        return {**counts, SHARED: 0.0}
    first = _seconds(start, "start")
    low = _seconds(since, "since") if since is not None else None
    high = _seconds(until, "until") if until is not None else None
    for offset, label in enumerate(labels):
        second = first + offset
        if low is not None and second < low:
            continue
        if high is not None and second >= high:
            continue
        counts["wall_clock"] += 1
        counts[label] += 1
        if lacked and label == "productive":
            missing += lacked[offset]
    shrunk = Fraction(missing, size) if size else Fraction(0)
    counts["productive"] = counts["productive"] - shrunk
    return {**{label: float(count) for label, count in counts.items()}, SHARED: float(shrunk)}
