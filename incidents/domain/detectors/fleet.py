"""Detectors over many ranks or nodes at once: stragglers, silent data corruption, lemon nodes."""

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from incidents.domain.alert_kinds import AlertKind
from incidents.domain.detectors.findings import Finding, _at, _duration, _num, _plural, _reading, _score
from incidents.domain.xid import Action

MAD_SCALE = 1.4826  # makes the MAD estimate the standard deviation of normally distributed data


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
                kind=AlertKind.STRAGGLER,
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
                kind=AlertKind.SDC,
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
                kind=AlertKind.LEMON,
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
