"""Xids folded into faults, and runs and nodes going quiet: hangs, lost heartbeats, silent runs, nodes the
scheduler took out."""

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from incidents.domain.alert_kinds import AlertKind
from incidents.domain.detectors.findings import Finding, _at, _duration, _num, _plural
from incidents.domain.xid import Action, XidFault


def xids(faults: Iterable[XidFault], *, repeated_after: int = 3, bursts_kept: int = 20) -> list[Finding]:
    """One finding per (node, gpu, xid): the faults of dedupe_xids() added up, with the catalog's action.

    Two rules need more than one Xid, so they are applied here rather than in classify():
    - Xid 43 is ignored unless repeated: `repeated_after` separate bursts on one GPU make it a warning
      (drain, investigate), since one application's fault does not recur across jobs, a bad GPU does.
    - Xid 48 with Xid 64 on the same GPU means the row remap that should contain it failed: drain and RMA.
    Evidence keeps the latest `bursts_kept` bursts.
    """
    by_key: dict[tuple[str, int, int], list[XidFault]] = defaultdict(list)
    for fault in faults:
        by_key[(fault.node, fault.gpu, fault.xid)].append(fault)
    xids_on_gpu: dict[tuple[str, int], set[int]] = defaultdict(set)
    for node, gpu, xid in by_key:
        xids_on_gpu[(node, gpu)].add(xid)

    findings = []
    for (node, gpu, xid), bursts in sorted(by_key.items()):
        bursts.sort(key=lambda f: f.first_at)
        info = bursts[-1].info  # the latest: for Xid 154 the driver's current recommendation
        count = sum(f.count for f in bursts)
        severity, action = info.severity, info.action
        times = "once" if count == 1 else f"{count:,} times"
        span = f"at {_at(bursts[0].first_at)}" if count == 1 else f"from {_at(bursts[0].first_at)}"
        if count > 1:
            span += f" to {_at(bursts[-1].last_at)} in {_plural(len(bursts), 'burst')}"
        why = f"; {info.note}" if info.note else ""
        if xid == 43 and len(bursts) >= repeated_after:
            severity, action = "warning", Action.DRAIN_INVESTIGATE
            why = f"; repeated in {len(bursts)} separate bursts (at least {repeated_after}), so likely the GPU"
        elif xid == 48 and 64 in xids_on_gpu[(node, gpu)]:
            severity, action = "critical", Action.DRAIN_RMA
            why = "; with Xid 64 on the same GPU the row remap that should contain it failed"
        elif xid == 48 and 63 in xids_on_gpu[(node, gpu)]:
            why = "; Xid 63 on the same GPU recorded a row remap, which a GPU reset applies"
        findings.append(
            Finding(
                kind=AlertKind.XID,
                fingerprint=f"xid:{node}:{gpu}:{xid}",
                severity=severity,
                summary=f"Xid {xid} on {node} GPU {gpu}: {info.meaning}",
                explanation=(
                    f"Xid {xid} ({info.meaning}) was logged {times} on {node} GPU {gpu}, {span}{why}. "
                    f"Recommended: {action.label}."
                ),
                node=node,
                gpu=gpu,
                evidence={
                    "xid": xid,
                    "count": count,
                    "bursts": [
                        {"first_at": f.first_at.isoformat(), "last_at": f.last_at.isoformat(), "count": f.count}
                        for f in bursts[-bursts_kept:]
                    ],
                    "message": bursts[0].message,
                },
                action=action,
                count=count,
            )
        )
    return findings


def hang(
    *,
    run: str,
    last_step_at: datetime | None,
    started_at: datetime,
    step_intervals_s: Sequence[float],
    now: datetime,
    k: float,
    floor_s: float,
) -> Finding | None:
    """A run with no step for longer than max(k x usual step interval, floor_s) seconds is hung.

    The usual interval is the median of step_intervals_s (the recent ones; non-positive and non-finite
    values are dropped); with none, the floor alone is the threshold. Silence runs from the last step, or
    from started_at before the first step (which covers NCCL init and checkpoint load: keep floor_s above them).
    """
    intervals = [s for s in step_intervals_s if math.isfinite(s) and s > 0]
    usual_s = statistics.median(intervals) if intervals else None
    threshold_s = max(k * usual_s, floor_s) if usual_s is not None else floor_s
    since = last_step_at if last_step_at is not None else started_at
    silence_s = (now - since).total_seconds()
    if not silence_s > threshold_s:
        return None
    if last_step_at is None:
        opening = f"{run} has not finished a step {_duration(silence_s)} after it started at {_at(started_at)}"
    else:
        opening = f"{run} has not finished a step for {_duration(silence_s)} (last step at {_at(last_step_at)})"
    if usual_s is None:
        rule = f"with no step history the threshold is the floor of {_duration(floor_s)} (k = {_num(k)})"
    else:
        rule = (
            f"its usual step interval is {_duration(usual_s)}, so the threshold is max({_num(k)} x "
            f"{_duration(usual_s)}, floor {_duration(floor_s)}) = {_duration(threshold_s)}"
        )
    return Finding(
        kind=AlertKind.HANG,
        fingerprint=f"hang:{run}",
        severity="critical",
        summary=f"{run} hung: no step for {_duration(silence_s)}",
        explanation=f"{opening}; {rule}.",
        run=run,
        evidence={
            "silence_s": _num(silence_s),
            "usual_interval_s": _num(usual_s),
            "threshold_s": _num(threshold_s),
            "k": _num(k),
            "floor_s": _num(floor_s),
            "last_step_at": last_step_at.isoformat() if last_step_at else None,
            "started_at": started_at.isoformat(),
        },
        action=Action.RESTART_JOB,
    )


