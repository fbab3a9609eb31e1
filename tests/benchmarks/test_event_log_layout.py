"""docs/DEPLOY.md's steps 2 and 3, measured before either is built. Step 3: the event log partitioned by the hour it
was received in, with the dedupe key kept in a table of its own, against the log as it is (one table,
`(source, event_id)` unique).

Both layouts are made here, in a scratch schema, from the real table (`LIKE runs_event`: its columns, and its
indexes on both), and both are filled with the same rows of the 131,072-GPU stream (runs.domain.telemetry,
AT_SCALE: rank samples, heartbeats, ECC and health readings) in batches of BATCH, by the intake's own statement
(runs.services._insert_postgresql: json_to_recordset, ON CONFLICT DO NOTHING). HOURS partitions are filled, each
with SECONDS_AN_HOUR seconds of the stream stamped as received across that hour: the layouts' growth, not an hour's
real volume (13.8 million rows).

Measured:
1. Insert: events a second into each, batch by batch alternately, over all batches and over the last hour's.
2. Dedupe: the last hour's first batches sent again, and an hour-0 batch sent again as received in the last hour (a
   client's spool emptied hours later: the case that makes a per-partition unique key not enough). Both must be
   skipped by both layouts: asserted.
3. Retention of the oldest hour: today's DELETE and the VACUUM that gives its space back, against a partition
   dropped (and the dedupe table's rows of that hour deleted, which in a deployment waits for the spool's age).
4. Bytes a row, tables and indexes.

Step 2: the rank samples alone (63% of the stream), into a narrow table of their own partitioned by hour, keyed by
(run, type, rank, step) within the hour, against the same samples into today's log: insert, bytes a row, and an
hour's retention.

What neither can show on this machine: the point where the global unique index outgrows memory and each insert's
check reads the disk (docs/DEPLOY.md puts it within hours at a million GPUs); the filled tables here are a few GB.

Nothing is asserted of the speeds: they are this machine's, reported beside today's layout measured in the same run.
"""

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg
from django.db import connection

from runs.domain.simulator import frontier_config
from runs.domain.telemetry import AT_SCALE, telemetry

from .conftest import report, say

CONFIG = frontier_config()
HOURS = int(os.environ.get("BENCH_LAYOUT_HOURS", "6"))
SECONDS_AN_HOUR = int(os.environ.get("BENCH_LAYOUT_SECONDS_AN_HOUR", "40"))  # of the stream: 3,823 events a second
BATCH = 1_000
RESENT_BATCHES = 20
SCHEMA = "layout_bench"
COLUMNS = (
    "source, event_id, type, subject, time, received_at, data, run_name, node_name, skew_s, token_id, applied_at, "
    "detected_at, turn, error"
)
# The intake's statement (runs.services._insert_postgresql), into either layout.
_BATCH = """json_to_recordset(%(batch)s::json)
    AS batch(s text, i text, t text, u text, w timestamptz, d jsonb, r text, n text, k float8, a timestamptz)"""
TODAY = f"""
    INSERT INTO {SCHEMA}.log ({COLUMNS})
    SELECT s, i, t, u, w, %(received)s, d, r, n, k, NULL, a, a, 0, '' FROM {_BATCH}
    ON CONFLICT (source, event_id) DO NOTHING RETURNING id"""
# Step 3: the key is claimed in the dedupe table first; only the events whose key was new go into the log.
PARTITIONED = f"""
    WITH batch AS (SELECT DISTINCT ON (s, i) * FROM {_BATCH}),
    new AS (
        INSERT INTO {SCHEMA}.dedupe (source, event_id, received_at) SELECT s, i, %(received)s FROM batch
        ON CONFLICT DO NOTHING RETURNING source, event_id)
    INSERT INTO {SCHEMA}.plog ({COLUMNS})
    SELECT s, i, t, u, w, %(received)s, d, r, n, k, NULL, a, a, 0, ''
    FROM batch JOIN new ON new.source = batch.s AND new.event_id = batch.i
    RETURNING id"""


