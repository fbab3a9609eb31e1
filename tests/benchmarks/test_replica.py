"""A read replica beside the 131,072-GPU fleet's stream (docs/DEPLOY.md, "Past one machine", step 1): what it costs
to keep up, how far behind it runs, and how much of the pages' work it takes off the primary.

Real parts: a PostgreSQL primary and a streaming replica of it (pg_basebackup -R, hot standby), both private
clusters on ports of their own (tests/faults/conftest.py), the intake's gunicorn (2 workers at nice 10) and 2 Celery
workers on the primary, as docs/DEPLOY.md deploys one machine.

1. The stream: PACED_S seconds of the fleet's telemetry (runs.domain.telemetry, AT_SCALE, the 131,072 gradient norms'
   burst included) posted at its own pace, as tests/benchmarks/test_scale.py posts it. Measured: the WAL the primary
   writes for it (bytes a stored event, MB a second), the CPU the replica spends replaying it against the primary's,
   and the replica's lag every SAMPLE_S, as fleetops/replica.py counts it (how long ago the primary last stood at a
   WAL position the replica has replayed): the share of the time pages could read it under REPLICA_MAX_LAG_S.
2. The pages: USERS signed-in people reading the fleet overview and the incident board back to back for PAGE_S
   seconds each way, the page cache off (each request reads the record anew), on a gunicorn of 2 workers without and
   then with DATABASE_REPLICA_URL. Measured: the primary's CPU a page (the baseline: without the replica) and the
   replica's.

Both clusters share this machine's two cores with everything else, so the figures are costs (CPU seconds, bytes),
not the latency one would see with the replica on a machine of its own.
"""

import json
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path

import psycopg
import pytest
import requests
from celery.exceptions import AlwaysEagerIgnored

from fleetops.celery import app as celery_app
from fleetops.replica import replayed_as_of
from runs.domain.simulator import frontier_config
from runs.domain.telemetry import AT_SCALE, telemetry
from tests.faults.conftest import (
    PrivatePostgres,
    PrivateReplica,
    _run_manage,
    make_private_token,
    private_server_folder,
)
from tests.services import console_login

from .conftest import INTAKE_NICE, WORKERS, report, say
from .servers import celery_workers, gunicorn, percentile, post_all, purge_queues, redis_url
from .test_scale import STREAM_START_S, _bodies

CONFIG = frontier_config()
PACED_S = int(os.environ.get("BENCH_REPLICA_SECONDS", "60"))
SAMPLE_S = 0.25
MAX_LAG_S = 5.0  # REPLICA_MAX_LAG_S's default (fleetops/settings.py)
USERS = 20
PAGE_S = 15
PAGES = ("/", "/incidents/")
DATABASE = "fleetops_replica"
LOGS = Path(tempfile.gettempdir()) / "fleetops-bench-replica-logs"  # the servers' logs, kept for a failed run
INTAKE_LOG = LOGS / "intake.log"
SWEEP_S = 60.0  # runs.tasks.apply_pending_events' period under beat (fleetops/settings.py)


@pytest.fixture(scope="module")
def clusters():
    """A migrated primary and its streaming replica: (primary, replica). Removed afterwards."""
    LOGS.mkdir(exist_ok=True)
    root, bindir = private_server_folder("fleetops-bench-replica-")
    primary = PrivatePostgres(root, bindir)
    replica = None
    try:
        primary.admin(f"CREATE DATABASE {DATABASE}")
        _run_manage(["migrate", "--noinput"], DATABASE_URL=primary.url(DATABASE))
        replica = PrivateReplica(primary)
        yield primary, replica
    finally:
        if replica is not None:
            replica.close()
        primary.close()
        for log in root.rglob("server.log"):
            shutil.copy(log, LOGS / f"{log.parent.name}.log")
        shutil.rmtree(root, ignore_errors=True)


