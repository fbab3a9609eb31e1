"""Goodput and badput over a window: a run's, and the fleet's weighted by GPU-hours."""

from dataclasses import dataclass
from datetime import date, datetime

from django.db.models import Q

from runs.domain import goodput
from runs.models import Run
from runs.selectors.timeline import run_timeline_get, run_timelines_get


@dataclass(frozen=True)
class GoodputReport:
    since: datetime
    until: datetime
    total: goodput.Breakdown  # seconds for a run, GPU-seconds for the fleet
    daily: list[tuple[date, goodput.Breakdown]]


def run_goodput_get(
    *,
    run: Run,
    since: datetime | None,
    until: datetime | None,
    now: datetime,
    timeline: goodput.RunTimeline | None = None,
) -> GoodputReport:
    """The run's breakdown over [since, until), by default its whole life up to now.

    Pass the run's `timeline` when the caller has fetched it already. The total and the daily series come from
    one pass of the engine: the total is the days' exact sum (docs/PERFORMANCE.md).
    """
    since = since or run.started_at or now
    until = until or run.ended_at or now
    if run.started_at is None or until <= since:
        return GoodputReport(since, max(until, since), goodput.Breakdown(), [])
    if timeline is None:
        timeline = run_timeline_get(run=run)
    total, days = goodput.breakdown_and_daily(timeline, since=since, until=until, now=now)
    return GoodputReport(since, until, total, days)


def runs_in_window(*, since: datetime, until: datetime) -> list[Run]:
    return list(
        Run.objects.filter(started_at__lt=until)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since))
        .order_by("name")
    )


@dataclass(frozen=True)
class FleetReport(GoodputReport):
    by_run: list[tuple[Run, goodput.Breakdown]]  # each in its own seconds (not weighted)
    lost_by_cause: dict[str, float]  # GPU-hours lost to interruptions whose fault is in the window


def fleet_goodput_get(*, since: datetime, until: datetime, now: datetime) -> FleetReport:
    """Every run that overlaps [since, until), weighted by GPU-hours."""
    total, by_day, by_run, lost = goodput.Breakdown(), {}, [], {}
    runs = runs_in_window(since=since, until=until)
    timelines = run_timelines_get(runs=runs)
    for run in runs:
        timeline = timelines[run.pk]
        run_total, run_days = goodput.breakdown_and_daily(timeline, since=since, until=until, now=now)
        by_run.append((run, run_total))
        total += run_total.weighted(run.gpu_count)
        for day, breakdown in run_days:
            by_day[day] = by_day.get(day, goodput.Breakdown()) + breakdown.weighted(run.gpu_count)
        for cost in goodput.interruption_costs(timeline, now=now):
            if since <= cost.fault_at < until:
                lost[cost.cause] = lost.get(cost.cause, 0.0) + cost.gpu_hours
    return FleetReport(since, until, total, sorted(by_day.items()), by_run, lost)
