"""Benchmarks (`make bench`), not tests: they measure, print figures against a baseline timed in the same run, and
fail only where the issue sets a bound. docs/PERFORMANCE.md records the figures.

They need PostgreSQL: DATABASE_URL if set, else `make bench` passes postgres://postgres@127.0.0.1:5432/fleetops_bench.
A database named fleetops_bench is the benchmarks' own: it is created when missing, and rebuilt when it holds
something other than the simulated run. Any other database is only added to, never dropped.

The full simulated run (runs.domain.simulator defaults: Llama 3's 16,384 GPUs for 54 days, seed 1) takes minutes
to load, so a loaded run is kept between runs of `make bench` once it is checked to be that exact stream, applied.
"""

import gc
import json
import logging
import os
import socket
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections

from runs.domain.simulator import SimulationConfig, Summary, simulate

# The pages benchmarks' static files, collected once a session.
from .pageload import static_files  # noqa: F401 -- a fixture

BENCH_DATABASE = "fleetops_bench"  # ours to create, and to drop and rebuild
CONFIG = SimulationConfig()  # = manage.py simulate --gpus 16384 --days 54 --seed 1 --start 2026-01-05T00:00:00Z
LOAD_RECORD = Path(settings.BASE_DIR) / "var" / "bench-load.json"  # how long the cached load took


@dataclass(frozen=True)
class Figure:
    name: str
    value: str
    baseline: str = ""  # what it is read against, measured in the same run
    bound: str = ""  # the limit an issue sets (asserted where the benchmark says so)
    note: str = ""  # the ratio, or where the figure comes from


FIGURES: list[Figure] = []
COLUMNS = ("name", "value", "baseline", "bound", "note")


def report(name: str, value: str, baseline: str = "", note: str = "", *, bound: str = "") -> None:
    """Keep a figure for the table at the end and show it now."""
    FIGURES.append(Figure(name, value, baseline, bound, note))
    say(
        f"{name}: {value}"
        + (f" vs {baseline}" if baseline else "")
        + (f" (bound {bound})" if bound else "")
        + (f" ({note})" if note else "")
    )


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def pytest_terminal_summary(terminalreporter):
    """Every figure of the session in one table: figure, value, baseline, bound, note."""
    if not FIGURES:
        return
    db = settings.DATABASES["default"]
    load = os.getloadavg()
    terminalreporter.section("FleetOps benchmarks")
    terminalreporter.write_line(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end; "
        f"PostgreSQL {db.get('HOST')}:{db.get('PORT')}/{db.get('NAME')}; "
        f"the loaded run: {CONFIG.gpus:,} GPUs, {CONFIG.days:g} days, seed {CONFIG.seed}"
    )
    rows = [dict(zip(COLUMNS, COLUMNS, strict=True))] + [vars(f) for f in FIGURES]
    widths = {column: max(len(row[column]) for row in rows) for column in COLUMNS[:-1]}
    for row in rows:
        line = "  ".join(f"{row[c]:<{widths[c]}}" if c != "value" else f"{row[c]:>{widths[c]}}" for c in widths)
        terminalreporter.write_line(f"{line}  {row['note']}".rstrip())


def pytest_collection_modifyitems(items):
    """The benchmarks that read the loaded run first: the others add runs, nodes and incidents of their own."""
    items.sort(key=lambda item: "loaded_run" not in getattr(item, "fixturenames", ()))


# -- the database ---------------------------------------------------------------------------------------------


def _database() -> dict:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql" or not os.environ.get("DATABASE_URL"):
        pytest.exit(
            "The benchmarks need PostgreSQL: set DATABASE_URL, or run `make bench`, which uses "
            f"postgres://postgres@127.0.0.1:5432/{BENCH_DATABASE} by default.",
            returncode=1,
        )
    host, port = db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        pytest.exit(f"PostgreSQL is unreachable at {host}:{port} ({exc}): no benchmark was run.", returncode=1)
    return db


def _admin(db: dict) -> psycopg.Connection:
    """A connection to the server's maintenance database, to create or drop the benchmark database."""
    return psycopg.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        dbname="postgres",
        autocommit=True,
    )


def _create_if_missing(db: dict) -> None:
    with _admin(db) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
        if not exists:
            say(f"creating database {db['NAME']}")
            admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(db["NAME"])))


