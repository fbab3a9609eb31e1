"""EXPLAIN (ANALYZE, BUFFERS) of the hot queries on the event table, on about 3 million synthetic events.

The code paths run for real (the intake, the apply and detection claims, the sweepers, a lifecycle rebuild, the node
page's reads, the watchdogs, the retention walk), each in a transaction rolled back; every statement they send that
reads runs_event is captured and explained, again rolled back. The bench asserts that none of them scans the table
whole (no Seq Scan on runs_event) and prints each plan; docs/PERFORMANCE.md records them.

The events live in a schema of their own (explain_bench) in the benchmark database, with the table's columns and
the indexes the migrations give public.runs_event (created or dropped to match on every run), so that the other
benchmarks' table stays as it is. The ~3 million rows are written once with COPY (about three minutes) and kept.
"""

import json
import random
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction

from runs.services import INTAKE_COLUMNS

from .conftest import report, say

SCHEMA = "explain_bench"
VERSION = 2  # of the synthetic stream below (2: the turn column); another version rebuilds the table
NODES, GPUS_PER_NODE, DAYS = 64, 8, 30
RUN, CLUSTER, SOURCE = "explain-run", "explain-cluster", "bench/explain"
END = datetime(2026, 3, 31, tzinfo=UTC)  # fixed: the same rows, ids and plans from run to run
START = END - timedelta(days=DAYS)
BACKLOG = 2_000  # the newest events, not applied yet; the 2,000 before them applied but not yet detected
RETENTION = timedelta(days=14)
# What the intake writes, and the pipeline's marks: the backlog below is written already applied or detected.
COLUMNS = (*INTAKE_COLUMNS, "error")  # the intake writes applied_at and detected_at itself (rank samples)


def host(n: int) -> str:
    return f"explain-{n:03d}"