def _layouts(cursor, start) -> None:
    """Today's log (LIKE runs_event INCLUDING ALL: its unique key and every index), and step 3's: the same columns
    partitioned by received_at, an hour a partition, with every index but the unique key, and the dedupe table."""
    cursor.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}")
    cursor.execute(f"CREATE TABLE {SCHEMA}.log (LIKE runs_event INCLUDING ALL)")
    # PostgreSQL before 17 has no identity column on a partitioned table: a sequence of its own instead.
    cursor.execute(f"CREATE TABLE {SCHEMA}.plog (LIKE runs_event INCLUDING DEFAULTS) PARTITION BY RANGE (received_at)")
    cursor.execute(f"CREATE SEQUENCE {SCHEMA}.plog_id OWNED BY {SCHEMA}.plog.id")
    cursor.execute(f"ALTER TABLE {SCHEMA}.plog ALTER id SET DEFAULT nextval('{SCHEMA}.plog_id')")
    cursor.execute(f"ALTER TABLE {SCHEMA}.plog ADD PRIMARY KEY (id, received_at)")
    cursor.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'runs_event'::regclass AND NOT indisunique"
    )
    for (definition,) in cursor.fetchall():
        name, rest = definition.split(" ON ", 1)
        cursor.execute(f"{name.replace('INDEX ', 'INDEX p_')} ON {rest.replace('public.runs_event', f'{SCHEMA}.plog')}")
    _hourly(cursor, "plog", start)
    cursor.execute(
        f"CREATE TABLE {SCHEMA}.dedupe (source varchar(1000), event_id varchar(1000), "
        "received_at timestamptz NOT NULL, PRIMARY KEY (source, event_id))"
    )
    cursor.execute(f"CREATE INDEX ON {SCHEMA}.dedupe (received_at)")


def _hourly(cursor, table: str, start) -> None:
    """HOURS partitions of `table`, `table`_0 for the first hour from `start` and on."""
    for hour in range(HOURS):
        cursor.execute(
            f"CREATE TABLE {SCHEMA}.{table}_{hour} PARTITION OF {SCHEMA}.{table} FOR VALUES FROM (%s) TO (%s)",
            [start + timedelta(hours=hour), start + timedelta(hours=hour + 1)],
        )


@contextmanager
def _scratch() -> Iterator:
    """A cursor (autocommit) on the benchmark database with both layouts made in the scratch schema, dropped after."""
    connection.ensure_connection()
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as db, db.cursor() as cursor:
        _layouts(cursor, CONFIG.start)
        try:
            yield cursor
        finally:
            cursor.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def _rows(events: list[dict]) -> str:
    """The batch as the intake sends it to PostgreSQL (runs.services._insert_postgresql's keys)."""
    rows = []
    for e in events:
        data = e["data"]
        done = e["time"] if e["type"] in ("rank.step_time", "rank.grad_norm") else None
        rows.append(
            {
                "s": e["source"],
                "i": e["id"],
                "t": e["type"],
                "u": e.get("subject", ""),
                "w": e["time"],
                "d": data,
                "r": str(data.get("run", "")),
                "n": str(data.get("node", "")),
                "k": None,
                "a": done,
            }
        )
    return json.dumps(rows)


def _batches(hour: int, types: frozenset[str] | None = None) -> list[str]:
    events = [
        e
        for e in telemetry(CONFIG, AT_SCALE, start_s=hour * SECONDS_AN_HOUR, seconds=SECONDS_AN_HOUR)
        if types is None or e["type"] in types
    ]
    return [_rows(events[i : i + BATCH]) for i in range(0, len(events), BATCH)]


def _insert(cursor, statement: str, batch: str, received) -> tuple[int, float]:
    started = time.perf_counter()
    cursor.execute(statement, {"batch": batch, "received": received})
    stored = len(cursor.fetchall())
    return stored, time.perf_counter() - started


def _size(cursor, tables: list[str]) -> int:
    total = 0
    for table in tables:
        cursor.execute("SELECT pg_total_relation_size(%s)", [f"{SCHEMA}.{table}"])
        total += cursor.fetchone()[0]
    return total


def _timed(cursor, statement: str) -> float:
    started = time.perf_counter()
    cursor.execute(statement)
    return time.perf_counter() - started


