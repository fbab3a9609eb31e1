"""Retention of the event log: raw high-rate samples are summed per series and UTC day, then deleted.

Why not PostgreSQL partitioning of runs_event by time: the intake's dedup is a global unique (source, event_id)
(INSERT ... ON CONFLICT DO NOTHING), and PostgreSQL requires the partition key in every unique index of a
partitioned table, so partitioning by time would only dedupe within a partition. docs/PERFORMANCE.md says more,
and what one would do at ten times the volume.

What is pruned: rank.step_time, rank.grad_norm, gpu.health and node.heartbeat events received longer ago than their
type's retention age (so they happened that long ago too), once applied and seen by the detectors. Rank samples have
an age of their own (`rank_older_than`, EVENTS_RANK_RETENTION_HOURS: hours, for a big fleet where they are most of the
stream); heartbeats and health keep the raw age (`older_than`, EVENTS_RAW_RETENTION_DAYS: a day at least), and so do
rank samples unless given their own. Everything else is the record's source of truth and stays:
run_lifecycle_rebuild re-reads run.*, and checkpoint.*, gpu.xid, gpu.ecc, node.state, run.step and healthcheck.result
feed the record or the pages. The newest heartbeat of each node and the newest health sample of each GPU stay
whatever their age (the record's Node.last_heartbeat_at and GPU.health_at tell which those are), so that
`manage.py rebuild_record` still finds them and the health detector still has a previous reading to compare with.
The detectors read only the last minutes of rank samples (stragglers: STRAGGLER_WINDOW_S x STRAGGLER_CONSECUTIVE;
SDC: the last steps): a rank age under an hour or the stragglers' span is refused (runs.domain.retention, here and
in the settings alike).

Safe while ingest goes on and safe to run twice: each batch locks its rows (SKIP LOCKED), adds them to their
rollups and deletes them in one transaction, so a row is counted once or, after a crash, not at all and still
there. A batch is one range of ids holding `batch_size` stored rows: a transaction never deletes more than that.
The walk ends at the later of the two cutoffs, so that it reaches every row eligible under either, and each row is
checked against its own type's cutoff. Where the rank age is the shorter, each run therefore also reads the rows
received between the two cutoffs, of which only the rank samples can go: the walk's cost follows the raw age.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, IntegerField, OuterRef, Q
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from runs.domain.retention import rank_age_check
from runs.models import GPU, Event, EventRollup, Node

# type -> the data field whose value is summarised (None: counted only)
VALUE_FIELDS: dict[str, str | None] = {
    "rank.step_time": "seconds",
    "rank.grad_norm": "value",
    "gpu.health": "temperature_c",
    "node.heartbeat": None,
}
RAW_TYPES = tuple(VALUE_FIELDS)
RANK_TYPES = ("rank.step_time", "rank.grad_norm")


@dataclass
class Rollup:
    """Running sums of one series on one UTC day; times are UTC datetimes, values as VALUE_FIELDS names them."""

    count: int
    value_min: float | None
    value_max: float | None
    value_sum: float
    first_at: datetime
    last_at: datetime


# (type, day, run_name, node_name, gpu, rank): EventRollup's unique key
Key = tuple[str, date, str, str, int, int]


def rollups_fold(rows: Iterable[tuple[str, str, str, datetime, dict]]) -> dict[Key, Rollup]:
    """Sum raw events given as (type, run_name, node_name, time, data) into one Rollup per series and UTC day.

    Pure: no database. Types not in VALUE_FIELDS are refused (ValueError): they are never pruned.
    """
    folded: dict[Key, Rollup] = {}
    for type_, run_name, node_name, time, data in rows:
        if type_ not in VALUE_FIELDS:
            raise ValueError(f"{type_} events are not rolled up")
        field = VALUE_FIELDS[type_]
        value = float(data[field]) if field else None
        gpu = int(data["gpu"]) if type_ == "gpu.health" else -1
        rank = int(data["rank"]) if type_ in RANK_TYPES else -1
        key = (type_, time.astimezone(UTC).date(), run_name, node_name, gpu, rank)
        acc = folded.get(key)
        if acc is None:
            folded[key] = Rollup(1, value, value, value or 0.0, time, time)
            continue
        acc.count += 1
        if value is not None:
            acc.value_min = value if acc.value_min is None else min(acc.value_min, value)
            acc.value_max = value if acc.value_max is None else max(acc.value_max, value)
            acc.value_sum += value
        acc.first_at, acc.last_at = min(acc.first_at, time), max(acc.last_at, time)
    return folded


def rank_hours_own() -> int | None:
    """EVENTS_RANK_RETENTION_HOURS where it gives rank samples an age of their own; None where they keep the raw age
    (EVENTS_RAW_RETENTION_DAYS x 24, its default)."""
    hours = settings.EVENTS_RANK_RETENTION_HOURS
    return None if hours == settings.EVENTS_RAW_RETENTION_DAYS * 24 else hours


@dataclass(frozen=True)
class PruneResult:
    deleted: int  # raw events summed into rollups and deleted
    batches: int  # transactions that deleted something
    rollups: int  # rollup rows written to (created or added to)


def events_prune(
    *,
    now: datetime,
    older_than: timedelta,
    rank_older_than: timedelta | None = None,
    batch_size: int = 10_000,
    max_batches: int | None = None,
) -> PruneResult:
    """Roll up and delete raw high-rate events older than `older_than` at `now`, rank samples older than
    `rank_older_than` (None: `older_than` too); see the module docstring.

    Walks the ids from the oldest up, `batch_size` stored rows (of any type) a transaction; `max_batches` bounds
    one call (the next call goes on where the rows still are).
    """
    rank_older_than = older_than if rank_older_than is None else rank_older_than
    if older_than < timedelta(days=1):
        raise ValueError("older_than must be at least a day: the detectors read the last hours of samples")
    rank_age_check(
        rank_older_than,
        straggler_window_s=settings.STRAGGLER_WINDOW_S,
        straggler_consecutive=settings.STRAGGLER_CONSECUTIVE,
    )
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    cutoff, rank_cutoff = now - older_than, now - rank_older_than
    low = Event.objects.order_by("id").values_list("id", flat=True).first()
    if low is None:
        return PruneResult(0, 0, 0)
    stop = _first_received_since(max(cutoff, rank_cutoff), low)
    deleted = batches = rollups = walked = 0
    while low < stop and (max_batches is None or walked < max_batches):
        # The range holds `batch_size` stored rows: the cost follows the rows left, not the span of ids deleted.
        high = (
            (
                Event.objects.filter(id__gte=low, id__lt=stop).order_by("id").values_list("id", flat=True)[batch_size:]
            ).first()
            or stop
        )
        n, r = _prune_range(low, high, cutoff=cutoff, rank_cutoff=rank_cutoff)
        deleted, rollups, batches, walked = deleted + n, rollups + r, batches + (1 if n else 0), walked + 1
        low = high
    return PruneResult(deleted, batches, rollups)


def _first_received_since(cutoff: datetime, low: int) -> int:
    """The first id received at or after `cutoff` (or one past the last id): the walk's end.

    Ids grow with arrival, so a binary search over ids finds it in about 30 index lookups, where a scan for it
    would read every row older than the cutoff. Concurrent intake transactions may interleave ids by a few
    seconds: such an event waits for the next run (every row is checked against the cutoff anyway).
    """
    high = Event.objects.order_by("-id").values_list("id", flat=True).first() + 1
    while low < high:  # every row at or after `high` was received since the cutoff; the rows before `low` earlier
        middle = (low + high) // 2
        row = Event.objects.filter(id__gte=middle, id__lt=high).order_by("id").values_list("id", "received_at").first()
        if row is None or row[1] >= cutoff:
            high = middle
        else:
            low = row[0] + 1
    return high


def _eligible(*, cutoff: datetime, rank_cutoff: datetime) -> Q:
    # A series' newest heartbeat or health sample stays (module docstring). The record already knows each node's
    # newest heartbeat and each GPU's newest health time (both folded from applied events, newest wins), so "a
    # newer one exists" is one lookup in those small tables rather than a search of the event log.
    newer_heartbeat = Node.objects.filter(hostname=OuterRef("node_name"), last_heartbeat_at__gt=OuterRef("time"))
    newer_health = GPU.objects.filter(
        node__hostname=OuterRef("node_name"), index=OuterRef("gpu_index"), health_at__gt=OuterRef("time")
    )
    return (
        # Received before its type's cutoff, hence happened before it too (the intake never stores a time ahead of its
        # receipt). No condition on time itself: the planner would AND a scan of the (run_name, type, time) index.
        Q(applied_at__isnull=False, detected_at__isnull=False)
        & Q(error="")
        & (
            Q(type__in=RANK_TYPES, received_at__lt=rank_cutoff)
            | (Q(type="node.heartbeat", received_at__lt=cutoff) & Exists(newer_heartbeat))
            | (Q(type="gpu.health", received_at__lt=cutoff) & Exists(newer_health))
        )
    )


def _prune_range(low: int, high: int, *, cutoff: datetime, rank_cutoff: datetime) -> tuple[int, int]:
    """One transaction: lock the eligible events with low <= id < high, add them to their rollups, delete them."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # The planner's estimate for the batch (the id range over a big table) crosses jit_above_cost, and
            # compiling the plan took 110 of its 185 ms in docs/PERFORMANCE.md's EXPLAIN: nothing to gain here.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")
        rows = list(
            Event.objects.select_for_update(skip_locked=True)
            .annotate(gpu_index=Cast(KT("data__gpu"), IntegerField()))
            .filter(_eligible(cutoff=cutoff, rank_cutoff=rank_cutoff), id__gte=low, id__lt=high)
            .order_by("id")
            .values_list("id", "type", "run_name", "node_name", "time", "data")
        )
        if not rows:
            return 0, 0
        folded = rollups_fold(row[1:] for row in rows)
        _rollups_add(folded)
        _events_delete([row[0] for row in rows])
    return len(rows), len(folded)


