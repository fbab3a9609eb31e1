"""Detectors: plain data in, `Finding`s out, each with the sentence the on-call reads (docs/DOMAIN.md section 4).

Pure: no Django import, standard library only. Selectors fetch the readings and pass them in with an
explicit `now`. Times are timezone-aware datetimes; durations and thresholds are seconds unless a name
says otherwise (`_c` is degrees Celsius, `_mads` is scaled median absolute deviations).

A fingerprint names what a finding is about, not when: the same problem seen again gives the same
fingerprint, so the caller folds it into the alert already firing. Evidence holds only JSON-safe values
(no NaN or infinity: those become None) because it is stored as it is.
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial

from incidents.domain.xid import RECOVERY_ACTIONS, Action, XidFault, recovery_action_info, recovery_action_label

MAD_SCALE = 1.4826  # makes the MAD estimate the standard deviation of normally distributed data


@dataclass(frozen=True)
class Finding:
    kind: str  # xid, ecc, gpu_health, hang, run_silent, heartbeat, node_state, straggler, sdc, lemon
    fingerprint: str
    severity: str  # critical, error, warning, info
    summary: str
    explanation: str
    node: str | None = None
    gpu: int | None = None
    run: str | None = None
    evidence: dict = field(default_factory=dict)
    action: Action = Action.NONE
    count: int = 1  # occurrences folded into this finding (an Xid storm is one finding)
    detected_at: datetime | None = None  # when it was noticed, if the source says (run.failed's detected_at); else at
    # An occurrence that its source reports again and again while one episode lasts (Alertmanager re-sends a firing
    # alert with the same startsAt): when that episode began. services.findings_record counts it once per episode.
    episode: datetime | None = None

    @property
    def recommended_action(self) -> str:
        return self.action.label


# -- Xids --------------------------------------------------------------------------------------------------


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
                kind="xid",
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


# -- runs and nodes going quiet ----------------------------------------------------------------------------


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
        kind="hang",
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
        kind="heartbeat",
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
        kind="run_silent",
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


# Scheduler states that take a node out of service behind FleetOps' back. in_repair, burn_in, retired and
# hot_spare are FleetOps' own lifecycle (an incident already explains them); suspect is a hint, not an outage.
SCHEDULER_OUT_STATES = ("draining", "cordoned")


def node_state(*, node: str, state: str, reason: str) -> Finding | None:
    """A warning when the scheduler drains or cordons a node; None for every other state."""
    if state not in SCHEDULER_OUT_STATES:
        return None
    said = reason.strip() or "no reason given"
    return Finding(
        kind="node_state",
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


# -- GPU readings ------------------------------------------------------------------------------------------


def _gpu_finding(
    kind: str,
    node: str,
    gpu: int,
    name: str,
    severity: str,
    summary: str,
    explanation: str,
    action: Action,
    **evidence,
) -> Finding:
    """A finding about one GPU, fingerprinted <kind>:<node>:<gpu>:<name> so each condition folds on its own."""
    return Finding(
        kind=kind,
        fingerprint=f"{kind}:{node}:{gpu}:{name}",
        severity=severity,
        summary=f"{node} GPU {gpu}: {summary}",
        explanation=explanation,
        node=node,
        gpu=gpu,
        evidence=evidence,
        action=action,
    )


def gpu_ecc(
    *,
    node: str,
    gpu: int,
    uncorrected_delta: int,
    remapped_rows_failure: bool,
    remapped_rows_pending: bool,
    retired_pages: int,
    retired_pages_threshold: int,
) -> list[Finding]:
    """Memory errors from one ECC reading: double-bit errors, row-remap failure or pending, retired pages.

    uncorrected_delta is the rise of the uncorrected (double-bit) total since the previous reading.
    Retired pages count once they reach retired_pages_threshold (at or over it).
    """
    where = f"{node} GPU {gpu}"
    finding = partial(_gpu_finding, "ecc", node, gpu)

    findings = []
    if uncorrected_delta > 0:
        findings.append(
            finding(
                "double_bit",
                "error",
                "double-bit ECC errors",
                f"{where} reported {_plural(uncorrected_delta, 'new uncorrected (double-bit) ECC error')} since "
                "the previous reading; the data in that memory was lost. Reset the GPU.",
                Action.RESET_GPU,
                uncorrected_delta=uncorrected_delta,
            )
        )
    if remapped_rows_failure:
        findings.append(
            finding(
                "remap_failure",
                "critical",
                "row remapping failed",
                f"{where} could not remap a failing memory row (usually no spare rows were left in that bank). "
                "Drain it and send it for RMA.",
                Action.DRAIN_RMA,
                remapped_rows_failure=True,
            )
        )
    if remapped_rows_pending:
        findings.append(
            finding(
                "remap_pending",
                "warning",
                "row remap pending",
                f"{where} has a memory row remap waiting; it takes effect at the next GPU reset. "
                "Reset the GPU at the next opportunity.",
                Action.RESET_GPU,
                remapped_rows_pending=True,
            )
        )
    if retired_pages >= retired_pages_threshold:
        findings.append(
            finding(
                "retired_pages",
                "error",
                "too many retired pages",
                f"{where} has retired {retired_pages} memory pages, at or over the threshold of "
                f"{retired_pages_threshold}. Drain it and send it for RMA.",
                Action.DRAIN_RMA,
                retired_pages=retired_pages,
                threshold=retired_pages_threshold,
            )
        )
    return findings


# Clock event (throttle) reasons that mean the hardware is slowing itself down. The others (idle, application
# clocks, software power cap, sync boost, display clock) are normal operation. Compared without case,
# underscores or spaces, so "HwThermalSlowdown" and "hw_thermal_slowdown" both match.
HARDWARE_THROTTLE_REASONS = frozenset({"hwslowdown", "hwthermalslowdown", "hwpowerbrakeslowdown", "swthermalslowdown"})


def gpu_health(
    *,
    node: str,
    gpu: int,
    recovery_action: int,
    temperature_c: float,
    slowdown_c: float,
    throttle_reasons: list[str],
    nvlink_errors_delta: int,
) -> list[Finding]:
    """Findings from one polled health reading: the driver's recovery action, heat, throttling, NVLink errors.

    recovery_action is NVML field 230 (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset).
    Heat counts at or above slowdown_c; nvlink_errors_delta is the rise of the counter since the last reading.
    """
    where = f"{node} GPU {gpu}"
    finding = partial(_gpu_finding, "gpu_health", node, gpu)

    findings = []
    if recovery_action != 0:
        action = recovery_action_info(recovery_action)
        label = recovery_action_label(recovery_action)
        severity = RECOVERY_ACTIONS[recovery_action][2] if recovery_action in RECOVERY_ACTIONS else "warning"
        findings.append(
            finding(
                "recovery_action",
                severity,
                f"driver recommends {label}",
                f"The driver on {where} set its recovery action (NVML field 230) to {recovery_action}, "
                f"{label}. Recommended: {action.label}.",
                action,
                recovery_action=recovery_action,
            )
        )
    if math.isfinite(temperature_c) and slowdown_c > 0 and temperature_c >= slowdown_c:
        findings.append(
            finding(
                "thermal",
                "warning",
                f"at {_num(temperature_c)} °C",
                f"{where} is at {_num(temperature_c)} °C, at or above its slowdown threshold of "
                f"{_num(slowdown_c)} °C, so its clocks are cut and the whole job waits for it.",
                Action.WATCH,
                temperature_c=_num(temperature_c),
                slowdown_c=_num(slowdown_c),
            )
        )
    hardware = sorted({r for r in throttle_reasons if _reason_key(r) in HARDWARE_THROTTLE_REASONS})
    if hardware:
        findings.append(
            finding(
                "throttle",
                "warning",
                "hardware clock slowdown",
                f"{where} is throttled by {', '.join(hardware)}: the hardware is slowing itself down "
                "(heat, power brake), which makes it a straggler.",
                Action.WATCH,
                throttle_reasons=hardware,
            )
        )
    if nvlink_errors_delta > 0:
        findings.append(
            finding(
                "nvlink",
                "warning",
                "NVLink errors",
                f"{where} counted {_plural(nvlink_errors_delta, 'new NVLink error')} since the previous reading; "
                "errors that keep rising point at a link or cable (an Xid 74 means drain and investigate).",
                Action.WATCH,
                nvlink_errors_delta=nvlink_errors_delta,
            )
        )
    return findings


def _reason_key(reason: str) -> str:
    return "".join(ch for ch in reason.lower() if ch.isalnum())


# -- stragglers ----------------------------------------------------------------------------------------------


def stragglers(
    *,
    run: str,
    windows: Sequence[Mapping[tuple[int, str], float]],
    threshold_mads: float,
    consecutive: int,
    min_ranks: int = 4,
    mad_floor_rel: float = 0.01,
) -> list[Finding]:
    """Nodes with a rank whose step time is a robust outlier in each of the last `consecutive` windows.

    Each window maps (rank, node) to that rank's step time in seconds (e.g. its mean over the window),
    oldest window first. Per window: median and MAD x 1.4826 of the finite times; a rank is slow when
    (t - median) / scale > threshold_mads, scale = max(MAD, mad_floor_rel x median) so that identical
    ranks (MAD 0) do not turn a 0.1% difference into an outlier. Only slower counts, not faster.
    Non-finite times (a rank that reported nothing usable) are left out of the statistics and are never
    slow; a window with fewer than min_ranks finite times judges no one. A node is flagged when one of its
    ranks was slow in every one of the last `consecutive` windows (not necessarily the same rank).
    """
    if consecutive < 1:
        raise ValueError(f"consecutive must be >= 1, got {consecutive}")
    if len(windows) < consecutive:
        return []
    # Per window, each node's slowest slow rank: node -> (score, rank, seconds, median, mad).
    judged: list[dict[str, tuple[float, int, float, float, float]]] = []
    for window in windows[-consecutive:]:
        times = [t for t in window.values() if math.isfinite(t)]
        if len(times) < min_ranks:
            return []  # this window judges no one, so no streak reaches `consecutive`
        median = statistics.median(times)
        mad = MAD_SCALE * statistics.median(abs(t - median) for t in times)
        scale = max(mad, mad_floor_rel * abs(median))
        worst: dict[str, tuple[float, int, float, float, float]] = {}
        for (rank, node), seconds in window.items():
            if not math.isfinite(seconds):
                continue
            score = (seconds - median) / scale if scale > 0 else (math.inf if seconds > median else 0.0)
            if score > threshold_mads and (node not in worst or score > worst[node][0]):
                worst[node] = (score, rank, seconds, median, mad)
        judged.append(worst)
    flagged = set(judged[0]).intersection(*judged[1:])
    findings = []
    for node in sorted(flagged):
        per_window = [worst[node] for worst in judged]
        score, rank, seconds, median, _mad = per_window[-1]
        findings.append(
            Finding(
                kind="straggler",
                fingerprint=f"straggler:{run}:{node}",
                severity="warning",
                summary=f"{node} slows {run}: rank {rank} is a straggler",
                explanation=(
                    f"rank {rank} on {node} was {_score(score)} MADs slower than the run's median step time "
                    f"({_num(seconds, 3)} s vs {_num(median, 3)} s) in the latest window, and over "
                    f"{_num(threshold_mads)} MADs in {_plural(consecutive, 'consecutive window')}."
                ),
                node=node,
                run=run,
                evidence={
                    "threshold_mads": _num(threshold_mads),
                    "consecutive": consecutive,
                    "mad_floor_rel": _num(mad_floor_rel, 4),
                    "windows": [
                        {
                            "rank": r,
                            "seconds": _num(t, 4),
                            "median_s": _num(m, 4),
                            "mad_s": _num(d, 4),
                            "score": _num(z),
                        }
                        for z, r, t, m, d in per_window
                    ],
                },
                action=Action.DRAIN_INVESTIGATE,
            )
        )
    return findings


# -- silent data corruption ----------------------------------------------------------------------------------


def silent_data_corruption(
    *,
    steps: Sequence[Mapping[tuple[int, str], float]],
    rel_tolerance: float,
    repeats: int,
    min_replicas: int = 3,
    steps_kept: int = 20,
) -> list[Finding]:
    """Hosts whose data-parallel replicas disagree with the others' gradient norm in `repeats` or more steps.

    Each element is one step's gradient norms by (rank, node), replicas that should agree. A value
    disagrees when |v - median| > rel_tolerance x |median| (median of the finite values); NaN and infinity
    always disagree. A step is judged only with at least min_replicas values and a finite majority: when
    most replicas blew up, the model diverged, which no single host explains. A host counts once per step
    however many of its ranks disagree. Evidence keeps the latest `steps_kept` disagreeing steps.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    seen: dict[str, list[dict]] = defaultdict(list)
    judged = 0
    for index, step in enumerate(steps):
        finite = [v for v in step.values() if math.isfinite(v)]
        if len(step) < min_replicas or len(finite) * 2 <= len(step):
            continue
        judged += 1
        median = statistics.median(finite)
        worst: dict[str, tuple[float, dict]] = {}
        for (rank, node), value in step.items():
            off = abs(value - median) if math.isfinite(value) else math.inf
            if off > rel_tolerance * abs(median) and (node not in worst or off > worst[node][0]):
                record = {"step_index": index, "rank": rank, "value": _reading(value), "median": _num(median, 6)}
                worst[node] = (off, record)
        for node, (_off, record) in worst.items():
            seen[node].append(record)
    findings = []
    for node, records in sorted(seen.items()):
        if len(records) < repeats:
            continue
        last = records[-1]
        findings.append(
            Finding(
                kind="sdc",
                fingerprint=f"sdc:{node}",
                severity="critical",
                summary=f"{node}: suspected silent data corruption",
                explanation=(
                    f"{node}'s gradient norms disagreed with the other data-parallel replicas in "
                    f"{len(records)} of {judged} steps (at least {repeats} needed; latest: rank {last['rank']} had "
                    f"{last['value']} vs median {_num(last['median'], 4)}, tolerance {_num(rel_tolerance * 100)}%); "
                    "the replicas that agree rule out the data and the model, which leaves this host."
                ),
                node=node,
                evidence={
                    "disagreements": len(records),
                    "steps_judged": judged,
                    "rel_tolerance": _num(rel_tolerance),
                    "repeats": repeats,
                    "steps": records[-steps_kept:],
                },
                action=Action.DRAIN_INVESTIGATE,
                count=len(records),
            )
        )
    return findings


