"""The CloudEvents HTTP binding (1.0.2) in its three modes, spoken by the official CloudEvents SDK for Python.

Structured (one event as JSON), batched (a JSON array) and binary (attributes as ce-* headers, data as the body) go
through the same checks and give the same record; binary mode is refused and answered like the others.
"""

import json
from datetime import datetime

import pytest
import requests
from cloudevents.core.bindings.http import to_binary, to_structured
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from cloudevents.v1.conversion import to_binary as legacy_to_binary
from cloudevents.v1.http import CloudEvent as LegacyCloudEvent
from django.test import override_settings

from runs.models import Event, Node, Run
from tests.conftest import make_token
from tests.stories import assert_failure_and_restart_record, failure_and_restart, record_snapshot

URL = "/api/v1/events"
FORMAT = JSONFormat()


def sdk_event(raw: dict) -> CloudEvent:
    """A FleetOps event (tests.stories' dict) as the SDK's own CloudEvent object."""
    attributes = {k: v for k, v in raw.items() if k != "data"}
    attributes["time"] = datetime.fromisoformat(raw["time"].replace("Z", "+00:00"))
    return CloudEvent(attributes=attributes, data=raw["data"])


def post_binary(client, event: CloudEvent):
    message = to_binary(event, FORMAT)
    headers = {k: v for k, v in message.headers.items() if k.lower() != "content-type"}
    # The SDK sets no Content-Type for a dict without datacontenttype: the request carries none.
    return client.generic(
        "POST", URL, message.body, content_type=message.headers.get("content-type", ""), headers=headers
    )


def post_structured(client, event: CloudEvent):
    message = to_structured(event, FORMAT)
    return client.generic("POST", URL, message.body, content_type=message.headers["content-type"])


def post_batch(client, events: list[CloudEvent]):
    body = json.dumps([json.loads(FORMAT.write(event)) for event in events])
    return client.generic("POST", URL, body, content_type="application/cloudevents-batch+json")


def stored_events() -> list[tuple]:
    return list(Event.objects.order_by("source", "event_id").values_list("source", "event_id", "type", "time", "data"))


def wipe():
    Run.objects.all().delete(), Node.objects.all().delete(), Event.objects.all().delete()


def test_binary_structured_and_batched_modes_give_the_same_record(writer, django_capture_on_commit_callbacks):
    events = [sdk_event(raw) for raw in failure_and_restart()]
    records = {}
    for mode in ("structured", "binary", "batched"):
        wipe()
        with django_capture_on_commit_callbacks(execute=True):
            if mode == "batched":
                responses = [post_batch(writer, events)]
            else:
                post = post_binary if mode == "binary" else post_structured
                responses = [post(writer, event) for event in events]
        assert [r.status_code for r in responses] == [202] * len(responses), [r.content for r in responses]
        records[mode] = (record_snapshot(), stored_events())
    assert records["binary"] == records["structured"] == records["batched"]
    assert_failure_and_restart_record()


def test_binary_mode_decodes_percent_encoded_attributes_as_the_sdk_writes_them(
    writer, django_capture_on_commit_callbacks
):
    raw = failure_and_restart()[0]
    raw |= {"source": 'slurm://clüster "east"/100%', "subject": "job 100 · attempt 1"}
    with django_capture_on_commit_callbacks(execute=True):
        response = post_binary(writer, sdk_event(raw))
    assert response.status_code == 202, response.content
    stored = Event.objects.get()
    assert (stored.source, stored.subject) == (raw["source"], raw["subject"])


def test_the_legacy_sdk_api_in_binary_mode_is_taken_too(writer, django_capture_on_commit_callbacks):
    raw = failure_and_restart()[0]
    attributes = {k: v for k, v in raw.items() if k != "data"}
    headers, body = legacy_to_binary(LegacyCloudEvent(attributes, raw["data"]))
    with django_capture_on_commit_callbacks(execute=True):
        response = writer.generic(
            "POST", URL, body, content_type=headers.pop("content-type", ""), headers=dict(headers)
        )
    assert response.status_code == 202, response.content
    assert Run.objects.filter(name="r1").exists()


def test_a_binary_duplicate_is_a_duplicate_of_the_structured_event(writer, django_capture_on_commit_callbacks):
    event = sdk_event(failure_and_restart()[0])
    with django_capture_on_commit_callbacks(execute=True):
        assert post_structured(writer, event).status_code == 202
    response = post_binary(writer, event)
    assert response.status_code == 200
    assert response.json()["events"] == [{"id": event.get_id(), "source": event.get_source(), "status": "duplicate"}]
    assert Event.objects.count() == 1