def heartbeat_lost(*, node: str, last_heartbeat_at: datetime | None, now: datetime, timeout_s: float) -> Finding | None:
    """A node silent for longer than timeout_s seconds. A node never heard from is not "lost": None."""
    if last_heartbeat_at is None:
        return None
    silence_s = (now - last_heartbeat_at).total_seconds()
    if not silence_s > timeout_s:
        return None
    return Finding(
        kind=AlertKind.HEARTBEAT,
        fingerprint=f"heartbeat:{node}",
        severity="error",
        summary=f"{node} stopped sending heartbeats",
        explanation=(
            f"{node} has sent no heartbeat for {_duration(silence_s)} (last at {_at(last_heartbeat_at)}), "
            f"longer than the {_duration(timeout_s)} timeout; the node or its agent is down."
        ),
        node=node,
        evidence={
            "silence_s": _num(silence_s),
            "timeout_s": _num(timeout_s),
            "last_heartbeat_at": last_heartbeat_at.isoformat(),
        },
        action=Action.DRAIN_INVESTIGATE,
    )


def run_silent(*, run: str, last_event_at: datetime, now: datetime, silent_s: float) -> Finding | None:
    """A run restarting with no event for longer than silent_s seconds: nobody has said what became of it (requeued,
    waiting for nodes, cancelled behind our back). Its downtime stops being counted at last_event_at + silent_s."""
    silence_s = (now - last_event_at).total_seconds()
    if not silence_s > silent_s:
        return None
    return Finding(
        kind=AlertKind.RUN_SILENT,
        fingerprint=f"run_silent:{run}",
        severity="warning",
        summary=f"{run} silent while restarting for {_duration(silence_s)}",
        explanation=(
            f"{run} is restarting and no event has come from it since {_at(last_event_at)}, longer than the "
            f"{_duration(silent_s)} allowed (RUN_SILENT_S): ask the scheduler whether the job was requeued, waits "
            "for nodes or was cancelled. Its downtime is counted up to the end of that allowance, not to now; its "
            "next event counts the whole gap."
        ),
        run=run,
        evidence={"silence_s": _num(silence_s), "silent_s": _num(silent_s), "last_event_at": last_event_at.isoformat()},
    )


def job_unknown(*, run: str, run_state: str, job_id: str, scheduler: str) -> Finding:
    """The record calls a run running or restarting on a job its scheduler no longer knows (the reconciliation with the
    scheduler, incidents.detection.services.reconcile): the job ended longer ago than the scheduler keeps ended jobs,
    with no accounting to ask, or was deleted. How it ended is not known, so nothing is ended or billed on its word."""
    return Finding(
        kind=AlertKind.JOB_UNKNOWN,
        fingerprint=f"job_unknown:{run}:{job_id}",
        severity="warning",
        summary=f"{scheduler} no longer knows job {job_id} of {run}",
        explanation=(
            f"The record calls {run} {run_state} on job {job_id}, which {scheduler} no longer knows: it ended longer "
            "ago than the scheduler keeps ended jobs and no accounting says how, or it was deleted. FleetOps does not "
            f"guess how it ended: {run} stays {run_state} until its end event or a new attempt's start arrives. If "
            "nothing runs it, cancel it (run.cancelled)."
        ),
        run=run,
        evidence={"job_id": job_id, "scheduler": scheduler, "run_state": run_state},
    )


# Scheduler states that take a node out of service behind FleetOps' back. in_repair, burn_in, retired and
# hot_spare are FleetOps' own lifecycle (an incident already explains them); suspect is a hint, not an outage.
SCHEDULER_OUT_STATES = ("draining", "cordoned")


def node_state(*, node: str, state: str, reason: str) -> Finding | None:
    """A warning when the scheduler drains or cordons a node; None for every other state."""
    if state not in SCHEDULER_OUT_STATES:
        return None
    said = reason.strip() or "no reason given"
    return Finding(
        kind=AlertKind.NODE_STATE,
        fingerprint=f"node_state:{node}",
        severity="warning",
        summary=f"node drained by the scheduler: {said}",
        explanation=(
            f"The scheduler marked {node} {state} ({said}); jobs on it will be moved and it takes no new work."
        ),
        node=node,
        evidence={"state": state, "reason": reason},
        action=Action.DRAIN_INVESTIGATE,
    )
