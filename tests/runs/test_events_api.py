"""POST /api/v1/events on the default database, events applied in-process."""

import json
import random

import pytest
from django.test import override_settings

from runs.models import GPU, Attempt, Checkpoint, Event, Interruption, Node, Run
from tests.stories import assert_failure_and_restart_record, at, event, failure_and_restart, record_snapshot

URL = "/api/v1/events"
BATCH = "application/cloudevents-batch+json"


def post(client, body, content_type=BATCH, raw=False):
    payload = body if raw else json.dumps(body)
    return client.post(URL, payload, content_type=content_type)


def counts():
    return [m.objects.count() for m in (Event, Run, Attempt, Interruption, Checkpoint, Node, GPU)]


def test_it_builds_the_record_from_a_failure_and_restart(writer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(writer, failure_and_restart())
    assert response.status_code == 202, response.json()
    assert response.json()["accepted"] == 19 and response.json()["duplicates"] == 0

    assert_failure_and_restart_record()
    assert Event.objects.filter(applied_at__isnull=True).count() == 0


def test_it_answers_duplicates_and_stores_nothing_new(writer, django_capture_on_commit_callbacks):
    batch = failure_and_restart()
    with django_capture_on_commit_callbacks(execute=True):
        post(writer, batch)
    before, snapshot = counts(), record_snapshot()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = post(writer, batch)
    assert response.status_code == 200
    assert response.json()["accepted"] == 0 and response.json()["duplicates"] == len(batch)
    assert {e["status"] for e in response.json()["events"]} == {"duplicate"}
    assert callbacks == []
    assert counts() == before and record_snapshot() == snapshot


def test_it_gives_the_same_record_for_any_order(writer, django_capture_on_commit_callbacks):
    batch = failure_and_restart()
    with django_capture_on_commit_callbacks(execute=True):
        post(writer, batch)
    expected = record_snapshot()
    for seed in (1, 2, 3):
        Run.objects.all().delete(), Node.objects.all().delete(), Event.objects.all().delete()
        shuffled = batch[:]
        random.Random(seed).shuffle(shuffled)
        with django_capture_on_commit_callbacks(execute=True):
            post(writer, shuffled)
        assert record_snapshot() == expected, f"seed {seed}"


def test_it_gives_the_same_record_when_events_arrive_one_by_one_late(writer, django_capture_on_commit_callbacks):
    batch = failure_and_restart()
    with django_capture_on_commit_callbacks(execute=True):
        post(writer, batch)
    expected = record_snapshot()
    Run.objects.all().delete(), Node.objects.all().delete(), Event.objects.all().delete()
    for raw in reversed(batch):
        with django_capture_on_commit_callbacks(execute=True):
            assert post(writer, raw, content_type="application/cloudevents+json").status_code == 202
    assert record_snapshot() == expected


def test_it_accepts_plain_json_content_type(writer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(writer, event("node.heartbeat", at(0), "hb-1", node="n9"), content_type="application/json")
    assert response.status_code == 202
    assert Node.objects.get(hostname="n9").last_heartbeat_at == at(0)


def test_it_rebuilds_the_same_record_from_the_event_log(writer, django_capture_on_commit_callbacks):
    from runs.services import record_rebuild

    with django_capture_on_commit_callbacks(execute=True):
        post(writer, failure_and_restart())
    expected = record_snapshot()
    assert record_rebuild() == 19
    assert record_snapshot() == expected


# --- Bad input: the right status, a message naming the problem, and nothing stored ---


def _problem(response):
    body = response.json()
    return body["detail"], [(e.get("index"), e["field"], e["reason"]) for e in body.get("errors", [])]


def test_it_rejects_malformed_json(writer):
    before = counts()
    response = post(writer, '[{"specversion": "1.0",', raw=True)
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]
    assert counts() == before


def test_it_rejects_a_batch_with_a_missing_attribute_and_stores_none_of_it(writer):
    batch = failure_and_restart()
    del batch[5]["source"]
    before = counts()
    response = post(writer, batch)
    assert response.status_code == 400
    detail, errors = _problem(response)
    assert errors == [(5, "source", "is required")]
    assert "nothing was stored" in detail
    assert counts() == before


def test_it_rejects_wrong_types_naming_each_field(writer):
    batch = failure_and_restart()
    batch[1]["data"]["step"] = "three"
    batch[2]["time"] = "yesterday"
    batch[3]["data"] = []
    before = counts()
    response = post(writer, batch)
    assert response.status_code == 400
    _, errors = _problem(response)
    assert errors == [
        (1, "data.step", "must be an integer"),
        (2, "time", "must be an RFC 3339 timestamp with a time zone, e.g. 2026-01-31T23:59:00Z"),
        (3, "data", "must be a JSON object"),
    ]
    assert counts() == before


def test_it_rejects_an_unknown_event_type(writer):
    before = counts()
    response = post(writer, [event("run.exploded", at(0), "x-1", run="r1")])
    assert response.status_code == 400
    _, errors = _problem(response)
    assert errors[0][:2] == (0, "type") and "unknown event type 'run.exploded'" in errors[0][2]
    assert counts() == before


def test_it_rejects_a_repeated_id_within_one_batch(writer):
    one = event("node.heartbeat", at(0), "same", node="n1")
    response = post(writer, [one, one])
    assert response.status_code == 400
    assert _problem(response)[1] == [(1, "id", "repeats the source and id of event 0 in this batch")]


@override_settings(EVENTS_MAX_BODY_BYTES=2000)
def test_it_rejects_a_too_large_body_with_413(writer):
    before = counts()
    response = post(writer, failure_and_restart())
    assert response.status_code == 413
    assert "over the limit of 2000 bytes" in response.json()["detail"]
    assert counts() == before


def test_it_rejects_a_bad_token_with_401(client, db):
    before = counts()
    response = client.post(
        URL, json.dumps(failure_and_restart()), content_type=BATCH, HTTP_AUTHORIZATION="Bearer fo_not-a-real-token"
    )
    assert response.status_code == 401
    assert response.json()["detail"] == "Unknown API token."
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert counts() == before


def test_it_rejects_a_missing_token_with_401(client, db):
    response = client.post(URL, json.dumps(failure_and_restart()), content_type=BATCH)
    assert response.status_code == 401
    assert "API token is required" in response.json()["detail"]
    assert Event.objects.count() == 0


def test_it_rejects_a_token_without_the_scope_with_403(reader):
    before = counts()
    response = post(reader, failure_and_restart())
    assert response.status_code == 403
    assert response.json()["detail"] == "This token lacks the 'events:write' scope."
    assert counts() == before


def test_it_rejects_a_revoked_token(writer):
    from django.utils import timezone

    from runs.models import ApiToken

    ApiToken.objects.update(revoked_at=timezone.now())
    assert post(writer, failure_and_restart()).status_code == 401


def test_it_refuses_other_content_types(writer):
    response = writer.post(URL, "run=r1", content_type="text/plain")
    assert response.status_code == 415
    assert Event.objects.count() == 0


def test_it_rejects_a_bad_content_length(writer):
    response = writer.generic("POST", URL, b"[]", content_type=BATCH, CONTENT_LENGTH="lots")
    assert response.status_code == 400 and "Content-Length" in response.json()["detail"]


def test_a_checkpoint_retried_after_a_lost_write_blocks_from_the_retry(writer, django_capture_on_commit_callbacks):
    from runs.models import Checkpoint

    events = [
        event("checkpoint.started", at(10), "c1", run="r9", step=100),
        event("checkpoint.failed", at(11), "c2", run="r9", step=100, reason="node lost mid-write"),
        event("checkpoint.started", at(40), "c3", run="r9", step=100),
        event("checkpoint.completed", at(40, 30), "c4", run="r9", step=100, blocking_s=30.0, bytes=1, tier="durable"),
    ]
    for batch in (events, events[::-1]):
        Event.objects.all().delete(), Run.objects.all().delete()
        with django_capture_on_commit_callbacks(execute=True):
            post(writer, batch)
        checkpoint = Checkpoint.objects.get(run__name="r9", step=100)
        assert (checkpoint.status, checkpoint.started_at, checkpoint.failure_reason) == ("completed", at(40), "")


def test_it_refuses_names_and_times_with_a_trailing_newline_or_foreign_digits(writer):
    good = failure_and_restart()[0]
    for field, value in (
        ("data.run", "r1\n"),
        ("data.nodes", ["n1", "n2\n"]),
        ("data.nodes", ["n1\nn2"]),
        ("time", "2026-03-01T00:00:00Z\n"),
        ("time", "٢٠٢٦-03-01T00:00:00Z"),
    ):
        raw = json.loads(json.dumps(good))
        if field == "time":
            raw["time"] = value
        else:
            raw["data"][field.removeprefix("data.")] = value
        response = post(writer, [raw])
        assert response.status_code == 400, (field, value)
        assert [e["field"] for e in response.json()["errors"]] == [field]
    assert Event.objects.count() == 0


@pytest.mark.parametrize(
    ("type_", "field", "value"),
    [
        ("gpu.health", "run", "r1"),  # an agent's event would have made a run
        ("gpu.health", "run", {"name": "r1"}),
        ("run.step", "nodes", ["n1", "a/b", ""]),  # any type's data.nodes became nodes, '/' and '' included
        ("run.step", "node", "n9"),
        ("checkpoint.started", "nodes", ["\u202en1"]),
    ],
)
def test_a_run_or_node_field_an_event_type_does_not_check_is_refused(writer, type_, field, value):
    """The intake reads the run and nodes an event names from data.run, data.node and data.nodes: a type whose schema
    does not check one of them is refused with it (400, the field named), not kept to name subjects unchecked."""
    data = (
        {
            "node": "n1",
            "gpu": 0,
            "temperature_c": 60.0,
            "throttle_reasons": [],
            "nvlink_errors": 0,
            "recovery_action": 0,
        }
        if type_ == "gpu.health"
        else {"run": "r1", "step": 10}
    )
    response = post(writer, [event(type_, at(1), "x1", **data, **{field: value})])
    assert response.status_code == 400
    assert [(e["field"], e["reason"]) for e in response.json()["errors"]] == [
        (f"data.{field}", f"is not a field of {type_}")
    ]
    assert Event.objects.count() == 0


@pytest.mark.reliability(
    "An event whose source and id are each 1,000 four-byte characters",
    how="POST /api/v1/events with source and id of 1,000 '𝔘' each (4,000 bytes in UTF-8), and of 700 each",
    outcome="400 naming source and id and the byte bound; nothing stored (before: within the character limit, so "
    "PostgreSQL's unique index refused the 8,000-byte entry: 500)",
)
@pytest.mark.parametrize("length", [1000, 700])
def test_a_source_or_id_too_many_bytes_for_the_index_is_refused(writer, length):
    raw = event("run.step", at(1), "x", run="r1", step=1)
    raw["source"], raw["id"] = "\U0001d518" * length, "\U0001d518" * length
    response = post(writer, [raw])
    assert response.status_code == 400, response.content
    assert [(e["field"], e["reason"]) for e in response.json()["errors"]] == [
        ("id", f"must be at most 1000 bytes in UTF-8, not {4 * length:,}"),
        ("source", f"must be at most 1000 bytes in UTF-8, not {4 * length:,}"),
    ]
    assert Event.objects.count() == 0
    raw["source"], raw["id"] = "\U0001d518" * 250, "\U0001d518" * 250  # 1,000 bytes each: stored
    assert post(writer, [raw]).status_code == 202