@contextmanager
def own_database(name: str, *, fresh: bool) -> Iterator[None]:
    """Point the connection (and the servers started from it) at a benchmark's own database `name`, migrated:
    dropped and made anew when `fresh` (and dropped again afterwards), else made when missing and kept."""
    db = settings.DATABASES["default"]
    original = db["NAME"]
    identifier = psycopg.sql.Identifier(name)
    connections.close_all()
    with _admin(db) as admin:
        if fresh:
            admin.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(identifier))
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(identifier))
    db["NAME"] = name
    try:
        call_command("migrate", verbosity=0, interactive=False)
        yield
    finally:
        connections.close_all()
        db["NAME"] = original
        if fresh:
            with _admin(db) as admin:
                admin.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(identifier))


def recreate_bench_database() -> None:
    db = settings.DATABASES["default"]
    assert db["NAME"] == BENCH_DATABASE, "only the benchmarks' own database is ever dropped"
    connections.close_all()
    with _admin(db) as admin:
        name = psycopg.sql.Identifier(db["NAME"])
        admin.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(name))
    call_command("migrate", verbosity=0, interactive=False)


@pytest.fixture(scope="session", autouse=True)
def bench_database(django_db_blocker):
    """The real database (no test database, no rollback): the loaded run outlives the session on purpose."""
    db = _database()
    _create_if_missing(db)
    # The appliers log every task at INFO; a load would print thousands of lines.
    logging.getLogger("celery").setLevel(logging.WARNING)
    with django_db_blocker.unblock():
        call_command("migrate", verbosity=0, interactive=False)
        yield db


SCALE_DATABASE = "fleetops_bench_scale"  # the 131,072-GPU stream's (the 14-day run's record: fleetops_bench_frontier)
# The scale benchmarks' one machine as docs/DEPLOY.md deploys it: two Celery workers, the intake's gunicorn at a lower
# CPU priority than they; and issue 23's detection bound while the stream runs, timed by an Xid every PROBE_EVERY_S.
WORKERS = 2
INTAKE_NICE = 10
PROBE_EVERY_S = 2.0
BOUND_P95_S = 2.0


@pytest.fixture(scope="module")
def scale_database(bench_database):
    """A database of the scale benchmarks' own, created when missing and kept: retention deletes by age whatever a
    database holds, and the 54-day run in fleetops_bench must stay whole."""
    with own_database(SCALE_DATABASE, fresh=False):
        yield


# -- the simulated run ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    events: list[dict]
    summary: Summary


@pytest.fixture(scope="session")
def stream() -> Stream:
    events = list(simulate(CONFIG))
    summary = Summary()
    for event in events:
        summary.add(event)
    return Stream(events, summary)


@dataclass(frozen=True)
class LoadedRun:
    name: str
    events: int
    seconds: float | None  # None: loaded by an earlier run
    note: str


@pytest.fixture(scope="session")
def loaded_run(bench_database, stream) -> LoadedRun:
    """The simulated run in PostgreSQL, applied: loaded now through the intake's in-process path, or kept."""
    state = _stored_state(stream.events)
    if state == "complete":
        note = "kept from an earlier run"
        if LOAD_RECORD.exists():
            record = json.loads(LOAD_RECORD.read_text())
            note += f" (loaded in {record['seconds']:.0f} s, {record['events_per_s']:.0f} events/s, {record['at']})"
        say(f"the simulated run is in the database already: {note}")
        return LoadedRun(CONFIG.run, len(stream.events), None, note)
    if state == "cluttered":
        if bench_database["NAME"] == BENCH_DATABASE:
            say(f"{BENCH_DATABASE} holds the simulated run and {_others()} from earlier benchmarks: rebuilding it")
            recreate_bench_database()
            state = "partial"
        else:
            note = f"kept, beside {_others()} that the page figures include"
            say(f"the simulated run is in {bench_database['NAME']} already: {note}")
            return LoadedRun(CONFIG.run, len(stream.events), None, note)
    if state == "conflicting":
        if bench_database["NAME"] != BENCH_DATABASE:
            pytest.exit(
                f"{bench_database['NAME']} holds events under the simulated run's ids with other contents, or "
                f"without the run they derive; the benchmarks drop only their own database ({BENCH_DATABASE}). "
                "Point DATABASE_URL elsewhere.",
                returncode=1,
            )
        say(f"{BENCH_DATABASE} holds another stream under the same ids: rebuilding it")
        recreate_bench_database()
    say(f"loading {len(stream.events):,} events through the intake's in-process path (a minute or two)")
    seconds = _load(stream.events)
    if _stored_state(stream.events) != "complete":
        pytest.fail("the simulated run did not load completely")
    rate = len(stream.events) / seconds
    # What autovacuum would do in the next minutes anyway; done now so that it does not run under the timings.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
    LOAD_RECORD.parent.mkdir(parents=True, exist_ok=True)
    LOAD_RECORD.write_text(
        json.dumps(
            {"seconds": seconds, "events_per_s": rate, "at": time.strftime("%Y-%m-%d"), "events": len(stream.events)}
        )
    )
    return LoadedRun(CONFIG.run, len(stream.events), seconds, "loaded now")


