"""Incident response metrics (MTTD, MTTA, MTTM, MTTR) and severity from impact (docs/DOMAIN.md section 5).

Pure: no Django import. Selectors pass incident timestamps as `IncidentTimes` and an explicit window
[since, until). Times are timezone-aware datetimes; every duration is in seconds.

What each metric measures, per incident:
- MTTD, time to detect:      detected_at - started_at
- MTTA, time to acknowledge: acknowledged_at - detected_at
- MTTM, time to mitigate:    mitigated_at - started_at
- MTTR, time to resolve:     resolved_at - started_at
An incident belongs to a window by its started_at. One missing timestamp leaves that incident out of the
metrics that need it and no others (an open incident still counts towards MTTD and MTTA).

Percentiles use linear interpolation between the closest ranks (numpy's default, Excel's PERCENTILE.INC):
p at position (n - 1) x p of the sorted values. With one value every percentile is that value.
"""

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from runs.domain.utcdays import week_start

METRICS = ("mttd", "mtta", "mttm", "mttr")


@dataclass(frozen=True)
class IncidentTimes:
    started_at: datetime  # the impact began (the earliest fault)
    detected_at: datetime
    acknowledged_at: datetime | None = None
    mitigated_at: datetime | None = None
    resolved_at: datetime | None = None


def durations(incident: IncidentTimes) -> dict[str, float | None]:
    """The four durations of one incident in seconds, None where a timestamp is missing.

    A negative duration (reporters' clocks disagree, or someone acknowledged before the detector fired)
    counts as 0: the step took no time, and a negative mean would hide the slow ones.
    """
    pairs = {
        "mttd": (incident.started_at, incident.detected_at),
        "mtta": (incident.detected_at, incident.acknowledged_at),
        "mttm": (incident.started_at, incident.mitigated_at),
        "mttr": (incident.started_at, incident.resolved_at),
    }
    return {
        name: None if end is None else max((end - start).total_seconds(), 0.0) for name, (start, end) in pairs.items()
    }


def percentile(values: list[float], p: float) -> float:
    """The p-th quantile (0 <= p <= 1) of non-empty values by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * p
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def summary(values: list[float]) -> dict[str, float | int | None]:
    """count, mean_s, p50_s and p90_s of durations in seconds; None for each statistic when there are none."""
    if not values:
        return {"count": 0, "mean_s": None, "p50_s": None, "p90_s": None}
    return {
        "count": len(values),
        "mean_s": math.fsum(values) / len(values),
        "p50_s": percentile(values, 0.5),
        "p90_s": percentile(values, 0.9),
    }


def response_metrics(incidents: Iterable[IncidentTimes], *, since: datetime, until: datetime) -> dict[str, dict]:
    """{"mttd": {"count", "mean_s", "p50_s", "p90_s"}, "mtta": ..., "mttm": ..., "mttr": ...}.

    Over incidents with since <= started_at < until; each metric over the incidents that have its timestamps.
    """
    collected: dict[str, list[float]] = {name: [] for name in METRICS}
    for incident in incidents:
        if not since <= incident.started_at < until:
            continue
        for name, seconds in durations(incident).items():
            if seconds is not None:
                collected[name].append(seconds)
    return {name: summary(values) for name, values in collected.items()}


def weekly_response(
    incidents: Iterable[IncidentTimes], *, since: datetime, until: datetime
) -> list[tuple[date, dict[str, dict]]]:
    """response_metrics() per ISO week (keyed by its Monday, UTC) that meets [since, until), oldest first.

    Weeks without incidents are listed with zero counts, so a chart shows the gap. Edge weeks count only
    the part inside [since, until).
    """
    by_week: dict[date, list[IncidentTimes]] = defaultdict(list)
    for incident in incidents:
        if since <= incident.started_at < until:
            by_week[week_start(incident.started_at).date()].append(incident)
    weeks = []
    start = since
    while start < until:
        monday = week_start(start)
        end = min(monday + timedelta(days=7), until)
        weeks.append((monday.date(), response_metrics(by_week[monday.date()], since=start, until=end)))
        start = end
    return weeks


SEVERITIES = ("SEV1", "SEV2", "SEV3", "SEV4")  # most severe first


def severity_from_impact(
    *,
    gpus_idle: int,
    runs_affected: int,
    gpu_hours_lost: float = 0.0,
    cost_per_minute_usd: float = 0.0,
    sev1_gpus: int = 1024,
    sev1_runs: int = 2,
    sev1_gpu_hours: float = 1000.0,
    sev1_usd_per_min: float | None = None,
    sev2_gpus: int = 256,
    sev2_gpu_hours: float = 100.0,
    sev2_usd_per_min: float | None = None,
) -> str:
    """SEV1..SEV4 from what an incident stops and what it has cost; the first rule that holds wins.

    - SEV1: gpus_idle >= 1,024, runs_affected >= 2, gpu_hours_lost >= 1,000, or $/min >= sev1_usd_per_min (if set):
      fleet-scale harm.
    - SEV2: gpus_idle >= 256, gpu_hours_lost >= 100, or $/min >= sev2_usd_per_min (if set): one large run stopped,
      or a long outage.
    - SEV3: any GPU idle, any GPU-hour lost, or any run affected (a slowed run idles no GPU but still loses goodput).
    - SEV4: nothing idle, nothing lost, no run affected: a node or GPU to look at before it hurts.
    Dollar thresholds are off by default: at one price per GPU-hour they are GPU thresholds under another name.
    """

    def costs(threshold: float | None) -> bool:
        return threshold is not None and cost_per_minute_usd >= threshold

    if (
        gpus_idle >= sev1_gpus
        or runs_affected >= sev1_runs
        or gpu_hours_lost >= sev1_gpu_hours
        or costs(sev1_usd_per_min)
    ):
        return "SEV1"
    if gpus_idle >= sev2_gpus or gpu_hours_lost >= sev2_gpu_hours or costs(sev2_usd_per_min):
        return "SEV2"
    if gpus_idle > 0 or gpu_hours_lost > 0 or runs_affected > 0:
        return "SEV3"
    return "SEV4"


def more_severe(a: str, b: str) -> str:
    """The more severe of two severities."""
    return min(a, b, key=SEVERITIES.index)
