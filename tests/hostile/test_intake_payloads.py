"""Alertmanager (webhook v4) and PagerDuty (Events API v2) payloads with each required field missing, and with
unknown fields added: a missing one is a 400 that names it with nothing stored; an unknown one is accepted, as the
senders add fields between versions."""

import copy
import json

import pytest
from rest_framework.test import APIClient

from incidents.models import Alert, Incident, TimelineEntry
from runs.models import Event
from tests.conftest import make_token

AM = "/api/v1/intake/alertmanager"
PD = "/api/v1/intake/pagerduty/v2/enqueue"


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in (Event, Alert, Incident, TimelineEntry)}


def am_body() -> dict:
    """Every field of a version 4 webhook, as Alertmanager 0.27 sends it."""
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GPUXidError"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "fleetops",
        "groupLabels": {"alertname": "GPUXidError"},
        "commonLabels": {"alertname": "GPUXidError"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "GPUXidError", "node": "gpu-003", "severity": "critical"},
                "annotations": {"summary": "Xid 79 on gpu-003"},
                "startsAt": "2026-11-29T10:00:00.123456789Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus/graph",
                "fingerprint": "c0ffee",
            }
        ],
    }


def pd_body(token: str, action: str = "trigger") -> dict:
    body = {
        "routing_key": token,
        "event_action": action,
        "dedup_key": "gpu-003-xid79",
        "payload": {
            "summary": "Xid 79 on gpu-003",
            "source": "gpu-003",
            "severity": "critical",
            "timestamp": "2026-11-29T10:00:00Z",
            "component": "gpu",
            "group": "rack-1",
            "class": "xid",
            "custom_details": {"gpu": "3", "xid": 79},
        },
    }
    if action != "trigger":
        del body["payload"]
    return body


def _without(body: dict, path: str) -> dict:
    body = copy.deepcopy(body)
    *parents, last = path.split(".")
    node = body
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    del node[last]
    return body


@pytest.fixture
def am(db) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + make_token("am", ["events:write"]))
    return client


def post_am(client, body):
    return client.post(AM, json.dumps(body), content_type="application/json")


def post_pd(body):
    return APIClient().post(PD, json.dumps(body), content_type="application/json")


@pytest.mark.reliability(
    "Alertmanager webhooks without `alerts`, without an alert's `labels`, with empty labels, or with labels that "
    "are not strings",
    how="a full version 4 payload with the field taken out (or spoiled), posted to the webhook",
    outcome="400 naming the field; nothing stored",
)
@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: _without(b, "alerts"), "alerts"),
        (lambda b: _without(b, "alerts.0.labels") | {"commonLabels": {}}, "alerts[0].labels"),
        (lambda b: {**b, "commonLabels": {}, "alerts": [{**b["alerts"][0], "labels": {}}]}, "alerts[0].labels"),
        (lambda b: {**b, "alerts": [{**b["alerts"][0], "labels": {"gpu": 3}}]}, "alerts[0].labels"),
        (lambda b: {**b, "alerts": "c0ffee"}, "alerts"),
        (lambda b: {**b, "alerts": [{**b["alerts"][0], "status": "on fire"}]}, "alerts[0].status"),
        (lambda b: {**b, "alerts": [{**b["alerts"][0], "startsAt": "yesterday"}]}, "alerts[0].startsAt"),
        (
            lambda b: {**b, "alerts": [{**b["alerts"][0], "startsAt": "0001-01-01T00:00:00+01:00"}]},
            "alerts[0].startsAt",
        ),
        (lambda b: {**b, "version": "3"}, "version"),
    ],
    ids=["alerts", "labels", "empty labels", "int label", "alerts not a list", "status", "startsAt", "year 0", "v3"],
)
def test_it_refuses_an_alertmanager_payload_missing_a_required_field(am, change, field):
    before = counts()
    response = post_am(am, change(am_body()))
    assert response.status_code == 400, response.content[:300]
    assert field in {e["field"] for e in response.json()["errors"]}, response.json()
    assert counts() == before