def _stream() -> Iterator[tuple[str, datetime, dict]]:
    """(type, time, data) in time order: a 512-GPU run's month, with the agents' and trainers' samples.

    A minute: the run's step. 5 min: every node's heartbeat. 15 min: every rank's step time. 30 min: every GPU's
    health, a checkpoint. 60 min: every rank's gradient norm. Every 2 days: a failure and a restart; 6 h: an Xid;
    daily: a node out to repair and back.
    """
    rng = random.Random(1)
    nodes = [host(n) for n in range(NODES)]
    yield "run.started", START, {"run": RUN, "cluster": CLUSTER, "gpus": NODES * 8, "nodes": nodes, "job_id": "j0"}
    for minute in range(1, DAYS * 24 * 60):
        at = START + timedelta(minutes=minute)
        yield "run.step", at, {"run": RUN, "step": minute * 10}
        if minute % 5 == 0:
            for node in nodes:
                yield "node.heartbeat", at, {"node": node, "cluster": CLUSTER}
        if minute % 15 == 0:
            for rank in range(NODES * GPUS_PER_NODE):
                seconds = round(rng.gauss(6.0, 0.2), 3)
                node = host(rank // GPUS_PER_NODE)
                yield "rank.step_time", at, {"run": RUN, "rank": rank, "node": node, "step": minute, "seconds": seconds}
        if minute % 30 == 0:
            for node in nodes:
                for gpu in range(GPUS_PER_NODE):
                    yield (
                        "gpu.health",
                        at,
                        {
                            "node": node,
                            "gpu": gpu,
                            "temperature_c": round(rng.uniform(55, 80), 1),
                            "throttle_reasons": [],
                            "nvlink_errors": 0,
                            "recovery_action": 0,
                        },
                    )
            yield "checkpoint.started", at, {"run": RUN, "step": minute * 10}
            yield (
                "checkpoint.completed",
                at + timedelta(seconds=30),
                {"run": RUN, "step": minute * 10, "blocking_s": 30.0, "bytes": 10**12, "tier": "durable"},
            )
        if minute % 60 == 0:
            for rank in range(NODES * GPUS_PER_NODE):
                node = host(rank // GPUS_PER_NODE)
                value = round(rng.uniform(1, 2), 4)
                yield "rank.grad_norm", at, {"run": RUN, "rank": rank, "node": node, "step": minute, "value": value}
        if minute % 360 == 0:
            node, gpu = host(rng.randrange(NODES)), rng.randrange(GPUS_PER_NODE)
            yield "gpu.xid", at, {"node": node, "gpu": gpu, "xid": 13, "message": "Graphics SM exception"}
        if minute % 1440 == 700:
            node = host(rng.randrange(NODES))
            yield "node.state", at, {"node": node, "state": "in_repair", "reason": "RMA"}
            yield "node.state", at + timedelta(hours=6), {"node": node, "state": "in_service", "reason": "back"}
        if minute % 2880 == 1000:
            yield "run.failed", at, {"run": RUN, "reason": "Xid 79", "node": host(3), "gpu": 1, "xid": 79}
            yield "run.started", at + timedelta(minutes=9), {**_started(nodes), "job_id": f"j{minute}"}
            yield "run.restored", at + timedelta(minutes=12), {"run": RUN, "from_step": minute * 10 - 300}


def _started(nodes: list[str]) -> dict:
    return {"run": RUN, "cluster": CLUSTER, "gpus": NODES * 8, "nodes": nodes}


def _rows(total: int) -> Iterator[tuple]:
    for n, (type_, at, data) in enumerate(_stream()):
        # Sent, received, applied and detected within seconds, except the newest (the backlog the sweepers find).
        applied = at + timedelta(seconds=1) if n < total - BACKLOG else None
        detected = at + timedelta(seconds=2) if n < total - 2 * BACKLOG else None
        yield (
            SOURCE,
            f"{type_}-{n}",
            type_,
            "",
            at,
            at,
            json.dumps(data),
            data.get("run", ""),
            data.get("node", ""),
            None,  # skew_s: every clock on time
            None,  # token_id: written by the benchmark, no sender's token
            applied,
            detected,
            0,  # turn: the apply turn of FleetOps' own events (runs.services.turn_of)
            "",
        )


def _marker() -> str:
    return f"fleetops explain stream v{VERSION}"


def _ensure_table() -> int:
    """The synthetic events in explain_bench.runs_event, written once; returns the row count."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT obj_description(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'runs_event'",
            [SCHEMA],
        )
        row = cursor.fetchone()
        if row and row[0] == _marker():
            cursor.execute(f"SELECT count(*) FROM {SCHEMA}.runs_event")
            return cursor.fetchone()[0]
        say(f"writing the synthetic events into {SCHEMA}.runs_event (once; about three minutes)")
        cursor.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        cursor.execute(f"CREATE SCHEMA {SCHEMA}")
        # Columns, defaults and the identity; the indexes come after the COPY (faster), from public's (below).
        cursor.execute(
            f"CREATE TABLE {SCHEMA}.runs_event (LIKE public.runs_event INCLUDING DEFAULTS INCLUDING IDENTITY)"
        )
        cursor.execute(f"CREATE TABLE {SCHEMA}.runs_eventrollup (LIKE public.runs_eventrollup INCLUDING ALL)")
    total = sum(1 for _ in _stream())
    started = time.perf_counter()
    connection.ensure_connection()
    raw = connection.connection
    columns = ", ".join(COLUMNS)
    with raw.cursor() as cursor, cursor.copy(f"COPY {SCHEMA}.runs_event ({columns}) FROM STDIN") as copy:
        for row in _rows(total):
            copy.write_row(row)
    say(f"{total:,} events written in {time.perf_counter() - started:.0f} s")
    _sync_indexes()
    with connection.cursor() as cursor:
        cursor.execute(f"COMMENT ON TABLE {SCHEMA}.runs_event IS %s", [_marker()])
    return total


def _sync_indexes() -> list[str]:
    """Give explain_bench.runs_event exactly public.runs_event's indexes; returns what changed."""
    changes = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'runs_event' AND schemaname = %s", ["public"]
        )
        want = {
            name: sql.replace(" ON public.runs_event ", f" ON {SCHEMA}.runs_event ") for name, sql in cursor.fetchall()
        }
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'runs_event' AND schemaname = %s", [SCHEMA]
        )
        have = dict(cursor.fetchall())
        cursor.execute("SET maintenance_work_mem = '512MB'")
        for name, sql in have.items():
            if want.get(name) != sql:
                cursor.execute(f"DROP INDEX {SCHEMA}.{name}")
                changes.append(f"dropped {name}")
        for name, sql in want.items():
            if have.get(name) != sql:
                started = time.perf_counter()
                cursor.execute(sql)
                changes.append(f"created {name} ({time.perf_counter() - started:.0f} s)")
        if changes:
            cursor.execute(f"VACUUM (ANALYZE) {SCHEMA}.runs_event")
    return changes


