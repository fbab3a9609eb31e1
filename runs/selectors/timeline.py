"""A run as the goodput engine sees it (rows fetched with values_list, the maths done by runs/domain), and
what is computed from a run's record, kept in the cache until the record changes."""

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    When,
)
from django.db.models.functions import Coalesce

from runs.domain import goodput
from runs.models import Attempt, Checkpoint, Event, Interruption, Run


def run_timeline_get(*, run: Run) -> goodput.RunTimeline:
    """The run as the goodput engine sees it: its span, its interruptions and its checkpoints' blocking."""
    interruptions = tuple(
        goodput.InterruptionSpan(*row) for row in run.interruptions.values_list(*_INTERRUPTION_FIELDS)
    )
    checkpoints = tuple(_checkpoint_span(*row) for row in _checkpoint_rows(run.checkpoints.all()))
    heard = runs_heard_until_get(runs=[run]).get(run.pk)
    shrunk = tuple(goodput.ShrunkSpan(*row) for _, *row in _shrunk_rows([run]))
    return goodput.RunTimeline(run.started_at, run.ended_at, run.gpu_count, interruptions, checkpoints, heard, shrunk)


def _shrunk_rows(runs: list[Run]) -> QuerySet:
    """(run id, start, end, GPUs) of the attempts that ran on fewer GPUs than their run's own: one query."""
    return (
        Attempt.objects.filter(run_id__in=[run.pk for run in runs], gpus__lt=F("run__gpu_count"))
        .order_by("run_id", "number")
        .values_list("run_id", "started_at", "ended_at", "gpus")
    )


def runs_heard_until_get(*, runs: list[Run]) -> dict[int, datetime]:
    """Of these runs, those restarting, by id: until when their record holds (RunTimeline.heard_until), their last
    event plus RUN_SILENT_S. One query, none when no run restarts: a run that says it is restarting and then falls
    silent has said nothing of what became of it, and its downtime stops growing there."""
    restarting = [run for run in runs if run.state == Run.State.RESTARTING and run.ended_at is None]
    if not restarting:
        return {}
    # A planned stop is expected to be quiet (a maintenance window of hours): only a failure's silence counts. The
    # latest event of each run (an index on run and time: a backward scan stops at its first row), not counting what
    # is out of the record (quarantined).
    latest = Interruption.objects.filter(run_id=OuterRef("pk")).order_by("-fault_at", "-pk").values("planned")[:1]
    heard = Event.objects.filter(run_name=OuterRef("name"), quarantined_at=None).order_by("-time").values("time")[:1]
    rows = (
        Run.objects.filter(pk__in=[run.pk for run in restarting])
        .annotate(planned=Subquery(latest), last=Subquery(heard))
        .values_list("pk", "planned", "last")
    )
    silence = timedelta(seconds=settings.RUN_SILENT_S)
    return {pk: last + silence for pk, planned, last in rows if last is not None and not planned}


_INTERRUPTION_FIELDS = (
    "fault_at", "detected_at", "running_at", "resumed_at", "resumed_from_step", "planned", "cause", "node_id"
)  # fmt: skip


def _checkpoint_rows(checkpoints: QuerySet, *first: str) -> QuerySet:
    """The writes the engine counts: completed ones, and those started and never completed (a failed one is none).

    One timestamp a row besides the durable time (the start, else the completion): parsing timestamps is most of
    this query's cost on a long run (thousands of checkpoints), and the completion is needed only where the start
    never arrived."""
    return (
        checkpoints.filter(Q(blocking_s__isnull=False) | Q(status=Checkpoint.Status.STARTED, started_at__isnull=False))
        .exclude(started_at__isnull=True, completed_at__isnull=True)
        .values_list(
            *first,
            "step",
            Coalesce("started_at", "completed_at"),
            ExpressionWrapper(Q(started_at__isnull=False), output_field=BooleanField()),
            # A completion older than the step's latest start was an earlier write's: this one never completed.
            Case(When(completed_at__lt=F("started_at"), then=None), default="blocking_s", output_field=FloatField()),
            # The durable time as a lag from that timestamp: an interval costs a fraction of a timestamp to parse.
            ExpressionWrapper(F("durable_at") - Coalesce("started_at", "completed_at"), output_field=DurationField()),
            "tier",
        )
    )


def _checkpoint_span(step, at, started, blocking_s, durable_lag, tier) -> goodput.CheckpointSpan:
    start = at if started or blocking_s is None else at - timedelta(seconds=blocking_s)
    return goodput.CheckpointSpan(step, start, blocking_s, None if durable_lag is None else at + durable_lag, tier)