@pytest.mark.reliability(
    "Alertmanager webhooks with each optional field missing, and with unknown fields at both levels",
    how="a full version 4 payload with one optional field taken out, or unknown fields added",
    outcome="200, the alert stored once",
)
@pytest.mark.parametrize(
    "missing",
    [
        *(k for k in am_body() if k not in ("alerts", "commonLabels")),
        *(f"alerts.0.{k}" for k in am_body()["alerts"][0] if k != "labels"),
        "",
    ],
)
def test_it_accepts_an_alertmanager_payload_without_an_optional_field_or_with_unknown_ones(am, missing):
    body = _without(am_body(), missing) if missing else am_body()
    body["x-unknown"] = {"nested": [1, 2**64, None]}
    body["alerts"][0]["x-unknown"] = "yes"
    response = post_am(am, body)
    assert response.status_code == 200, response.content[:300]
    assert response.json() == {"firing": 1, "resolved": 0}
    assert Alert.objects.filter(fingerprint__startswith="am:").count() == 1


@pytest.mark.reliability(
    "PagerDuty events without routing_key, event_action, payload, payload.summary, payload.source, "
    "payload.severity, or (to acknowledge and resolve) dedup_key; a bad timestamp",
    how="a full Events API v2 body with the field taken out (or spoiled), posted to the enqueue endpoint",
    outcome="400 in PagerDuty's error shape naming the field; nothing stored",
)
@pytest.mark.parametrize(
    ("action", "missing", "field"),
    [
        ("trigger", "routing_key", "routing_key"),
        ("trigger", "event_action", "event_action"),
        ("trigger", "payload", "payload"),
        ("trigger", "payload.summary", "payload.summary"),
        ("trigger", "payload.source", "payload.source"),
        ("trigger", "payload.severity", "payload.severity"),
        ("acknowledge", "dedup_key", "dedup_key"),
        ("resolve", "dedup_key", "dedup_key"),
    ],
)
def test_it_refuses_a_pagerduty_event_missing_a_required_field(db, action, missing, field):
    body = _without(pd_body(make_token("pd", ["events:write"]), action), missing)
    before = counts()
    response = post_pd(body)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["status"] == "invalid event"
    assert any(f"'{field}'" in error for error in response.json()["errors"]), response.json()
    assert counts() == before


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: {**b, "payload": {**b["payload"], "timestamp": "2026-02-30T00:00:00Z"}}, "payload.timestamp"),
        (lambda b: {**b, "payload": {**b["payload"], "severity": "sev1"}}, "payload.severity"),
        (lambda b: {**b, "dedup_key": "k" * 256}, "dedup_key"),
        (lambda b: {**b, "event_action": "explode"}, "event_action"),
        (lambda b: {**b, "payload": "Xid 79"}, "payload"),
    ],
    ids=["timestamp", "severity", "dedup_key too long", "event_action", "payload not an object"],
)
def test_it_refuses_a_pagerduty_event_with_a_bad_field(db, change, field):
    body = change(pd_body(make_token("pd", ["events:write"])))
    before = counts()
    response = post_pd(body)
    assert response.status_code == 400, response.content[:300]
    assert any(f"'{field}'" in error for error in response.json()["errors"]), response.json()
    assert counts() == before


@pytest.mark.reliability(
    "PagerDuty events without their optional fields, with unknown fields at both levels, and with odd values "
    "in custom_details (a GPU of 2**64, 10**30 as a number)",
    how="a full Events API v2 trigger changed one way at a time",
    outcome="202 and one alert stored; a GPU index out of range is dropped, not stored as an integer",
)
@pytest.mark.parametrize(
    "change",
    [
        lambda b: _without(b, "dedup_key"),
        lambda b: _without(b, "payload.timestamp"),
        lambda b: _without(b, "payload.custom_details"),
        lambda b: _without(b, "payload.component") | {"client": "Prometheus", "client_url": "http://p", "links": []},
        lambda b: {**b, "x-unknown": 1, "payload": {**b["payload"], "x-unknown": {"a": [None]}}},
        lambda b: {**b, "payload": {**b["payload"], "custom_details": {"gpu": 2**64, "n": 10**30}}},
        lambda b: {**b, "payload": {**b["payload"], "custom_details": "free text"}},
    ],
    ids=["no dedup_key", "no timestamp", "no custom_details", "extra top-level", "unknown", "huge ints", "text"],
)
def test_it_accepts_a_pagerduty_event_without_optional_fields_or_with_unknown_ones(db, change):
    response = post_pd(change(pd_body(make_token("pd", ["events:write"]))))
    assert response.status_code == 202, response.content[:300]
    alert = Alert.objects.get(fingerprint__startswith="pd:")
    assert alert.gpu is None or alert.gpu.index == 3
