"""Data-quality findings: values the intake admits that cannot all be true of a run, said beside the figures they
touch instead of swallowed (docs/DOMAIN.md section 7). Each finding says what, when, which events, and how FleetOps
counted it.

Pure: no Django import. The selector (runs.selectors.run_quality_get) gathers the facts from the record.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

# The most GPUs one node holds (a DGX-2 or HGX-2 board: 16; most hold 8). A run said to have more GPUs than its nodes
# can hold is counted at this many a node, so one bad run.started cannot inflate the fleet's GPU-hours.
MAX_GPUS_PER_NODE = 16
# A checkpoint said to be durable this long after its write finished (or before the write began) is not believed.
DURABLE_LAG_MAX = timedelta(days=1)
# How the goodput engine counts a restore whose checkpoint it does not know (runs.domain.goodput._rewound_from).
UNKNOWN_RESTORE = (
    "no checkpoint is known written at that step by the fault: rewound from the start of its write if that began by "
    "then (the run kept the state it had), else from the latest earlier checkpoint that survived the fault (durable "
    "by then, or a memory or local copy on nodes the fault spared), never before the previous interruption ended"
)
# The source of FleetOps' own end events written from a scheduler's view of a job whose end event never came (then
# "/<cluster>"; incidents.detection.services.reconcile).
RECONCILE_SOURCE = "fleetops/reconcile"
# What the lifecycle's rules counted for an event that fits no attempt (runs.domain.lifecycle.Lifecycle.odd).
_ODD = {
    "failure_before_start": ("run.failed before the run's first run.started", "counted nothing: nothing ran yet"),
    "attempt_superseded": (
        "run.started while an attempt was still running (no run.failed, completion or cancellation between)",
        "no interruption counted: the earlier attempt ends there, and the time stays with the run",
    ),
    "restore_unmatched": (
        "run.restored in an attempt that restarted no interruption",
        "counted nothing: no interruption to resume",
    ),
    "restore_repeated": (
        "run.restored again in the same attempt",
        "the attempt's first restore counts; this one changes nothing",
    ),
}


@dataclass(frozen=True)
class Finding:
    code: str  # gpus_beyond_nodes, restore_beyond_steps, durable_time_implausible
    what: str  # in words, with the figures
    at: datetime | None  # when it happened, as the events say
    events: tuple[str, ...]  # "source#id" of the events it rests on
    resolution: str  # how FleetOps counted it


@dataclass(frozen=True)
class Restore:
    from_step: int
    at: datetime
    event: str


@dataclass(frozen=True)
class CheckpointWrite:
    step: int
    started_at: datetime | None
    completed_at: datetime | None
    durable_at: datetime | None
    event: str
    blocked_until: datetime | None = None  # the end of its blocking part: what a restore may rewind to


@dataclass(frozen=True)
class Stop:
    """One interruption of the record, and the run.failed reports (time, "source#id") that fall in its downtime."""

    number: int
    fault_at: datetime
    running_at: datetime | None
    resumed_at: datetime | None
    resumed_from_step: int | None
    reports: tuple[tuple[datetime, str], ...] = ()


def gpus_counted(claimed: int, nodes: int) -> int:
    """The GPUs a run is counted with: as claimed, unless more than its nodes can hold (nodes known)."""
    return min(claimed, MAX_GPUS_PER_NODE * nodes) if nodes > 0 else claimed


def run_findings(
    *,
    claimed_gpus: int | None,
    nodes: int,
    started: tuple[datetime, str] | None,
    reached_step: int | None,
    restores: list[Restore],
    checkpoints: list[CheckpointWrite],
) -> list[Finding]:
    """Every finding of one run, in time order (those without a time last)."""
    findings = []
    if claimed_gpus is not None and gpus_counted(claimed_gpus, nodes) < claimed_gpus:
        counted = gpus_counted(claimed_gpus, nodes)
        findings.append(
            Finding(
                "gpus_beyond_nodes",
                f"run.started says {claimed_gpus:,} GPUs on {nodes:,} node{'s' if nodes != 1 else ''}",
                started[0] if started else None,
                (started[1],) if started else (),
                f"counted as {counted:,} GPUs ({MAX_GPUS_PER_NODE} a node) in every GPU-hour figure",
            )
        )
    steps = [s for s in [reached_step, *(c.step for c in checkpoints)] if s is not None]
    reached = max(steps, default=None)
    for restore in restores:
        if restore.from_step > (reached or 0):  # step 0 is the run's own start, reached by any run
            findings.append(
                Finding(
                    "restore_beyond_steps",
                    f"run.restored from step {restore.from_step:,}, "
                    + (f"but the run reached step {reached:,}" if reached is not None else "but no step is known"),
                    restore.at,
                    (restore.event,),
                    UNKNOWN_RESTORE,
                )
            )
    for write in checkpoints:
        finished = write.completed_at or write.started_at
        if write.durable_at is None or finished is None:
            continue
        lag = write.durable_at - finished
        if lag > DURABLE_LAG_MAX or (write.started_at is not None and write.durable_at < write.started_at):
            findings.append(
                Finding(
                    "durable_time_implausible",
                    f"checkpoint at step {write.step:,} durable at {write.durable_at:%Y-%m-%d %H:%M} UTC, "
                    f"{_span(lag)} {'after' if lag >= timedelta(0) else 'before'} its write",
                    write.completed_at or write.started_at,
                    (write.event,),
                    "kept as sent; goodput counts the write's blocking time only, which it does not change",
                )
            )
    return sorted(findings, key=lambda f: (f.at is None, f.at or datetime.min, f.code))


def stop_findings(stops: list[Stop], checkpoints: list[CheckpointWrite], *, reached_step: int | None) -> list[Finding]:
    """What the goodput engine resolved in a run's interruptions (docs/DOMAIN.md section 2), said: several reports of
    one fault, a failure before the run trained again, a restore whose own checkpoint is not known by the fault (one
    from beyond every step the run reached is run_findings' restore_beyond_steps already)."""
    findings = []
    stops = sorted(stops, key=lambda stop: stop.fault_at)
    written: dict[int, list[datetime]] = {}
    for write in checkpoints:
        if write.blocked_until is not None:
            written.setdefault(write.step, []).append(write.blocked_until)
    for index, stop in enumerate(stops):
        refs = tuple(ref for _, ref in stop.reports)
        if len(stop.reports) > 1:
            findings.append(
                Finding(
                    "several_reports",
                    f"interruption #{stop.number} reported {len(stop.reports)} times",
                    stop.fault_at,
                    refs,
                    "one interruption: the earliest fault and the earliest detection of any report",
                )
            )
        following = stops[index + 1] if index + 1 < len(stops) else None
        if following is not None and stop.resumed_at is None:
            findings.append(
                Finding(
                    "failed_before_training_again",
                    f"interruption #{following.number} began before the run trained again after #{stop.number}",
                    following.fault_at,
                    refs + tuple(ref for _, ref in following.reports),
                    f"#{stop.number}'s reload ends at the second fault; both rewind to the restore that finally "
                    "succeeded",
                )
            )
        step = stop.resumed_from_step
        beyond = reached_step is None or step is None or step > reached_step
        if not beyond and not any(until <= stop.fault_at for until in written.get(step, ())):
            findings.append(
                Finding(
                    "restore_checkpoint_unknown",
                    f"interruption #{stop.number} resumed from step {step:,}, whose checkpoint is not known to have "
                    "been written by the fault",
                    stop.resumed_at or stop.fault_at,
                    refs,
                    UNKNOWN_RESTORE,
                )
            )
    return findings


def lifecycle_findings(odd: list, *, started_at: datetime | None) -> list[Finding]:
    """A finding for each lifecycle event the rules counted nothing for (runs.domain.lifecycle.Lifecycle.odd). One
    stamped before the run started is dated at the start, so that the windows that hold the run list it."""
    findings = []
    for code, event in odd:
        what, resolution = _ODD[code]
        step = event.data.get("from_step")
        what += f" (from step {int(step):,})" if event.type == "run.restored" and step is not None else ""
        at = event.time
        if started_at is not None and at < started_at:
            what, at = f"{what}, stamped {at:%Y-%m-%d %H:%M:%S} UTC", started_at
        findings.append(Finding(code, what, at, (f"{event.source}#{event.id}",), resolution))
    return findings


def reconciled_findings(ends: list[tuple[datetime, str, str, str]]) -> list[Finding]:
    """A finding for each end FleetOps wrote from the scheduler's own view (RECONCILE_SOURCE), because the run's own
    end event never came: (time, "source#id", type, reason)."""
    return [
        Finding(
            "ended_by_reconciliation",
            f"{type_} written by FleetOps: {reason}",
            at,
            (ref,),
            "the attempt ends as the scheduler says, when it says; the job's own end event, should it come late, is a "
            "second report of the same end",
        )
        for at, ref, type_, reason in ends
    ]


def _span(delta: timedelta) -> str:
    seconds = abs(delta.total_seconds())
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:,.0f} seconds"