@pytest.fixture(scope="module")
def explain_table(bench_database):
    rows = _ensure_table()
    for change in _sync_indexes():
        say(f"{SCHEMA}.runs_event: {change}")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {SCHEMA}.runs_event")
        cursor.execute(f"SET search_path TO {SCHEMA}, public")
    try:
        yield rows
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET search_path TO DEFAULT")


class _Rollback(Exception):
    pass


def _captured(work: Callable[[], object], setup: Callable[[], object]) -> list[tuple[type, object, object]]:
    """Run `setup` then `work` in a transaction rolled back; returns (cursor class, statement, params) of what
    `work` sent."""
    sent = []
    execute = psycopg.Cursor.execute

    def spy(cursor, query, params=None, **kwargs):
        sent.append((type(cursor), query, params))
        return execute(cursor, query, params, **kwargs)

    server_execute = psycopg.ServerCursor.execute

    def server_spy(cursor, query, params=None, **kwargs):  # .iterator() reads through a server-side cursor
        sent.append((type(cursor), query, params))
        return server_execute(cursor, query, params, **kwargs)

    try:
        with (
            mock.patch.object(psycopg.Cursor, "execute", spy),
            mock.patch.object(psycopg.ServerCursor, "execute", server_spy),
            transaction.atomic(),
        ):
            setup()
            sent.clear()
            work()
            raise _Rollback
    except _Rollback:
        pass
    return sent