@dataclass
class Filled:
    """What filling HOURS hours into each layout took: seconds per layout, in all and in the last hour."""

    spent: dict[str, float]
    last_hour: dict[str, float]
    rows: int = 0  # into each layout
    last_rows: int = 0
    first_batches: list[str] = field(default_factory=list)  # hour 0's first RESENT_BATCHES


def _fill(cursor, statements: dict[str, str], what: str, types: frozenset[str] | None = None) -> Filled:
    """The same batches into each layout in turn, each batch stamped as received at its place in its hour."""
    filled = Filled(spent=dict.fromkeys(statements, 0.0), last_hour=dict.fromkeys(statements, 0.0))
    for hour in range(HOURS):
        batches = _batches(hour, types)
        filled.first_batches = filled.first_batches or batches[:RESENT_BATCHES]
        step = timedelta(hours=1) / len(batches)
        for n, batch in enumerate(batches):
            received = CONFIG.start + timedelta(hours=hour) + n * step
            for name, statement in statements.items():
                stored, seconds = _insert(cursor, statement, batch, received)
                assert stored == len(json.loads(batch)), (name, hour, n, stored)
                filled.spent[name] += seconds
                if hour == HOURS - 1:
                    filled.last_hour[name] += seconds
            filled.rows += stored
            filled.last_rows += stored if hour == HOURS - 1 else 0
        say(f"{what}: hour {hour + 1} of {HOURS}, {filled.rows:,} rows in each")
    return filled


def test_the_event_log_partitioned_by_hour_with_a_dedupe_table(bench_database):
    start = CONFIG.start
    with _scratch() as cursor:
        filled = _fill(cursor, {"today": TODAY, "partitioned": PARTITIONED}, "event log layouts")
        spent, last_hour, rows, last_rows = filled.spent, filled.last_hour, filled.rows, filled.last_rows
        first_batches = filled.first_batches
        cursor.execute(f"ANALYZE {SCHEMA}.log; ANALYZE {SCHEMA}.plog; ANALYZE {SCHEMA}.dedupe")

        # Sent again: in the same hour (a retry), and hours later (a spool emptied): both layouts skip them all.
        later = start + timedelta(hours=HOURS - 1, minutes=59)
        resent = {"today": 0.0, "partitioned": 0.0}
        again = [*_batches(HOURS - 1)[:RESENT_BATCHES], *first_batches]
        resent_count = sum(len(json.loads(batch)) for batch in again)
        for batch in again:
            for name, statement in (("today", TODAY), ("partitioned", PARTITIONED)):
                stored, seconds = _insert(cursor, statement, batch, later)
                assert stored == 0, f"{name}: {stored} events stored twice"
                resent[name] += seconds

        size_today = _size(cursor, ["log"])
        size_parts = _size(cursor, [f"plog_{hour}" for hour in range(HOURS)])
        size_dedupe = _size(cursor, ["dedupe"])

        # Retention of the oldest hour.
        cutoff = start + timedelta(hours=1)
        delete_s = _timed(cursor, f"DELETE FROM {SCHEMA}.log WHERE received_at < '{cutoff.isoformat()}'")
        vacuum_s = _timed(cursor, f"VACUUM {SCHEMA}.log")
        drop_s = _timed(cursor, f"DROP TABLE {SCHEMA}.plog_0")
        dedupe_s = _timed(cursor, f"DELETE FROM {SCHEMA}.dedupe WHERE received_at < '{cutoff.isoformat()}'")
        dedupe_vacuum_s = _timed(cursor, f"VACUUM {SCHEMA}.dedupe")

    hour_rows = rows // HOURS
    rate = {name: rows / s for name, s in spent.items()}
    last = {name: last_rows / s for name, s in last_hour.items()}
    report(
        "event log partitioned by hour + dedupe table: insert events/s",
        f"{rate['partitioned']:,.0f}",
        f"one table (today): {rate['today']:,.0f} ({rate['partitioned'] / rate['today']:.2f}x)",
        f"{rows:,} rows in {HOURS} hourly partitions, batches of {BATCH:,}; last hour: {last['partitioned']:,.0f} "
        f"vs {last['today']:,.0f} ({last['partitioned'] / last['today']:.2f}x)",
    )
    report(
        "event log partitioned by hour + dedupe table: a batch sent again, ms",
        f"{resent['partitioned'] / len(again) * 1000:,.1f}",
        f"one table: {resent['today'] / len(again) * 1000:,.1f}",
        f"{resent_count:,} events resent (half of them hours later, into another partition): none stored twice in "
        "either",
    )
    report(
        "event log partitioned by hour + dedupe table: retention of an hour, ms",
        f"{drop_s * 1000:,.0f} + dedupe {(dedupe_s + dedupe_vacuum_s) * 1000:,.0f}",
        f"one table: DELETE {delete_s * 1000:,.0f} + VACUUM {vacuum_s * 1000:,.0f} "
        f"({(delete_s + vacuum_s) / (drop_s + dedupe_s + dedupe_vacuum_s):,.1f}x)",
        f"{hour_rows:,} rows; partition dropped, the dedupe table's rows deleted and vacuumed (in a deployment they "
        "go after the spool's age, days)",
    )
    report(
        "event log partitioned by hour + dedupe table: bytes a row",
        f"{size_parts / rows:,.0f} + dedupe {size_dedupe / rows:,.0f}",
        f"one table: {size_today / rows:,.0f}",
        "tables, indexes and TOAST, after the resent batches",
    )