def run_timelines_get(*, runs: list[Run]) -> dict[int, goodput.RunTimeline]:
    """run_timeline_get for many runs in two queries (not two a run): by run id."""
    ids = [run.pk for run in runs]
    interruptions: dict[int, list] = {pk: [] for pk in ids}
    rows = Interruption.objects.filter(run_id__in=ids).order_by("run_id", "number", "id")
    for run_id, *row in rows.values_list("run_id", *_INTERRUPTION_FIELDS):
        interruptions[run_id].append(goodput.InterruptionSpan(*row))
    checkpoints: dict[int, list] = {pk: [] for pk in ids}
    rows = Checkpoint.objects.filter(run_id__in=ids).order_by("run_id", "step", "id")
    for run_id, *row in _checkpoint_rows(rows, "run_id"):
        checkpoints[run_id].append(_checkpoint_span(*row))
    heard = runs_heard_until_get(runs=runs)
    shrunk: dict[int, list] = {pk: [] for pk in ids}
    for run_id, *row in _shrunk_rows(runs):
        shrunk[run_id].append(goodput.ShrunkSpan(*row))
    return {
        run.pk: goodput.RunTimeline(
            run.started_at,
            run.ended_at,
            run.gpu_count,
            tuple(interruptions[run.pk]),
            tuple(checkpoints[run.pk]),
            heard.get(run.pk),
            tuple(shrunk[run.pk]),
        )
        for run in runs
    }


RECORD_CACHE_S = 6 * 3600  # the key changes with the record; this only lets entries nobody asks for go


T = TypeVar("T")


# Per table, of the run's rows: how many, and the sum and the largest of their xmin (the id of the transaction
# that wrote the row version; an UPDATE writes a new one). Any insert, update or delete moves one of them.
_ROWS_VERSION = """(SELECT count(*)::text || '.' || coalesce(sum(xmin::text::bigint), 0)::text || '.'
    || coalesce(max(xmin::text::bigint), 0)::text FROM {table} t WHERE t.run_id = r.id)"""


def run_record_version(*, run: Run) -> str | None:
    """A version of what the run's goodput and advice are computed from; None where none can be had (SQLite).

    It is the run row's own fields as the caller loaded them (span, GPUs, interval) and a digest of the row
    versions of its interruptions and checkpoints, in one query. Taken from the rows themselves, not from the
    events applied: a rebuild, a late event re-deriving an old interruption, an edit in the admin all move it.
    Read after the run row and before the rows it versions, so what is computed under it is never older than it.
    """
    return run_record_versions(runs=[run])[run.pk]


def run_record_versions(*, runs: list[Run]) -> dict[int, str | None]:
    """run_record_version of each run, by id, in one query."""
    if connection.vendor != "postgresql" or not runs:  # no row versions: nothing is cached, all computed each time
        return {run.pk: None for run in runs}
    tables = (Interruption._meta.db_table, Checkpoint._meta.db_table)
    columns = ", ".join(_ROWS_VERSION.format(table=table) for table in tables)
    sql = f"SELECT r.id, {columns} FROM {Run._meta.db_table} r WHERE r.id = ANY(%s)"
    with connection.cursor() as cursor:
        cursor.execute(sql, [[run.pk for run in runs]])
        rows = {pk: versions for pk, *versions in cursor.fetchall()}
    return {run.pk: _version(run, rows.get(run.pk)) for run in runs}


def _version(run: Run, rows: list[str] | None) -> str | None:
    if rows is None:  # deleted since the caller loaded it
        return None
    fields = (run.pk, run.name, run.started_at, run.ended_at, run.gpu_count, run.checkpoint_interval_s)
    return hashlib.sha256(repr((fields, rows)).encode()).hexdigest()


def run_record_cached(*, run: Run, version: str | None, part: str, compute: Callable[[], T]) -> T:
    """compute(), kept in Django's cache under the run and its record `version` (run_record_version).

    `compute` must depend on nothing but the run's record: not on `now` (a running run's goodput grows with
    it), not on other runs. No version: computed each time. The cache is per process by default (locmem,
    pickled copies); a shared one (Redis) is as safe, the key being the version and not a time to live."""
    if version is None:
        return compute()
    return cache.get_or_set(f"fleetops:run:{part}:{version}", compute, RECORD_CACHE_S)


def run_costs_get(*, runs: list[Run], now: datetime) -> dict[int, list[goodput.InterruptionCost]]:
    """goodput.interruption_costs of each run, by id, in a fixed number of queries however many runs.

    An ended run's come from the cache while its record is unchanged (its costs no longer depend on `now`); a
    running run's, and those not cached, from run_timelines_get."""
    versions = run_record_versions(runs=[run for run in runs if run.ended_at is not None])
    keys = {run.pk: f"fleetops:run:costs:{versions[run.pk]}" for run in runs if versions.get(run.pk)}
    cached = cache.get_many(list(keys.values()))
    costs = {pk: cached[key] for pk, key in keys.items() if key in cached}
    missing = [run for run in runs if run.pk not in costs]
    for pk, timeline in run_timelines_get(runs=missing).items():
        costs[pk] = goodput.interruption_costs(timeline, now=now)
    cache.set_many({keys[run.pk]: costs[run.pk] for run in missing if run.pk in keys}, RECORD_CACHE_S)
    return costs