def _explain(cursor_class: type, query, params, setup: Callable[[], object]) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of one statement as sent, after `setup`, in a transaction rolled back."""
    text = query.decode() if isinstance(query, bytes) else query if isinstance(query, str) else query.as_string(None)
    plan = []
    try:
        with transaction.atomic():
            setup()
            # Django binds parameters client-side (%s), the intake's own cursor server-side (%b).
            client = any(c.__name__ == "ClientCursorMixin" for c in cursor_class.__mro__)
            base = psycopg.ClientCursor if client else psycopg.Cursor
            with base(connection.connection) as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + text, params)
                plan = [row[0] for row in cursor.fetchall()]
            raise _Rollback
    except _Rollback:
        pass
    return "\n".join(plan)


def _statement(query) -> str:
    text = query.decode() if isinstance(query, bytes) else query if isinstance(query, str) else query.as_string(None)
    return " ".join(text.split())


PLANS: list[tuple[str, str, str]] = []
FAILURES: list[str] = []
SEEN: set[tuple[str, str]] = set()


def _scan(plan: str) -> str:
    """How the plan reads runs_event: its scan nodes, in short."""
    scans = re.findall(
        r"((?:Parallel )?(?:Seq|Index Only|Index|Bitmap Index|Bitmap Heap) Scan(?: Backward)? (?:using|on) \S+)", plan
    )
    return "; ".join(dict.fromkeys(scans)) or plan.splitlines()[0].split("(")[0].strip()


PLANS_FILE = Path(settings.BASE_DIR) / "var" / "explain-plans.txt"  # every plan of the last run, for the docs


def _nothing() -> None:
    pass


def _check(
    name: str, work: Callable[[], object], *, setup: Callable[[], object] = _nothing, must_touch: int = 1
) -> None:
    """Explain every statement of `work` that reads runs_event; none may scan it whole."""
    statements = [
        (cls, query, params)
        for cls, query, params in _captured(work, setup)
        if re.search(r"\bruns_event\b", _statement(query))
    ]
    assert len(statements) >= must_touch, f"{name}: expected a statement on runs_event"
    for cls, query, params in statements:
        plan = _explain(cls, query, params, setup)
        text = _statement(query)
        shape = re.sub(r"(%s, )+%s", "...", text)
        if "Seq Scan on runs_event" in plan:
            FAILURES.append(f"{name} scans runs_event whole:\n{text}\n{plan}")
        if (name, shape) in SEEN:  # the same statement again (the detectors' per-event reads): one plan is enough
            continue
        SEEN.add((name, shape))
        PLANS.append((name, shape, plan))
        say(f"--- {name}: {shape[:300]}{'...' if len(shape) > 300 else ''}\n{plan}")
        executed = [line for line in plan.splitlines() if "Execution Time" in line]
        report(f"explain: {name}", executed[0].split(":")[1].strip() if executed else "?", note=_scan(plan))


def _ids(**filters) -> list[int]:
    from runs.models import Event

    return list(Event.objects.filter(**filters).order_by("id").values_list("id", flat=True)[:500])


def test_the_hot_queries_use_indexes(explain_table):
    from incidents.detection import services as detection
    from incidents.playbooks import spares
    from runs import retention, selectors, services
    from runs.domain.cloudevents import parse_events
    from runs.models import GPU, Cluster, Event, Node, Run

    say(f"{explain_table:,} events in {SCHEMA}.runs_event")
    now = END
    unapplied = _ids(applied_at__isnull=True)
    undetected = _ids(applied_at__isnull=False, detected_at__isnull=True)
    assert len(unapplied) == len(undetected) == 500

    # The intake: 1,000 events, half of them already stored (the dedup is the insert's ON CONFLICT).
    stored = list(Event.objects.order_by("-id").values_list("type", "time", "data", "event_id")[:500])
    raws = [
        {"specversion": "1.0", "source": SOURCE, "id": event_id, "type": type_, "time": at.isoformat(), "data": data}
        for type_, at, data, event_id in stored
    ]
    raws += [dict(raw, id=f"new-{n}") for n, raw in enumerate(raws)]
    events, problems = parse_events(raws, max_batch=len(raws))
    assert problems == []
    _check("intake (dedup on insert)", lambda: services.events_ingest(events=events))

    def setup_run() -> Run:
        cluster = Cluster.objects.create(name=CLUSTER)
        Node.objects.bulk_create([Node(hostname=host(n), cluster=cluster) for n in range(NODES)])
        return Run.objects.create(name=RUN, cluster=cluster, state=Run.State.RUNNING, started_at=START)

    _check("apply claim", lambda: services._apply_chunk(unapplied[:200]))
    _check("apply sweeper", lambda: services.pending_events_apply(older_than=timedelta(0)), must_touch=2)
    _check("pending count (overview)", selectors.events_pending_count)
    _check("detection claim", lambda: detection.events_detect(event_ids=undetected[:200]))
    _check("detection sweeper", lambda: detection.pending_detect(older_than=timedelta(0)))
    _check(
        "lifecycle rebuild read", lambda: services.run_lifecycle_rebuild(run=Run.objects.get(name=RUN)), setup=setup_run
    )
    node = Node(hostname=host(5))
    _check("node page: recent events", lambda: selectors.node_recent_events(node=node))
    _check("node page: Xid history", lambda: selectors.node_xid_events(node=node))
    _check(
        "overview: repair hours",
        spares._repair_hours,
        setup=setup_run,
    )
    _check("watchdog: hangs", lambda: detection.hangs_detect(now=now), setup=setup_run)
    _check("detector: stragglers", lambda: detection.stragglers_detect(now=now), setup=setup_run)
    _check("detector: SDC", lambda: detection.sdc_detect(now=now), setup=setup_run)

    def applied_record() -> None:
        # The record as applying the stream leaves it: each node's and GPU's newest sample time (the retention keeps
        # those samples and reads the record to know them).
        run = setup_run()
        nodes = Node.objects.filter(cluster_id=run.cluster_id)
        nodes.update(last_heartbeat_at=END)
        GPU.objects.bulk_create([GPU(node=n, index=i, health_at=END) for n in nodes for i in range(GPUS_PER_NODE)])
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")  # as the retention's batch transaction does

    def prune_one_batch():
        return retention.events_prune(
            now=now, older_than=RETENTION, batch_size=settings.EVENTS_PRUNE_BATCH, max_batches=1
        )

    _check("retention: one batch", prune_one_batch, setup=applied_record, must_touch=3)

    # The whole walk once, rolled back: how fast the retention catches up with a month (the first run).
    def prune_all():
        started = time.perf_counter()
        result = retention.events_prune(now=now, older_than=RETENTION, batch_size=settings.EVENTS_PRUNE_BATCH)
        seconds = time.perf_counter() - started
        say(f"retention, whole walk: {result} in {seconds:.1f} s")
        report("retention: whole walk, events rolled up and deleted", f"{result.deleted:,}", note=f"{seconds:.1f} s")
        report(
            "retention: whole walk, rate", f"{result.deleted / seconds:,.0f} events/s", note=f"{result.batches} batches"
        )
        assert result.deleted > explain_table // 3

    try:
        with transaction.atomic():
            applied_record()
            prune_all()
            raise _Rollback
    except _Rollback:
        pass

    PLANS_FILE.parent.mkdir(parents=True, exist_ok=True)
    PLANS_FILE.write_text("".join(f"## {name}\n\n{text}\n\n{plan}\n\n" for name, text, plan in PLANS))
    say(f"plans written to {PLANS_FILE}")
    assert not FAILURES, "\n\n".join(FAILURES)
