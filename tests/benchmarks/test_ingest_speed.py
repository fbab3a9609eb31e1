"""The simulated run's stream through POST /api/v1/events, 1,000 events a batch, against a plain COPY of the same
rows into the same table: events per second accepted (committed to the Event table, the 202 received).

The API figure is taken over HTTP from gunicorn (fleetops.wsgi, DEBUG off, as deployed) by a few client threads on
keep-alive connections, the bodies encoded before the clock starts. No Celery worker runs meanwhile: the apply
task each commit queues goes to Redis (REDIS_URL, a database of the benchmark's own) and is purged afterwards, so
applying is not in this figure (test_pipeline_speed.py measures it). The in-process figure (Django's test client,
no socket, no server) is kept beside it: the difference is what HTTP and gunicorn cost.
"""

import json
import threading
import time

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from psycopg import sql
from rest_framework.test import APIClient

from fleetops.celery import app as celery_app
from runs.domain.cloudevents import parse_events
from runs.models import Event

from .conftest import api_token, report, say
from .servers import Client, gunicorn, purge_queues

BATCH = 1000  # what `manage.py simulate --url` posts
SERVER_WORKERS = 2  # gunicorn processes: one per core of this machine
CLIENTS = 4  # client threads, each on its own connection: a request is always waiting for a free worker
TARGET_RATE = 20_000  # events/s (issue #8)
TARGET_SHARE = 0.25  # of COPY's rate
# Sources of their own, so that the stream's ids are new to the table and the copies can be removed afterwards.
API_SOURCE = "fleetops/bench-api"
INPROCESS_SOURCE = "fleetops/bench-api-inprocess"
COPY_SOURCE = "fleetops/bench-copy"
COLUMNS = ("source", "event_id", "type", "subject", "time", "received_at", "data", "run_name", "node_name", "error")


def _delete_copies() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("DELETE FROM {} WHERE source IN (%s, %s, %s)").format(sql.Identifier(Event._meta.db_table)),
            [API_SOURCE, INPROCESS_SOURCE, COPY_SOURCE],
        )


@pytest.fixture
def clean_copies(bench_database):
    _delete_copies()  # left by an interrupted run
    purge_queues()
    yield
    purge_queues()  # the apply tasks the API's commits queued: nobody is to apply these copies
    _delete_copies()


def _copy(rows: list[tuple]) -> float:
    """One COPY of `rows` in one transaction; returns seconds, commit included."""
    columns = sql.SQL(", ").join(sql.Identifier(Event._meta.get_field(name).column) for name in COLUMNS)
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(Event._meta.db_table), columns)
    connection.ensure_connection()
    raw = connection.connection  # psycopg 3, in autocommit: the COPY is its own transaction
    started = time.perf_counter()
    with raw.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)
    return time.perf_counter() - started


def _post_http(base_url: str, token: str, bodies: list[bytes]) -> tuple[float, list[int]]:
    """POST the bodies from CLIENTS threads (body i from thread i mod CLIENTS); returns seconds and the statuses."""
    clients = [Client(base_url, token) for _ in range(CLIENTS)]
    statuses: list[int] = []
    failures: list[bytes] = []
    start = threading.Barrier(CLIENTS + 1)

    def send(k: int) -> None:
        start.wait()
        for body in bodies[k::CLIENTS]:
            status, answer = clients[k].post_events(body)
            statuses.append(status)
            if status != 202:
                failures.append(answer[:500])

    threads = [threading.Thread(target=send, args=(k,)) for k in range(CLIENTS)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    for client in clients:
        client.close()
    assert not failures, failures[:3]
    return seconds, statuses


def _post_in_process(token: str, bodies: list[bytes]) -> float:
    """The same through Django's test client, in this process; the queued tasks go to Redis, not run here. The quota
    is lifted as for the servers (servers.server_env): the same token has just sent the stream over HTTP."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + token)
    celery_app.conf.task_always_eager = False  # tests/conftest.py runs tasks eagerly; here they are only queued
    lifted = override_settings(EVENTS_QUOTA_PER_WINDOW=10**12, EVENTS_QUOTA_BYTES_PER_WINDOW=10**15)
    lifted.enable()
    try:
        started = time.perf_counter()
        for body in bodies:
            response = client.post("/api/v1/events", data=body, content_type="application/cloudevents-batch+json")
            assert response.status_code == 202, response.content[:500]
        return time.perf_counter() - started
    finally:
        celery_app.conf.task_always_eager = True
        lifted.disable()


def _bodies(events: list[dict], source: str) -> list[bytes]:
    renamed = [dict(e, source=source) for e in events]
    return [json.dumps(renamed[i : i + BATCH]).encode() for i in range(0, len(renamed), BATCH)]


def test_ingest_through_the_api_against_copy(clean_copies, stream):
    count = len(stream.events)
    # The baseline's rows, as events_ingest would store them (validated, times parsed); built before the clock runs.
    parsed, problems = parse_events([dict(e, source=COPY_SOURCE) for e in stream.events], max_batch=count)
    assert not problems
    now = timezone.now()
    rows = [
        (
            e.source,
            e.id,
            e.type,
            e.subject,
            e.time,
            now,
            json.dumps(e.data),
            e.data.get("run", ""),
            e.data.get("node", ""),
            "",
        )
        for e in parsed
    ]
    http_bodies = _bodies(stream.events, API_SOURCE)
    inprocess_bodies = _bodies(stream.events, INPROCESS_SOURCE)
    say(
        f"ingest: {count:,} events, {len(http_bodies)} POSTs of {BATCH:,}, "
        f"{sum(map(len, http_bodies)) / 2**20:.0f} MiB of JSON"
    )
    token = api_token("bench-writer", ["events:write"])

    copy_s = _copy(rows)
    with gunicorn(workers=SERVER_WORKERS) as url:
        http_s, statuses = _post_http(url, token, http_bodies)
    inprocess_s = _post_in_process(token, inprocess_bodies)

    assert statuses == [202] * len(http_bodies)
    for source in (COPY_SOURCE, API_SOURCE, INPROCESS_SOURCE):
        assert Event.objects.filter(source=source).count() == count, source
    http_rate, inprocess_rate, copy_rate = count / http_s, count / inprocess_s, count / copy_s
    report("ingest: COPY of the same rows (baseline)", f"{copy_rate:,.0f} events/s")
    report(
        f"ingest: POST /api/v1/events via gunicorn ({SERVER_WORKERS} workers, {CLIENTS} clients), {BATCH:,} a batch",
        f"{http_rate:,.0f} events/s",
        f"COPY {copy_rate:,.0f} events/s",
        f"{http_rate / copy_rate:.3f} of COPY; target >= {TARGET_RATE:,} events/s and >= {TARGET_SHARE} of COPY",
    )
    report(
        "ingest: the same in-process (Django test client, no socket)",
        f"{inprocess_rate:,.0f} events/s",
        f"COPY {copy_rate:,.0f} events/s",
        f"{inprocess_rate / copy_rate:.3f} of COPY",
    )
    # Issue #8's targets. On a machine busy with other work this fails: the figures above say by how much.
    assert http_rate >= TARGET_RATE and http_rate >= TARGET_SHARE * copy_rate, (
        f"{http_rate:,.0f} events/s, {http_rate / copy_rate:.3f} of COPY: the target is {TARGET_RATE:,} events/s "
        f"and {TARGET_SHARE} of COPY"
    )
