"""Reads of the fleet record for pages and the API."""

import bisect
import dataclasses
import hashlib
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Concat

from runs.domain import advisor, checkpoint_io, goodput, hostlist, levers, lifecycle, quality, tiers, trust
from runs.domain.cloudevents import CloudEvent
from runs.models import Attempt, Checkpoint, Cluster, Event, EventRollup, Interruption, Node, Run


@dataclass(frozen=True)
class ClusterSummary:
    cluster: Cluster | None
    nodes: int
    by_state: dict[str, int]


def node_states_by_cluster() -> list[ClusterSummary]:
    """Per cluster (and the nodes no cluster claims yet), how many nodes are in each state."""
    counts: dict[int | None, dict[str, int]] = {}
    for cluster_id, state, n in Node.objects.values_list("cluster_id", "state").annotate(n=Count("id")):
        counts.setdefault(cluster_id, {})[state] = n
    clusters = {c.pk: c for c in Cluster.objects.all()}
    summaries = [
        ClusterSummary(cluster, sum(counts.get(pk, {}).values()), counts.get(pk, {}))
        for pk, cluster in clusters.items()
    ]
    if None in counts:
        summaries.append(ClusterSummary(None, sum(counts[None].values()), counts[None]))
    return summaries


@dataclass(frozen=True)
class RackRow:
    cluster: str  # "" for nodes no cluster claims yet
    rack: str  # "" for the nodes of the cluster without a rack
    nodes: list[tuple[str, str]]  # (hostname, state), in natural hostname order


def node_grid_get() -> list[RackRow]:
    """Every node's state, one row per rack (clusters in name order, unracked nodes last): one query, no model rows.

    Kept to a single values_list so the overview stays light at thousands of nodes.
    """
    racks: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for hostname, state, rack, cluster in Node.objects.values_list("hostname", "state", "rack", "cluster__name"):
        racks.setdefault((cluster or "", rack), []).append((hostname, state))
    natural = hostlist.natural
    order = sorted(racks, key=lambda key: (key[0] == "", natural(key[0]), key[1] == "", natural(key[1])))
    return [RackRow(c, r, sorted(racks[c, r], key=lambda node: natural(node[0]))) for c, r in order]


@dataclass(frozen=True)
class FlaggedNode:
    hostname: str
    state: str
    rack: str
    reason: str

    @property
    def state_label(self) -> str:
        return self.state.replace("_", " ")


def suspect_nodes_get(*, limit: int = 20) -> tuple[int, list[FlaggedNode]]:
    """How many nodes are suspect, and the latest flagged of them with the reason they were flagged."""
    suspects = Node.objects.filter(state="suspect")
    rows = suspects.order_by("-state_changed_at", "hostname").values_list("hostname", "state", "rack", "state_reason")
    return suspects.count(), [FlaggedNode(*row) for row in rows[:limit]]


def node_xid_events(*, node: Node, limit: int = 5000) -> list[tuple[datetime, dict]]:
    """The node's latest gpu.xid events as (time, data), newest first: enough to fold recent storms whole."""
    rows = Event.objects.filter(node_name=node.hostname, type="gpu.xid").order_by("-time", "-id")
    return list(rows.values_list("time", "data")[:limit])