RANK_TYPES = frozenset({"rank.step_time", "rank.grad_norm"})
# Step 2: a rank's sample of a step, its value, and when; the key is the sample's own, within the hour received.
SAMPLES = f"""
    INSERT INTO {SCHEMA}.samples (run, type, rank, step, value, time, received_at)
    SELECT r, t, (d->>'rank')::int, (d->>'step')::bigint, coalesce(d->>'seconds', d->>'value')::float8, w,
           %(received)s
    FROM {_BATCH}
    ON CONFLICT DO NOTHING RETURNING rank"""


def test_rank_samples_in_a_store_of_their_own(bench_database):
    start = CONFIG.start
    with _scratch() as cursor:
        cursor.execute(
            f"CREATE TABLE {SCHEMA}.samples (run varchar(200) NOT NULL, type varchar(50) NOT NULL, rank int NOT NULL, "
            "step bigint NOT NULL, value float8 NOT NULL, time timestamptz NOT NULL, received_at timestamptz NOT NULL, "
            "PRIMARY KEY (run, type, rank, step, received_at)) PARTITION BY RANGE (received_at)"
        )
        _hourly(cursor, "samples", start)
        filled = _fill(cursor, {"log": TODAY, "samples": SAMPLES}, "rank samples", RANK_TYPES)
        spent, rows = filled.spent, filled.rows
        size_log = _size(cursor, ["log"])
        size_samples = _size(cursor, [f"samples_{hour}" for hour in range(HOURS)])
        cutoff = start + timedelta(hours=1)
        delete_s = _timed(cursor, f"DELETE FROM {SCHEMA}.log WHERE received_at < '{cutoff.isoformat()}'")
        vacuum_s = _timed(cursor, f"VACUUM {SCHEMA}.log")
        drop_s = _timed(cursor, f"DROP TABLE {SCHEMA}.samples_0")

    rate = {name: rows / s for name, s in spent.items()}
    report(
        "rank samples in a table of their own, by hour: insert samples/s",
        f"{rate['samples']:,.0f}",
        f"into the event log: {rate['log']:,.0f} ({rate['samples'] / rate['log']:.1f}x)",
        f"{rows:,} rank.step_time and rank.grad_norm in {HOURS} hourly partitions, batches of up to {BATCH:,}",
    )
    report(
        "rank samples in a table of their own, by hour: bytes a row",
        f"{size_samples / rows:,.0f}",
        f"in the event log: {size_log / rows:,.0f} ({size_log / size_samples:.1f}x)",
        "tables, indexes and TOAST",
    )
    report(
        "rank samples in a table of their own, by hour: retention of an hour, ms",
        f"{drop_s * 1000:,.0f}",
        f"the event log: DELETE {delete_s * 1000:,.0f} + VACUUM {vacuum_s * 1000:,.0f}",
        f"{rows // HOURS:,} samples: a partition dropped",
    )
