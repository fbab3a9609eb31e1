"""A run's data-quality findings (runs.domain.quality) from its events and record."""

import bisect
import hashlib
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db.models import (
    Count,
    F,
    Max,
    Q,
    Value,
)
from django.db.models.functions import Coalesce, Concat

from runs.domain import lifecycle, quality
from runs.models import Attempt, Event, Run
from runs.selectors.timeline import RECORD_CACHE_S

_QUALITY_EVENTS = list(lifecycle.LIFECYCLE_TYPES)


def run_quality_get(*, run: Run, version: str | None = None) -> list[quality.Finding]:
    """The run's data-quality findings (runs.domain.quality): what in its events cannot all be true, and how it was
    counted. One source for the run page and the goodput API. Indexed reads of what the findings can rest on only:
    the starts, restores and failures, the interruptions, and of the checkpoints only those a restore names or whose
    durable time is past the rule's lag (a 54-day run has thousands; reading them all cost more than the page).

    With the run's record `version` (run_record_version) they are cached under it and what the record's rows do not
    hold: the claimed GPUs, the last step, and the count and last id of the run's applied starts, restores and
    failures (a second report of a fault leaves the rows as they were, and is still a finding)."""
    events = Event.objects.filter(
        run_name=run.name, type__in=_QUALITY_EVENTS, applied_at__isnull=False, quarantined_at=None
    )
    if version is not None:
        seen = events.order_by().aggregate(n=Count("id"), last=Max("id"))
        key = hashlib.sha256(repr((version, run.gpus_claimed, run.last_step, seen)).encode()).hexdigest()
        return cache.get_or_set(f"fleetops:run:quality:{key}", lambda: run_quality_get(run=run), RECORD_CACHE_S)
    nodes = Attempt.sizing_node_count(run)
    events = events.order_by("time", "id")
    started, restores, failures, told, reconciled = None, [], [], [], []
    # Of each event's data only what the lifecycle's rules read (a start's node list is thousands of names).
    claimed = None
    for source, event_id, type_, time, from_step, job_id, reason, detected_at, gpus in events.values_list(
        "source",
        "event_id",
        "type",
        "time",
        "data__from_step",
        "data__job_id",
        "data__reason",
        "data__detected_at",
        "data__gpus",
    ):
        ref = f"{source}#{event_id}"
        data = {"job_id": job_id or "", "reason": reason or "", "from_step": from_step, "detected_at": detected_at}
        told.append(lifecycle.LifecycleEvent(time, type_, data, source, event_id))
        if source.startswith(quality.RECONCILE_SOURCE + "/"):
            reconciled.append((time, ref, type_, reason or ""))
        if type_ == "run.started" and (claimed is None or (gpus or 0) >= claimed):
            started, claimed = (time, ref), gpus or 0  # the latest start that claimed the most: the run's size
        elif type_ == "run.restored" and from_step is not None:
            restores.append(quality.Restore(from_step=int(from_step), at=time, event=ref))
        elif type_ == "run.failed":
            failures.append((time, ref))
    stops = _stops_with_reports(run, failures)
    odd = lifecycle.derive(told).odd
    named = {stop.resumed_from_step for stop in stops} | {restore.from_step for restore in restores}
    lag = quality.DURABLE_LAG_MAX
    suspect = (
        Q(step__in=named - {None})
        | Q(durable_at__gt=Coalesce("completed_at", "started_at") + lag)
        | Q(durable_at__lt=F("started_at"))
    )
    rows = list(
        run.checkpoints.filter(suspect)
        .order_by()
        .values_list("step", "started_at", "completed_at", "durable_at", "blocking_s")
    )
    refs = (
        dict(
            Event.objects.filter(run_name=run.name, type="checkpoint.completed", data__step__in=[r[0] for r in rows])
            .order_by("-time")
            .values_list("data__step", Concat("source", Value("#"), "event_id"))
        )
        if rows
        else {}
    )
    writes = [
        quality.CheckpointWrite(
            step,
            started_at,
            completed_at,
            durable_at,
            refs.get(step, ""),
            _blocked_until(started_at, completed_at, blocking_s),
        )
        for step, started_at, completed_at, durable_at, blocking_s in rows
    ]
    top = run.checkpoints.aggregate(top=Max("step"))["top"]
    reached = max([s for s in (run.last_step, top) if s is not None], default=None)
    return (
        quality.run_findings(
            claimed_gpus=run.gpus_claimed,
            nodes=nodes,
            started=started,
            reached_step=reached,
            restores=restores,
            checkpoints=writes,
        )
        + quality.stop_findings(stops, writes, reached_step=reached)
        + quality.lifecycle_findings(odd, started_at=run.started_at)
        + quality.reconciled_findings(reconciled)
    )


def _blocked_until(started_at, completed_at, blocking_s) -> datetime | None:
    """Where a write's blocking ended, as the engine places it (runs.selectors._checkpoint_span): from its start for
    its cost, or at its completion when the start never arrived; None for a write never completed (cost unknown, or
    its completion older than its start: an earlier write's)."""
    if blocking_s is None or (started_at is not None and completed_at is not None and completed_at < started_at):
        return None
    return started_at + timedelta(seconds=max(blocking_s, 0.0)) if started_at is not None else completed_at


def findings_in(findings: list[quality.Finding], *, since: datetime | None, until: datetime | None) -> list:
    """The findings of a window: those dated in [since, until), and those without a date (they hold all along)."""
    return [
        f for f in findings if f.at is None or ((since is None or f.at >= since) and (until is None or f.at < until))
    ]


def _stops_with_reports(run: Run, failures: list[tuple[datetime, str]]) -> list[quality.Stop]:
    """The run's interruptions, each with the run.failed reports that fall between its fault and its restart (or
    the next fault)."""
    rows = list(
        run.interruptions.order_by("fault_at").values_list(
            "number", "fault_at", "running_at", "resumed_at", "resumed_from_step"
        )
    )
    failures = sorted(failures)
    times = [time for time, _ref in failures]
    stops = []
    for index, (number, fault_at, running_at, resumed_at, from_step) in enumerate(rows):
        next_fault = rows[index + 1][1] if index + 1 < len(rows) else None
        ends = [t for t in (running_at, next_fault) if t is not None and t >= fault_at]
        first = bisect.bisect_left(times, fault_at)
        last = bisect.bisect_left(times, min(ends)) if ends else len(times)
        stops.append(quality.Stop(number, fault_at, running_at, resumed_at, from_step, tuple(failures[first:last])))
    return stops
