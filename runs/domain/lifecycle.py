"""A run's attempts and interruptions, derived from its lifecycle events.

Pure: no Django import. The same events give the same record whatever order they arrived in,
because the derivation sorts them first; that is what lets the event API accept late and
out-of-order events, and lets the record be rebuilt from the event log at any time.

Times are timezone-aware datetimes (UTC).
"""

from dataclasses import dataclass, field
from datetime import datetime

from runs.domain.cloudevents import parse_time
from runs.domain.routes import Route, types_of
from runs.domain.taxonomy import infer_cause

RUN_STATES = ("pending", "running", "restarting", "completed", "cancelled")
LIFECYCLE_TYPES = types_of(Route.LIFECYCLE)
# At the same instant an attempt ends before the next one starts, and starts before it restores.
_RANK = {"run.failed": 0, "run.completed": 0, "run.cancelled": 0, "run.started": 1, "run.restored": 2}


@dataclass(frozen=True)
class LifecycleEvent:
    time: datetime
    type: str
    data: dict
    source: str = ""
    id: str = ""

    def sort_key(self):
        return (self.time, _RANK[self.type], self.source, self.id)


@dataclass
class Attempt:
    number: int
    started_at: datetime
    job_id: str
    nodes: list[str]  # empty when the caller left the start event's node list out (the record fetches it once)
    started_by: tuple[str, str] = ("", "")  # (source, id) of the run.started event that began it
    ended_at: datetime | None = None
    end_reason: str = ""  # failed, completed, cancelled, superseded
    resumed_from_step: int | None = None
    gpus: int | None = None  # the GPUs it started on, as its run.started said (fewer than the run's: shrunk)


@dataclass
class Interruption:
    number: int
    fault_at: datetime  # when the fault happened
    detected_at: datetime  # when it was noticed
    attempt_number: int | None  # the attempt the fault ended
    cause: str
    planned: bool
    reason: str
    kind: str = "crash"  # crash or hang
    node: str | None = None
    gpu: int | None = None
    xid: int | None = None
    running_at: datetime | None = None  # the next attempt started
    restart_attempt_number: int | None = None
    resumed_at: datetime | None = None  # training stepped again from a checkpoint
    resumed_from_step: int | None = None


@dataclass
class Lifecycle:
    state: str  # pending, running, restarting, completed, cancelled
    started_at: datetime | None
    ended_at: datetime | None
    attempts: list[Attempt] = field(default_factory=list)
    interruptions: list[Interruption] = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # cluster, model_params, checkpoint_interval_s (GPUs: each attempt's)
    # Events the rules counted nothing for, each with why (docs/DOMAIN.md section 2): failure_before_start,
    # attempt_superseded, restore_unmatched, restore_repeated. runs.domain.quality says them as findings.
    odd: list[tuple[str, LifecycleEvent]] = field(default_factory=list)


def derive(events: list[LifecycleEvent]) -> Lifecycle:
    """The lifecycle of one run from all its lifecycle events, in any order."""
    attempts: list[Attempt] = []
    interruptions: list[Interruption] = []
    settings: dict = {}
    odd: list[tuple[str, LifecycleEvent]] = []
    open_attempt: Attempt | None = None
    final: tuple[str, datetime] | None = None

    for event in sorted(events, key=LifecycleEvent.sort_key):
        data, at = event.data, event.time
        waiting = interruptions[-1] if interruptions and interruptions[-1].running_at is None else None
        if event.type == "run.started":
            if open_attempt is not None:
                _close(open_attempt, at, "superseded")
                odd.append(("attempt_superseded", event))
            open_attempt = Attempt(
                len(attempts) + 1, at, data["job_id"], list(data.get("nodes", ())), (event.source, event.id)
            )
            open_attempt.gpus = data.get("gpus")
            attempts.append(open_attempt)
            if waiting is not None:
                waiting.running_at = at
                waiting.restart_attempt_number = open_attempt.number
            for key in ("cluster", "model_params", "checkpoint_interval_s"):
                if data.get(key) is not None:
                    settings[key] = data[key]
            final = None
        elif event.type == "run.failed":
            if not attempts:
                odd.append(("failure_before_start", event))  # nothing ran yet to fail
                continue
            if open_attempt is None and waiting is not None:
                # A second report of the fault that already stopped the run (scheduler and agent both saw it).
                _merge_report(waiting, event)
                continue
            interruption = _interruption(len(interruptions) + 1, event, open_attempt)
            interruptions.append(interruption)
            if open_attempt is not None:
                _close(open_attempt, at, "failed")
                open_attempt = None
        elif event.type == "run.restored":
            first = open_attempt is not None and open_attempt.resumed_from_step is None
            if first:
                open_attempt.resumed_from_step = data["from_step"]
            restarted = next(
                (i for i in reversed(interruptions) if i.running_at is not None and i.resumed_at is None), None
            )
            if (
                restarted is not None
                and open_attempt is not None
                and restarted.restart_attempt_number == open_attempt.number
            ):
                restarted.resumed_at = at
                restarted.resumed_from_step = data["from_step"]
            elif not first:
                odd.append(("restore_repeated" if open_attempt is not None else "restore_unmatched", event))
            elif open_attempt.number > 1:  # the first attempt may start from a checkpoint (a warm start)
                odd.append(("restore_unmatched", event))
        else:  # run.completed, run.cancelled
            end = "completed" if event.type == "run.completed" else "cancelled"
            if open_attempt is not None:
                _close(open_attempt, at, end)
                open_attempt = None
            final = (end, at)

    if final is not None:
        state, ended_at = final
    elif open_attempt is not None:
        state, ended_at = "running", None
    elif interruptions and interruptions[-1].running_at is None:
        state, ended_at = "restarting", None
    else:
        state, ended_at = "pending", None
    started_at = attempts[0].started_at if attempts else None
    return Lifecycle(state, started_at, ended_at, attempts, interruptions, settings, odd)


def _close(attempt: Attempt, at: datetime, reason: str) -> None:
    attempt.ended_at = at
    attempt.end_reason = reason


def _interruption(number: int, event: LifecycleEvent, attempt: Attempt | None) -> Interruption:
    data = event.data
    planned = bool(data.get("planned", False))
    detected_at = parse_time(data["detected_at"]) if data.get("detected_at") else event.time
    return Interruption(
        number=number,
        fault_at=event.time,
        detected_at=max(detected_at, event.time),
        attempt_number=attempt.number if attempt else None,
        cause=infer_cause(category=data.get("category"), xid=data.get("xid"), planned=planned).value,
        planned=planned,
        reason=data["reason"],
        kind=data.get("kind", "crash"),
        node=data.get("node"),
        gpu=data.get("gpu"),
        xid=data.get("xid"),
    )


def _merge_report(interruption: Interruption, event: LifecycleEvent) -> None:
    """Fill what the first report lacked; the first report's time (the earliest) stays the fault time, and the
    earliest detection of any report is when the fault was noticed: the node agent may see the fault first and the
    scheduler notice it first."""
    extra = _interruption(interruption.number, event, None)
    interruption.detected_at = max(min(interruption.detected_at, extra.detected_at), interruption.fault_at)
    for name in ("node", "gpu", "xid"):
        if getattr(interruption, name) is None:
            setattr(interruption, name, getattr(extra, name))
    if interruption.cause == "unknown":
        interruption.cause = extra.cause