def cluster_cpu_seconds(server: PrivatePostgres) -> float:
    """CPU seconds one cluster has used so far: its postmaster, its live processes and those that have exited."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        pid, parent = int(stat.parent.name), int(fields[1])
        if pid == postmaster:
            ticks += sum(int(field) for field in fields[11:15])  # its own time and its reaped children's
        elif parent == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class LagSampler(threading.Thread):
    """Every SAMPLE_S: the primary's WAL position, then the replica's replayed one; the lag as fleetops/replica.py
    counts it: now minus the latest sample time at which the primary stood at a position the replica has replayed."""

    def __init__(self, primary: PrivatePostgres, replica: PrivatePostgres):
        super().__init__(daemon=True)
        self.urls = primary.url(DATABASE), replica.url(DATABASE)
        self.stop = threading.Event()
        self.lags: list[float] = []
        self.dropped: list[str] = []  # sessions a server ended (a hot standby ends one in conflict with recovery)

    def run(self) -> None:
        marks: list[tuple[float, int]] = []
        lsn = "SELECT {} - '0/0'::pg_lsn"
        while not self.stop.is_set():
            try:
                with (
                    psycopg.connect(self.urls[0], autocommit=True) as primary,
                    psycopg.connect(self.urls[1], autocommit=True) as replica,
                ):
                    while not self.stop.wait(SAMPLE_S):
                        now = time.monotonic()
                        marks.append((now, int(primary.execute(lsn.format("pg_current_wal_lsn()")).fetchone()[0])))
                        replayed = int(replica.execute(lsn.format("pg_last_wal_replay_lsn()")).fetchone()[0])
                        as_of = replayed_as_of(marks, replayed)  # the router's own reckoning
                        self.lags.append(now - (marks[0][0] if as_of is None else as_of))
            except psycopg.OperationalError as exc:
                self.dropped.append(str(exc).splitlines()[0])
                self.stop.wait(SAMPLE_S)  # a server that is gone: ask again at the pace of the samples, no faster


def _wal_position(server: PrivatePostgres, function: str) -> int:
    return int(server.query(DATABASE, f"SELECT {function} - '0/0'::pg_lsn")[0][0])


def _applied_wait(primary: PrivatePostgres, source: str, limit_s: float, workers) -> int:
    """Until every event of `source` is applied and seen by detection, in the primary, with the sweeper sent every
    SWEEP_S as a deployment's beat sends it (a turn whose task failed leaves its events to it): how often it was."""
    sql = f"SELECT count(*) FROM runs_event WHERE source = '{source}' AND (applied_at IS NULL OR detected_at IS NULL)"
    deadline = time.perf_counter() + limit_s
    sweeps, next_sweep = 0, time.perf_counter() + SWEEP_S
    while left := primary.query(DATABASE, sql)[0][0]:
        assert time.perf_counter() < deadline, f"{left:,} events of {source} still pending after {limit_s} s"
        if time.perf_counter() >= next_sweep:
            errors = [line.strip() for w in workers for line in w.lines if "ERROR" in line or "Retry" in line]
            intake = [line for line in INTAKE_LOG.read_text(errors="replace").splitlines() if "rror" in line]
            say(
                f"replica: {left:,} events pending {SWEEP_S:.0f} s on; the sweeper sent; workers said: {errors[-5:]}; "
                f"the intake: {intake[-5:]} ({INTAKE_LOG})"
            )
            _sweep()
            sweeps, next_sweep = sweeps + 1, time.perf_counter() + SWEEP_S
        time.sleep(0.2)
    return sweeps


def _sweep() -> None:
    """What beat sends every minute: the sweepers of events left unapplied and undetected."""
    with celery_app.connection_for_write(redis_url()) as connection, warnings.catch_warnings():
        warnings.simplefilter("ignore", AlwaysEagerIgnored)  # send_task queues it whatever eager says: what we want
        celery_app.send_task("runs.tasks.apply_pending_events", kwargs={"older_than_s": 0}, connection=connection)
        celery_app.send_task("incidents.tasks.detect_pending", connection=connection)


def _read_pages(url: str, sessions: list[requests.Session], seconds: float) -> tuple[int, list[float], int]:
    """Each session reads PAGES in turn, back to back, for `seconds`: (pages read, latencies, replica-read pages)."""
    lock = threading.Lock()
    latencies: list[float] = []
    from_replica = [0]
    deadline = time.perf_counter() + seconds

    def reader(session: requests.Session, first: int) -> None:
        n = first
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            answer = session.get(url + PAGES[n % len(PAGES)], timeout=60)
            took = time.perf_counter() - began
            assert answer.status_code == 200, answer.text[:300]
            with lock:
                latencies.append(took)
                from_replica[0] += "from a read replica" in answer.text
            n += 1

    threads = [threading.Thread(target=reader, args=(s, k)) for k, s in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies), latencies, from_replica[0]