def _events_delete(ids: list[int]) -> None:
    if connection.vendor == "postgresql":
        # One array parameter, bound server-side: Django would quote and splice 10,000 ids into the statement.
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(f"DELETE FROM {Event._meta.db_table} WHERE id = ANY(%s)", [ids])
    else:
        Event.objects.filter(pk__in=ids).delete()


def _rollups_add(folded: dict[Key, Rollup]) -> None:
    """Add sums to their rollup rows, creating missing ones.

    Raw SQL because the ORM's bulk_create(update_conflicts=True) can only overwrite a column, not add to it.
    ON CONFLICT ... DO UPDATE is PostgreSQL's and SQLite's (3.24+) alike; only LEAST/GREATEST are MIN/MAX there.
    """
    table = EventRollup._meta.db_table
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    columns = 'type, day, run_name, node_name, gpu, "rank", count, value_min, value_max, value_sum, first_at, last_at'
    update = (
        f'ON CONFLICT (type, day, run_name, node_name, gpu, "rank") DO UPDATE SET '
        f"count = {table}.count + excluded.count, "
        f"value_min = {least}(COALESCE({table}.value_min, excluded.value_min), "
        f"COALESCE(excluded.value_min, {table}.value_min)), "
        f"value_max = {greatest}(COALESCE({table}.value_max, excluded.value_max), "
        f"COALESCE(excluded.value_max, {table}.value_max)), "
        f"value_sum = {table}.value_sum + excluded.value_sum, "
        f"first_at = {least}({table}.first_at, excluded.first_at), "
        f"last_at = {greatest}({table}.last_at, excluded.last_at)"
    )
    # One order for every worker: two prunes never wait on each other's rollup rows in opposite orders.
    items = sorted(folded.items())
    if connection.vendor == "postgresql":
        # One statement for the batch, its columns as arrays bound server-side: a statement a rollup row would cost
        # more than the rest of the batch.
        rows = [(*key, a.count, a.value_min, a.value_max, a.value_sum, a.first_at, a.last_at) for key, a in items]
        arrays = [list(column) for column in zip(*rows, strict=True)]
        types = ("text", "date", "text", "text", "int2", "int4", "int8", "float8", "float8", "float8")
        types += ("timestamptz", "timestamptz")
        unnest = ", ".join(f"%s::{name}[]" for name in types)
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({unnest}) {update}", arrays)
        return
    ops = connection.ops
    rows = [
        (
            key[0],
            ops.adapt_datefield_value(key[1]),
            *key[2:],
            a.count,
            a.value_min,
            a.value_max,
            a.value_sum,
            ops.adapt_datetimefield_value(a.first_at),
            ops.adapt_datetimefield_value(a.last_at),
        )
        for key, a in items
    ]
    values = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES {values} {update}", rows)