def _stored_state(events: list[dict]) -> str:
    """'complete' (the same ids at the same times, all applied, and nothing else: no other run, no node the stream
    does not name), 'partial' (a subset, or some not applied yet), 'cluttered' (complete, but beside what other
    benchmarks left: their runs, nodes and incidents would be measured with the pages), 'conflicting' (an id with
    another time, or ids the stream lacks)."""
    from runs.domain.cloudevents import parse_time
    from runs.models import Event, Run

    prefix = f"{CONFIG.run}-{CONFIG.seed}-"
    stored = {
        event_id: (at, applied and not error)
        for event_id, at, applied, error in Event.objects.filter(source=CONFIG.source, event_id__startswith=prefix)
        .values_list("event_id", "time", "applied_at", "error")
        .iterator(chunk_size=10_000)
    }
    expected = {event["id"]: parse_time(event["time"]) for event in events}
    if any(event_id not in expected or expected[event_id] != at for event_id, (at, _ok) in stored.items()):
        return "conflicting"
    if len(stored) == len(expected) and all(ok for _at, ok in stored.values()):
        # Events applied but no run: the derived record was thrown away; only a rebuild brings it back.
        if not Run.objects.filter(name=CONFIG.run, ended_at__isnull=False).exists():
            return "conflicting"
        return "cluttered" if _others() else "complete"
    return "partial"


def _others() -> str:
    """What the database holds beside the simulated run ('' if nothing): other benchmarks' runs and nodes."""
    from runs.models import Event, Node, Run

    streamed = Event.objects.filter(source=CONFIG.source).exclude(node_name="").values("node_name")
    runs = Run.objects.exclude(name=CONFIG.run).count()
    nodes = Node.objects.exclude(hostname__in=streamed).exclude(attempts__run__name=CONFIG.run).count()
    events = Event.objects.exclude(source=CONFIG.source).count()
    return f"{runs:,} other runs, {nodes:,} other nodes, {events:,} other events" if runs or nodes or events else ""


def _load(events: list[dict]) -> float:
    """Store and apply the stream as `manage.py simulate --apply` does; returns seconds. Repeats are skipped, and
    events an interrupted earlier load stored but never applied are applied at the end."""
    from runs.management.commands.simulate import ingest
    from runs.models import Event
    from runs.services import events_apply

    started = time.perf_counter()
    ingest(events)
    pending = list(
        Event.objects.filter(source=CONFIG.source, applied_at__isnull=True)
        .order_by("time", "id")
        .values_list("id", flat=True)
    )
    if pending:
        events_apply(event_ids=pending)
    return time.perf_counter() - started


def api_token(name: str, scopes: list[str]) -> str:
    """A fresh bearer token under `name` (an earlier one of that name is replaced)."""
    from runs.models import ApiToken

    ApiToken.objects.filter(name=name).delete()
    row = ApiToken(name=name, scopes=scopes, role="scheduler")  # unbound: the benchmarks send every type
    token = row.set_new_token()
    row.save()
    return token


def median_p95_ms(samples: list[float]) -> tuple[float, float]:
    """Median and 95th percentile of seconds, in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def timed(call, times: int) -> list[float]:
    """`times` calls of `call`, each timed in seconds."""
    # Garbage left by the setup (the whole stream was built in this process) is collected before the clock runs, and
    # what stays (the stream and its timeline, ~80,000 events a server process never holds) is frozen out of later
    # collections: a full collection walking it landed in a request now and then (p95 of the goodput API 187-285 ms
    # on fresh loads, median 47-83 ms), timing this process's heap rather than the request.
    gc.collect()
    gc.freeze()
    try:
        samples = []
        for _ in range(times):
            started = time.perf_counter()
            call()
            samples.append(time.perf_counter() - started)
        return samples
    finally:
        gc.unfreeze()