def test_a_read_replica_beside_the_131072_gpu_stream(bench_database, clusters):
    primary, replica = clusters
    primary_url, replica_url = primary.url(DATABASE), replica.url(DATABASE)
    tag = uuid.uuid4().hex[:8]
    source = f"fleetops/bench-replica-{tag}"
    trainer, agents = make_private_token(primary_url, "bench-trainer"), make_private_token(primary_url, "bench-agents")
    events = list(telemetry(CONFIG, AT_SCALE, start_s=STREAM_START_S, seconds=PACED_S, source=source))
    tokens = {"trainer": trainer} | {name: agents for name in (f"agents-{k}" for k in range(8))}
    bodies = _bodies(events, tokens)
    say(f"replica: {len(events):,} events of the 131,072-GPU stream over {PACED_S} s, posted at its pace")

    # 1. The stream, with the replica replaying it.
    purge_queues()
    sampler = LagSampler(primary, replica)
    try:
        with (
            gunicorn(workers=2, nice=INTAKE_NICE, log=INTAKE_LOG, DATABASE_URL=primary_url) as url,
            celery_workers(WORKERS, DATABASE_URL=primary_url, LOG_LEVEL="INFO") as workers,
        ):
            wal_before = _wal_position(primary, "pg_current_wal_lsn()")
            cpu_before = cluster_cpu_seconds(primary), cluster_cpu_seconds(replica)
            sampler.start()
            try:
                started, last_202, _ = post_all(url, bodies, threads=4, paced=True)
                sweeps = _applied_wait(primary, source, 600, workers)
                wal_after = _wal_position(primary, "pg_current_wal_lsn()")
                while _wal_position(replica, "pg_last_wal_replay_lsn()") < wal_after:
                    time.sleep(0.05)
                caught_up_s = time.perf_counter() - last_202
            finally:  # a sampler left running would take the CPU of the benchmarks after this one
                sampler.stop.set()
                sampler.join()
            elapsed = time.perf_counter() - started
            primary_cpu = cluster_cpu_seconds(primary) - cpu_before[0]
            replica_cpu = cluster_cpu_seconds(replica) - cpu_before[1]
    finally:
        purge_queues()
    if sampler.dropped:
        say(f"replica: the lag sampler's sessions ended {len(sampler.dropped)} times: {sampler.dropped[:3]}")
    wal_bytes = wal_after - wal_before
    fresh = sum(lag <= MAX_LAG_S for lag in sampler.lags) / len(sampler.lags)

    # 2. The pages, read anew each time: without the replica, then with it.
    nodes = primary.query(DATABASE, "SELECT count(*) FROM runs_node")[0][0]
    per_page: dict[str, tuple[float, float, float, int]] = {}
    for label, extra in (("primary only", {}), ("with the replica", {"DATABASE_REPLICA_URL": replica_url})):
        with gunicorn(workers=2, DATABASE_URL=primary_url, PAGE_CACHE_S="0", **extra) as url:
            made = bool(per_page)  # the readers were made for the first pass
            sessions = [console_login(url, primary_url, "reader", create=not (made or k)) for k in range(USERS)]
            for session in sessions:  # each process reads its first pages (and asks the replica) before the clock
                session.get(url + PAGES[0], timeout=60)
            time.sleep(1.5)  # the replica catches up past the sign-ins (their own writes)
            before = cluster_cpu_seconds(primary), cluster_cpu_seconds(replica)
            pages, latencies, from_replica = _read_pages(url, sessions, PAGE_S)
            per_page[label] = (
                (cluster_cpu_seconds(primary) - before[0]) / pages,
                (cluster_cpu_seconds(replica) - before[1]) / pages,
                percentile(latencies, 95),
                from_replica,
            )
            say(f"replica: {label}: {pages} pages, {from_replica} from the replica")
    alone, beside = per_page["primary only"], per_page["with the replica"]
    assert beside[3] > 0, "no page was read from the replica"

    stream_rate = AT_SCALE.total_per_s(CONFIG)
    per_1000 = 1e6 / len(events)  # seconds an event -> ms per 1,000 events
    report(
        "replica: WAL of the 131,072-GPU stream",
        f"{wal_bytes / len(events):,.0f} B/event",
        note=f"{wal_bytes / len(events) * stream_rate / 1e6:.1f} MB/s at the stream's {stream_rate:,.0f} events/s; "
        f"{wal_bytes / elapsed / 1e6:.1f} MB/s in these {PACED_S} s with the 131,072 norms' burst",
    )
    report(
        "replica: CPU replaying the stream, ms per 1,000 events",
        f"{replica_cpu * per_1000:.0f} ms",
        f"primary's PostgreSQL {primary_cpu * per_1000:.0f} ms",
        f"{replica_cpu / primary_cpu:.2f}x; {replica_cpu / elapsed:.2f} cores against the primary's "
        f"{primary_cpu / elapsed:.2f} while it ran",
    )
    report(
        "replica: lag while the stream runs, p95",
        f"{percentile(sampler.lags, 95):.2f} s",
        note=f"max {max(sampler.lags):.2f} s; within {MAX_LAG_S:.0f} s {fresh:.1%} of the time; caught up "
        f"{caught_up_s:.1f} s after the last POST; sampled every {SAMPLE_S} s; the sweeper needed {sweeps} times",
        bound=f"{MAX_LAG_S:.0f} s (REPLICA_MAX_LAG_S)",
    )
    report(
        "replica: primary's PostgreSQL CPU a page",
        f"{beside[0] * 1000:.1f} ms",
        f"without a replica {alone[0] * 1000:.1f} ms",
        f"{beside[0] / alone[0]:.2f}x; the replica's {beside[1] * 1000:.1f} ms a page; overview of {nodes:,} nodes "
        f"and the board, read anew, {USERS} users; {beside[3]} of the pages from the replica",
    )
    report(
        "replica: page p95 client-side, read anew",
        f"{beside[2] * 1000:.0f} ms",
        f"without a replica {alone[2] * 1000:.0f} ms",
        "both clusters and gunicorn on the same 2 cores",
    )
    say("replica: " + json.dumps({k: [round(x, 4) for x in v] for k, v in per_page.items()}))