# -- lemon nodes ---------------------------------------------------------------------------------------------


def lemons(
    *, interruptions: Sequence[tuple[str, datetime]], now: datetime, window_s: float, threshold: int
) -> list[Finding]:
    """Nodes involved in at least `threshold` interruptions with fault_at in (now - window_s, now].

    Kokolis et al. (docs/DOMAIN.md section 1): taking such lemon nodes out cut failures of 512+ GPU jobs from
    14% to 4%. Faults after `now` are ignored (a late clock), not counted early.
    """
    since = now - timedelta(seconds=window_s)
    faults: dict[str, list[datetime]] = defaultdict(list)
    for node, fault_at in interruptions:
        if since < fault_at <= now:
            faults[node].append(fault_at)
    findings = []
    for node, times in sorted(faults.items()):
        if len(times) < threshold:
            continue
        times.sort()
        findings.append(
            Finding(
                kind="lemon",
                fingerprint=f"lemon:{node}",
                severity="warning",
                summary=f"{node} is a lemon: {len(times)} interruptions in {_duration(window_s)}",
                explanation=(
                    f"{node} was involved in {len(times)} interruptions in the last {_duration(window_s)} "
                    f"(threshold {threshold}), the latest at {_at(times[-1])}; nodes that keep failing should "
                    "leave the pool until they pass the repair gate."
                ),
                node=node,
                evidence={
                    "interruptions": len(times),
                    "window_s": _num(window_s),
                    "threshold": threshold,
                    "fault_at": [t.isoformat() for t in times],
                },
                action=Action.DRAIN_INVESTIGATE,
                count=len(times),
            )
        )
    return findings


# -- wording -------------------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 2) -> float | int | None:
    """A JSON-safe number for evidence and text: rounded, integers kept whole, NaN and infinity as None."""
    if value is None or not math.isfinite(value):
        return None
    if isinstance(value, int) or float(value).is_integer():
        return int(value)
    return round(value, digits)


def _reading(value: float) -> float | int | str:
    """A measured value for evidence: a number, or "nan" / "inf" / "-inf" kept visible as text."""
    return _num(value, 6) if math.isfinite(value) else str(value)


def _score(score: float) -> str:
    return "infinitely many" if math.isinf(score) else f"{score:.1f}"


def _duration(seconds: float) -> str:
    """Seconds in the unit a person would use: '1.31 s', '45 s', '25.0 min', '2.5 h', '3.0 days'."""
    if seconds < 10:
        return f"{seconds:.3g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _at(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