def _count_per_run(rows) -> Coalesce:
    """COUNT(*) of `rows` (a queryset with a `run` foreign key) for the outer query's run, as a subquery."""
    counted = rows.filter(run_id=OuterRef("pk")).order_by().values("run_id").annotate(n=Count("*")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def runs_list(*, state: str = "", first: int = 0, limit: int | None = None) -> list[Run]:
    """Runs newest first (not started yet at the top), rows [first, first + limit), each with its counts."""
    # Subqueries, not joins: joining attempts and interruptions together multiplies them (478 x 477 rows for a
    # 54-day run) before COUNT(DISTINCT) undoes it, ~0.6 s. The counts are computed for the rows of the page only.
    runs = Run.objects.select_related("cluster").annotate(
        attempt_count=_count_per_run(Attempt.objects.all()),
        interruption_count=_count_per_run(Interruption.objects.all()),
        unplanned_count=_count_per_run(Interruption.objects.filter(planned=False)),
    )
    if state:
        runs = runs.filter(state=state)
    # The id last: a page (a slice) must not swap runs started at the same instant.
    runs = runs.order_by(F("started_at").desc(nulls_first=True), "name", "id")
    return list(runs[first : None if limit is None else first + limit])


def runs_count(*, state: str = "") -> int:
    runs = Run.objects.all()
    return (runs.filter(state=state) if state else runs).count()


def attempts_latest(*, run: Run, limit: int = 20) -> list[Attempt]:
    """The run's latest attempts, each with node_count. The count is a subquery a row: a join and GROUP BY would
    count the nodes of every attempt before the limit (a 54-day run: 478 attempts of 2,048 nodes, ~1 s)."""
    nodes = Attempt.nodes.through.objects.filter(attempt_id=OuterRef("pk")).order_by().values("attempt_id")
    count = Subquery(nodes.annotate(n=Count("*")).values("n"), output_field=IntegerField())
    return list(run.attempts.annotate(node_count=Coalesce(count, 0)).order_by("-number")[:limit])


def events_pending_count() -> int:
    return Event.objects.filter(applied_at__isnull=True).count()


def events_quarantined_count() -> int:
    """Events that failed to apply on their own and are out of the record until replayed (the quarantine page)."""
    return Event.objects.filter(quarantined_at__isnull=False).count()


@dataclass(frozen=True)
class EventsAccepted:
    """Events accepted by type, counted up to event id `through` (retention's pruned ones in their rollups)."""

    through: int
    by_type: dict[str, int]


def events_accepted_get(*, since: EventsAccepted | None, settle_s: float, now: datetime) -> EventsAccepted:
    """Every event accepted, by type: `since`'s counts plus the events stored after its id that were received more
    than `settle_s` ago, or, without `since`, the whole log plus the rollups of what retention pruned.

    Counting on from the last count keeps each read to the newest events (a count of the whole log is seconds at
    millions of rows). Ids are taken in insert order but committed in any order, so the count stops short of the
    last `settle_s`: an intake transaction still open that long after its insert would be missed (one holds a batch
    for well under a second); none is counted twice."""
    cutoff = now - timedelta(seconds=settle_s)
    events = Event.objects.order_by()
    if since is None:
        through = events.filter(received_at__lte=cutoff).aggregate(last=Max("id"))["last"] or 0
        counts = dict(events.filter(id__lte=through).values_list("type").annotate(n=Count("id")))
        for type_, n in EventRollup.objects.order_by().values_list("type").annotate(n=Sum("count")):
            counts[type_] = counts.get(type_, 0) + n
        return EventsAccepted(through, counts)
    newer = events.filter(id__gt=since.through)
    through = newer.filter(received_at__lte=cutoff).aggregate(last=Max("id"))["last"] or since.through
    if through == since.through:
        return since
    counts = dict(since.by_type)
    for type_, n in newer.filter(id__lte=through).values_list("type").annotate(n=Count("id")):
        counts[type_] = counts.get(type_, 0) + n
    return EventsAccepted(through, counts)


@dataclass(frozen=True)
class EventsUnapplied:
    waiting: dict[str, int]  # by type: accepted, not applied yet
    quarantined: dict[str, int]  # by type: failed to apply, out of the record until replayed
    settled_waiting: dict[str, int]  # of the waiting, those with an id up to `through`
    settled_quarantined: dict[str, int]
    oldest_waiting_at: datetime | None  # when the oldest waiting one was received: the apply lag's start


def events_unapplied_get(*, through: int) -> EventsUnapplied:
    """The events not (yet) in the record, from the partial indexes that hold only them (a quarantined event is
    marked applied); the `settled_` counts are those with an id up to `through` (events_accepted_get's), so that
    accepted minus them is what was applied."""
    waiting, quarantined, settled = Q(applied_at__isnull=True), Q(quarantined_at__isnull=False), Q(id__lte=through)
    rows = (
        Event.objects.order_by()
        .filter(waiting | quarantined)
        .values_list("type")
        .annotate(
            waiting=Count("id", filter=waiting),
            quarantined=Count("id", filter=quarantined),
            settled_waiting=Count("id", filter=waiting & settled),
            settled_quarantined=Count("id", filter=quarantined & settled),
            oldest=Min("received_at", filter=waiting),
        )
    )
    by_type = {type_: counts for type_, *counts in rows}

    def column(index: int) -> dict[str, int]:
        return {type_: counts[index] for type_, counts in by_type.items() if counts[index]}

    oldest = min((counts[4] for counts in by_type.values() if counts[4] is not None), default=None)
    return EventsUnapplied(
        waiting=column(0),
        quarantined=column(1),
        settled_waiting=column(2),
        settled_quarantined=column(3),
        oldest_waiting_at=oldest,
    )


def node_recent_events(*, node: Node, limit: int = 50) -> list[Event]:
    return list(Event.objects.filter(node_name=node.hostname).order_by("-time", "-id")[:limit])


def interruptions_recent(*, limit: int = 10) -> list[Interruption]:
    return list(Interruption.objects.select_related("run", "node", "gpu").order_by("-fault_at")[:limit])


# --- Goodput and advice: rows fetched with values_list, the maths done by runs/domain ---


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


# --- What is computed from a run's record, kept in the cache until the record changes ---

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


def fleet_failure_rate_get(*, now: datetime, confidence: float = 0.90) -> advisor.RateEstimate | None:
    """Per-GPU failure rate from the whole record up to `now`: unexpected interruptions before it / GPU-hours run
    before it (None if no time). Both sides end at `now`: a report built as of a past moment counts neither the
    failures nor the hours after it."""
    gpu_hours = 0.0
    for gpus, started_at, ended_at in Run.objects.filter(started_at__lt=now).values_list(
        "gpu_count", "started_at", "ended_at"
    ):
        gpu_hours += gpus * (min(ended_at or now, now) - started_at).total_seconds() / 3600
    if gpu_hours <= 0:
        return None
    failures = Interruption.objects.filter(planned=False, fault_at__lt=now).count()
    return advisor.failure_rate(failures=failures, gpu_hours=gpu_hours, confidence=confidence)


@dataclass(frozen=True)
class AdviceInputs:
    """delta, M and R for one run, each with where it came from ('record', 'override' or None if unknown)."""

    delta_s: float | None
    mtbf_s: float | None
    restart_s: float | None
    current_s: float | None
    sources: dict[str, str | None]
    rate: advisor.RateEstimate | None
    mtbf_range_s: tuple[float, float] | None
    as_of: datetime | None = None  # M is the fleet's record up to this moment

    @property
    def missing(self) -> list[str]:
        return [name for name in ("delta_s", "mtbf_s", "restart_s") if getattr(self, name) is None]


def run_advice_inputs_get(
    *,
    run: Run,
    now: datetime,
    delta_s: float | None = None,
    mtbf_s: float | None = None,
    restart_s: float | None = None,
    version: str | None = None,
) -> AdviceInputs:
    """delta = the run's median blocking write; R = its median fault-to-training-again time; M = the fleet's
    per-GPU failure rate scaled to the run's GPUs. Any of them can be overridden.

    With the run's record `version` (run_record_version) the two medians come from the cache while it holds;
    M is the whole fleet's, up to `now`, and is computed each time (two small queries)."""
    measured = run_record_cached(run=run, version=version, part="advice", compute=lambda: _run_measured_costs(run))
    rate = fleet_failure_rate_get(now=now)
    measured_mtbf, mtbf_range = run_mtbf_s(run=run, rate=rate), None
    if measured_mtbf is not None:
        mtbf_range = advisor.job_mtbf_range_s(estimate=rate, gpus=run.gpu_count)
    values = {
        "delta_s": delta_s if delta_s is not None else measured[0],
        "mtbf_s": mtbf_s if mtbf_s is not None else measured_mtbf,
        "restart_s": restart_s if restart_s is not None else measured[1],
    }
    overrides = {"delta_s": delta_s, "mtbf_s": mtbf_s, "restart_s": restart_s}
    sources = {
        name: ("override" if overrides[name] is not None else "record" if value is not None else None)
        for name, value in values.items()
    }
    return AdviceInputs(
        **values,
        current_s=run.checkpoint_interval_s,
        sources=sources,
        rate=rate,
        mtbf_range_s=mtbf_range,
        as_of=now,
    )


def tier_measure(timeline: goodput.RunTimeline) -> tuple[tiers.TierRecord, float | None]:
    """What the two-tier plan reads of a run's record: its tiers, and its median reload (a restart to training)."""
    reloads = levers.reload_times(timeline)
    return tiers.measured(timeline), (statistics.median(reloads) if reloads else None)


def run_tier_advice_get(
    *, run: Run, delta_s: float, mtbf_s: float, restart_s: float, version: str | None = None,
    measured: tuple[tiers.TierRecord, float | None] | None = None, **overrides,
) -> tiers.TierAdvice | None:  # fmt: skip
    """The two-tier plan for the run: its record's tiers (`measured`, tier_measure of a timeline in hand, else kept
    under its record version) with the advice's delta, M and R where the record has none of its own. One source for
    the run page and the advice API; None without M."""
    if not mtbf_s or not math.isfinite(mtbf_s) or not delta_s:
        return None
    if measured is None:
        measured = run_record_cached(
            run=run, version=version, part="tiers", compute=lambda: tier_measure(run_timeline_get(run=run))
        )
    record, reload_s = measured
    return tiers.advise(
        record, delta_s=delta_s, restart_s=restart_s or 0.0, reload_s=reload_s, mtbf_s=mtbf_s, **overrides
    )


# The sizes the advisor projects a job to: up to Meta's 131,072-GPU projection (16,384 nodes of 8).
SCALE_GPUS = (1024, 4096, 16_384, 32_768, 65_536, 131_072)


def advice_at_scale(advice: advisor.Advice, *, gpus: int) -> list[advisor.ScalePoint]:
    """The advised job at other sizes (SCALE_GPUS and its own), at the per-GPU failure rate its M implies and its own
    blocking write and restart cost: the run page's and the advice API's projection."""
    if not gpus or not math.isfinite(advice.mtbf_s):
        return []
    rate_per_gpu_hour = 3600 / (advice.mtbf_s * gpus)
    sizes = sorted({*SCALE_GPUS, gpus})
    return advisor.at_scale(
        gpus=sizes,
        failures_per_node_day=advisor.per_node_day(rate_per_gpu_hour),
        delta_s=advice.delta_s,
        restart_s=advice.restart_s,
    )


def run_mtbf_s(*, run: Run, rate: advisor.RateEstimate | None) -> float | None:
    """The run's job MTBF M: the fleet's per-GPU failure rate (fleet_failure_rate_get) scaled to its GPUs; None before
    the fleet has failed once. The advisor's M and /metrics' fleetops_job_mtbf_seconds."""
    if rate is None or not rate.failures or not run.gpu_count:
        return None
    # At least the advisor's resolution: 2^31 - 1 GPUs at a high fleet rate would fail more often than that.
    return max(advisor.job_mtbf_s(rate_per_gpu_hour=rate.rate, gpus=run.gpu_count), advisor.MIN_COST_S)


@dataclass(frozen=True)
class RunLevers:
    """The run's levers (runs.domain.levers) over its whole record up to `until`, with the targets they were taken at
    and where each target came from ('record', 'setting' or 'override')."""

    report: levers.LeverReport
    targets: levers.Targets
    sources: dict[str, str]
    since: datetime
    until: datetime
    mtbf_s: float | None
    usd_per_gpu_hour: float


def run_levers_get(*, run: Run, now: datetime, version: str | None = None, **overrides) -> RunLevers | None:
    """What each fix would give back to the run: one source for the run page, the API and the weekly report. None for
    a run that never started. `overrides`: any of levers.Targets' fields. M (for the advised interval) is the
    advisor's (run_mtbf_s). An ended run's answer is kept under its record version and M while no target is
    overridden; a running run's grows with `now` and is computed each time."""
    if run.started_at is None:
        return None
    mtbf_s = run_mtbf_s(run=run, rate=fleet_failure_rate_get(now=now))
    usd = settings.GPU_HOUR_COST_USD

    def compute() -> RunLevers:
        timeline = run_timeline_get(run=run)
        found = levers.default_targets(
            timeline,
            detection_s=settings.LEVER_DETECTION_TARGET_S,
            async_blocking_s=settings.LEVER_ASYNC_BLOCKING_S,
            mtbf_s=mtbf_s,
        )
        given = {name: value for name, value in overrides.items() if value is not None}
        targets = dataclasses.replace(found, **given)
        setting = {"detection_s", "blocking_s"}
        sources = {
            f.name: "override" if f.name in given else "setting" if f.name in setting else "record"
            for f in dataclasses.fields(targets)
        }
        report = levers.levers(timeline, now=now, targets=targets, mtbf_s=mtbf_s, usd_per_gpu_hour=usd)
        return RunLevers(report, targets, sources, run.started_at, timeline.end(now), mtbf_s, usd)

    if version is None or run.ended_at is None or any(value is not None for value in overrides.values()):
        return compute()
    key = f"fleetops:run:levers:{version}:{mtbf_s and round(mtbf_s, 1)}:{usd}"
    return cache.get_or_set(key, compute, RECORD_CACHE_S)


def run_restart_s_get(*, run: Run) -> float | None:
    """The run's median fault-to-training-again time in seconds, the advisor's R (None before any restart)."""
    return _run_measured_costs(run)[1]


def _run_measured_costs(run: Run) -> tuple[float | None, float | None]:
    """The run's median blocking write and median fault-to-training-again time, in seconds (None if unmeasured)."""
    # Unordered: medians need no order, and the models' default ordering joins the run to sort by it.
    blocking = run.checkpoints.filter(blocking_s__isnull=False).order_by().values_list("blocking_s", flat=True)
    restarts = [
        (resumed - fault).total_seconds()
        for fault, resumed in run.interruptions.filter(planned=False, resumed_at__isnull=False)
        .order_by()
        .values_list("fault_at", "resumed_at")
    ]
    return advisor.write_cost_s(blocking), advisor.restart_cost_s(restarts)


# --- Checkpoint I/O: what the run's writes look like, and the write designs priced for its cluster ---

CLUSTER_LOAD_WINDOW = timedelta(hours=24)
_HOPS = {"gpu_host": "CHECKPOINT_GPU_HOST_GB_S", "nvme": "CHECKPOINT_NVME_GB_S", "storage": "CHECKPOINT_STORAGE_GB_S",
         "peer": "CHECKPOINT_PEER_GB_S"}  # fmt: skip


@dataclass(frozen=True)
class RunCheckpointIO:
    """The run's checkpoint I/O (runs.domain.checkpoint_io): its writes measured over its whole record (`since` to
    `until`), and the designs priced for its state size, its ranks and its cluster's hops at the advisor's M and R
    (`pricing`: None, and `missing` says why, without a state size or an M). `sources` says where each input came
    from ('record', 'cluster', 'setting', 'override'); `others_gb_s` is what the cluster's other runs wrote to shared
    storage over the CLUSTER_LOAD_WINDOW up to `as_of`."""

    record: checkpoint_io.RecordIO
    pricing: checkpoint_io.Pricing | None
    today: tuple[float, float, float] | None
    warnings: tuple[checkpoint_io.Note, ...]
    sources: dict[str, str | None]
    missing: list[str]
    others_gb_s: float
    since: datetime | None
    until: datetime | None
    as_of: datetime
    target: float


def run_checkpoint_io_get(
    *, run: Run, now: datetime, inputs: AdviceInputs | None = None, version: str | None = None,
    state_bytes: float | None = None, target: float | None = None, **hop_overrides: float | None,
) -> RunCheckpointIO:  # fmt: skip
    """One source for the run page, the API and the weekly report. The writes are read in one query (kept under the
    record `version`), the run's nodes a second (GPUs a node), the cluster's storage load a third; `inputs` are the
    advice inputs in hand (M, R), else read. `hop_overrides`: gpu_host, nvme, storage, peer in GB/s."""
    record = run_record_cached(run=run, version=version, part="checkpoint-io", compute=lambda: _checkpoint_io(run))
    if inputs is None:
        inputs = run_advice_inputs_get(run=run, now=now, version=version)
    cluster = run.cluster
    hops, sources = {}, {}
    for hop, setting in _HOPS.items():
        given, own = hop_overrides.get(hop), getattr(cluster, f"{hop}_gb_s", None) if cluster else None
        hops[hop] = given or own or getattr(settings, setting)
        sources[hop] = "override" if given else "cluster" if own else "setting"
    restart_s = inputs.restart_s if inputs.restart_s is not None else settings.RESTART_S_DEFAULT
    sources.update(
        state_bytes="override" if state_bytes else "record" if record.bytes else None,
        mtbf_s=inputs.sources.get("mtbf_s"),
        restart_s=inputs.sources.get("restart_s") or "setting",
    )
    state = state_bytes or record.bytes
    missing = [name for name, value in (("state_bytes", state), ("mtbf_s", inputs.mtbf_s)) if not value]
    if not run.gpu_count:
        missing.append("ranks")
    others = _cluster_storage_load_gb_s(run=run, now=now)
    target = target or settings.CHECKPOINT_TARGET_OVERHEAD
    pricing, today, warnings = None, None, record.warnings
    if not missing:
        nodes = Attempt.sizing_node_count(run)
        per_node = max(math.ceil(run.gpu_count / nodes), 1) if nodes else advisor.GPUS_PER_NODE
        pricing = checkpoint_io.price(
            state_bytes=state,
            ranks=run.gpu_count,
            gpus_per_node=per_node,
            hops=checkpoint_io.Hops(**hops, sources={hop: sources[hop] for hop in _HOPS}),
            mtbf_s=inputs.mtbf_s,
            restart_s=restart_s,
            target=target,
        )
        today = checkpoint_io.today(record, mtbf_s=inputs.mtbf_s, restart_s=restart_s)
        warnings += checkpoint_io.storage_notes(pricing, others_gb_s=others)
        warnings += checkpoint_io.model_notes(record, pricing)
    times = [write.at for write in record.writes]
    return RunCheckpointIO(
        record, pricing, today, warnings, sources, missing, others, min(times, default=None),
        max(times, default=None), now, target,
    )  # fmt: skip


def _checkpoint_io(run: Run) -> checkpoint_io.RecordIO:
    rows = run.checkpoints.order_by().values_list(
        "step", "status", "tier", "started_at", "completed_at", "durable_at", "blocking_s", "bytes"
    )
    writes = [checkpoint_io.WriteRow(*row) for row in rows]
    return checkpoint_io.measure(writes, ranks=run.gpu_count, interval_s=run.checkpoint_interval_s)


def _cluster_storage_load_gb_s(*, run: Run, now: datetime) -> float:
    """GB/s the cluster's other runs wrote to shared storage over the last CLUSTER_LOAD_WINDOW: the bytes of their
    writes made durable in it (a memory or local copy never reaches shared storage), over its length. One query."""
    if run.cluster_id is None:
        return 0.0
    written = (
        Checkpoint.objects.filter(
            run__cluster_id=run.cluster_id, durable_at__gte=now - CLUSTER_LOAD_WINDOW, durable_at__lt=now
        )
        .exclude(run_id=run.pk)
        .aggregate(total=Sum("bytes"))["total"]
    )
    return (written or 0) / CLUSTER_LOAD_WINDOW.total_seconds() / checkpoint_io.GB


@dataclass(frozen=True)
class DailySamples:
    """A node's raw samples of one type on one UTC day, summed by retention (runs.retention) before deletion."""

    day: date
    type: str
    count: int
    value_min: float | None
    value_mean: float | None
    value_max: float | None


def node_rollups_get(*, node: Node, days: int = 30) -> list[DailySamples]:
    """The node's rolled-up samples of its latest `days` rolled days, newest first, its GPUs and ranks together."""
    rows = (
        EventRollup.objects.filter(node_name=node.hostname)
        .values_list("day", "type")
        .annotate(Sum("count"), Min("value_min"), Sum("value_sum"), Max("value_max"))
        .order_by("-day", "type")
    )
    kept = sorted({row[0] for row in rows}, reverse=True)[:days]
    return [
        DailySamples(day, type_, n, low, total / n if low is not None and n else None, high)
        for day, type_, n, low, total, high in rows
        if day in kept
    ]


def event_clusters(events: list[CloudEvent]) -> tuple[dict[str, str], dict[str, str]]:
    """The cluster of each node and run the events name: the record's where it knows one, else the events' own
    data.cluster (runs.domain.trust.out_of_bounds reads these)."""
    nodes, runs = trust.clusters_named(events)
    hostnames = {e.data["node"] for e in events if isinstance(e.data.get("node"), str)}
    run_names = {e.data["run"] for e in events if isinstance(e.data.get("run"), str)}
    nodes.update(
        Node.objects.filter(hostname__in=hostnames, cluster__isnull=False).values_list("hostname", "cluster__name")
    )
    runs.update(Run.objects.filter(name__in=run_names, cluster__isnull=False).values_list("name", "cluster__name"))
    return nodes, runs


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
    started, restores, failures, told = None, [], [], []
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


def runs_gpus_capped(runs) -> list[Run]:
    """The runs that claim more GPUs than their nodes hold, each counted at what its nodes hold (the fleet's note)."""
    return [run for run in runs if run.gpus_claimed is not None and run.gpus_claimed > run.gpu_count]
