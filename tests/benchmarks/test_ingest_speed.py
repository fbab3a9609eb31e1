"""The simulated run's stream through POST /api/v1/events, 1,000 events a batch, against a plain COPY of the same
rows into the same table: events per second accepted (committed to the Event table)."""

import json
import time
from unittest import mock

import pytest
from django.db import connection
from django.utils import timezone
from psycopg import sql
from rest_framework.test import APIClient

from runs.domain.cloudevents import parse_events
from runs.models import Event

from .conftest import api_token, report, say

BATCH = 1000  # what `manage.py simulate --url` posts
# Sources of their own, so that the stream's ids are new to the table and the copies can be removed afterwards.
API_SOURCE = "fleetops/bench-api"
COPY_SOURCE = "fleetops/bench-copy"
COLUMNS = ("source", "event_id", "type", "subject", "time", "received_at", "data", "run_name", "node_name", "error")


def _delete_copies() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("DELETE FROM {} WHERE source IN (%s, %s)").format(sql.Identifier(Event._meta.db_table)),
            [API_SOURCE, COPY_SOURCE],
        )


@pytest.fixture
def clean_copies(bench_database):
    _delete_copies()  # left by an interrupted run
    yield
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


def _post(client: APIClient, bodies: list[bytes]) -> float:
    """POST each body; returns seconds. Applying is left out: the task each commit queues is not run."""
    with mock.patch("runs.tasks.apply_events") as queued:
        started = time.perf_counter()
        for body in bodies:
            response = client.post("/api/v1/events", data=body, content_type="application/cloudevents-batch+json")
            assert response.status_code == 202, response.content[:500]
        seconds = time.perf_counter() - started
    assert queued.delay.call_count > 0
    return seconds


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
    api_events = [dict(e, source=API_SOURCE) for e in stream.events]
    bodies = [json.dumps(api_events[i : i + BATCH]).encode() for i in range(0, count, BATCH)]
    say(f"ingest: {count:,} events, {len(bodies)} POSTs of {BATCH:,}, {sum(map(len, bodies)) / 2**20:.0f} MiB of JSON")

    copy_s = _copy(rows)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + api_token("bench-writer", ["events:write"]))
    api_s = _post(client, bodies)

    assert Event.objects.filter(source=COPY_SOURCE).count() == count
    assert Event.objects.filter(source=API_SOURCE).count() == count
    api_rate, copy_rate = count / api_s, count / copy_s
    report("ingest: COPY of the same rows (baseline)", f"{copy_rate:,.0f} events/s")
    report(
        f"ingest: POST /api/v1/events, {BATCH:,} a batch",
        f"{api_rate:,.0f} events/s",
        f"COPY {copy_rate:,.0f} events/s",
        f"{api_rate / copy_rate:.3f} of COPY ({copy_rate / api_rate:.0f}x slower)",
    )