def test_binary_mode_refuses_what_structured_mode_refuses_with_the_same_problems(writer):
    raw = failure_and_restart()[0]
    raw["type"] = "run.exploded"
    raw["data"] = {k: v for k, v in raw["data"].items() if k != "cluster"}
    structured = writer.post(URL, json.dumps(raw), content_type="application/json")
    binary = post_binary(writer, sdk_event(raw))
    assert structured.status_code == binary.status_code == 400
    assert binary.json() == structured.json()
    assert binary.json()["errors"][0]["field"] == "type"
    assert Event.objects.count() == 0


def headers_of(raw: dict) -> dict:
    return {f"ce-{k}": v for k, v in raw.items() if k != "data"}


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            lambda h: h.pop("ce-specversion") and h.update({"ce-specversion": "0.3"}),
            "specversion",
            "must be one of: 1.0",
        ),
        (lambda h: h.pop("ce-time"), "time", "is required"),
        (lambda h: h.update({"ce-source": "clüster"}), "source", "must be percent-encoded printable ASCII"),
        (lambda h: h.update({"ce-id": "%FF%FE"}), "id", "percent-encoded bytes are not UTF-8"),
    ],
)
def test_binary_mode_names_the_attribute_that_is_wrong(writer, change, field, reason):
    raw = failure_and_restart()[0]
    headers = headers_of(raw)
    change(headers)
    response = writer.generic("POST", URL, json.dumps(raw["data"]), content_type="application/json", headers=headers)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == [field] and reason in errors[0]["reason"], errors
    assert Event.objects.count() == 0


def test_binary_mode_without_a_body_says_data_is_required(writer):
    headers = headers_of(failure_and_restart()[0])
    response = writer.generic("POST", URL, b"", content_type="", headers=headers)
    assert response.status_code == 400
    assert response.json()["errors"] == [{"index": 0, "field": "data", "reason": "is required"}]


@pytest.mark.parametrize("content_type", ["application/xml", "application/octet-stream"])
def test_binary_mode_takes_only_json_data(writer, content_type):
    raw = failure_and_restart()[0]
    response = writer.generic("POST", URL, json.dumps(raw["data"]), content_type=content_type, headers=headers_of(raw))
    assert response.status_code == 415
    assert content_type in response.json()["detail"] and "binary-mode data must be JSON" in response.json()["detail"]
    assert Event.objects.count() == 0


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json; charset=utf-8",
        "application/vnd.fleetops+json",
        "text/plain",  # wsgiref (runserver, Django's live server) reports a missing Content-Type as text/plain
    ],
)
def test_binary_mode_takes_json_data_under_these_media_types(writer, django_capture_on_commit_callbacks, content_type):
    raw = failure_and_restart()[0]
    with django_capture_on_commit_callbacks(execute=True):
        response = writer.generic(
            "POST", URL, json.dumps(raw["data"]), content_type=content_type, headers=headers_of(raw)
        )
    assert response.status_code == 202, response.content


def test_binary_mode_text_that_is_not_json_is_refused_as_such(writer):
    response = writer.generic(
        "POST", URL, "run r1 started", content_type="text/plain", headers=headers_of(failure_and_restart()[0])
    )
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["detail"]


def test_binary_mode_data_goes_through_the_strict_json_reader(writer):
    raw = failure_and_restart()[0]
    body = '{"run": "r1", "run": "r2"}'
    response = writer.generic("POST", URL, body, content_type="application/json", headers=headers_of(raw))
    assert response.status_code == 400
    assert "appears twice" in response.json()["detail"]


@override_settings(EVENTS_MAX_BODY_BYTES=100)
def test_binary_mode_keeps_the_body_limit(writer):
    raw = failure_and_restart()[0]
    response = writer.generic("POST", URL, json.dumps(raw["data"]), content_type="", headers=headers_of(raw))
    assert response.status_code == 413
    assert Event.objects.count() == 0


def test_a_structured_cloudevents_body_ignores_stray_ce_headers(writer, django_capture_on_commit_callbacks):
    """Content-Type decides the mode (HTTP binding section 3.1): a structured body with ce-* headers is structured."""
    raw = failure_and_restart()[0]
    with django_capture_on_commit_callbacks(execute=True):
        response = writer.generic(
            "POST",
            URL,
            json.dumps(raw),
            content_type="application/cloudevents+json",
            headers={"ce-specversion": "1.0", "ce-id": "other"},
        )
    assert response.status_code == 202, response.content
    assert Event.objects.get().event_id == raw["id"]


@pytest.mark.django_db(transaction=True)
def test_a_real_http_server_takes_the_sdks_binary_mode(live_server):
    """Headers through a real WSGI server, as the SDK's users send them with requests."""
    token = make_token("binary", ["events:write"])
    event = sdk_event(failure_and_restart()[0])
    message = to_binary(event, FORMAT)
    response = requests.post(
        f"{live_server.url}{URL}",
        data=message.body,
        headers={**message.headers, "Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 202, response.text
    stored = Event.objects.get()
    assert (stored.source, stored.event_id, stored.type) == (event.get_source(), event.get_id(), event.get_type())
