"""Alerts from Prometheus Alertmanager (webhook v4) and PagerDuty Events API v2 become FleetOps alerts."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from incidents.domain import intake
from incidents.models import Alert, Incident
from runs.models import Node
from tests.conftest import make_token

AM = "/api/v1/intake/alertmanager"
PD = "/api/v1/intake/pagerduty/v2/enqueue"
ZERO = "0001-01-01T00:00:00Z"


def am_alert(fingerprint="f1", status="firing", ends_at=ZERO, **labels):
    labels = {"alertname": "GPUXidError", "node": "gpu-003", "severity": "critical", **labels}
    return {
        "status": status,
        "labels": labels,
        "annotations": {},
        "startsAt": "2026-11-29T10:00:00.123456789Z",
        "endsAt": ends_at,
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    }


def am_body(*alerts, status="firing"):
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GPUXidError"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "fleetops",
        "groupLabels": {"alertname": "GPUXidError"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


def post_am(client, body):
    return client.post(AM, json.dumps(body), content_type="application/json")


# --- parsing ---------------------------------------------------------------------------------------------


def test_it_parses_a_firing_alert_into_a_finding():
    alerts, problems = intake.alertmanager_parse(am_body(am_alert(instance="x", gpu="3", run="llama-70b")))
    assert problems == []
    (alert,) = alerts
    assert alert.fingerprint == "am:f1"
    assert alert.starts_at == datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)
    assert alert.ends_at is None  # Go's zero time: not ended
    finding = alert.finding()
    assert (finding.kind, finding.severity, finding.node, finding.gpu, finding.run) == (
        "alertmanager",
        "critical",
        "gpu-003",
        3,
        "llama-70b",
    )
    assert finding.summary.startswith("GPUXidError ")
    assert "node=gpu-003" in finding.summary


def test_it_takes_defaults_for_missing_optional_fields():
    alerts, problems = intake.alertmanager_parse(
        {"alerts": [{"labels": {"alertname": "NodeDown", "instance": "gpu-007:9100", "severity": "page"}}]}
    )
    assert problems == []
    finding = alerts[0].finding()
    assert finding.node == "gpu-007"
    assert finding.severity == "warning"  # unknown severities become warning
    assert alerts[0].fingerprint.startswith("am:") and len(alerts[0].fingerprint) == 19  # hashed labels
    again, _ = intake.alertmanager_parse({"alerts": [{"labels": dict(reversed(alerts[0].labels.items()))}]})
    assert again[0].fingerprint == alerts[0].fingerprint


def test_it_prefers_the_summary_annotation():
    raw = am_alert()
    raw["annotations"] = {"summary": "Xid 79 on gpu-003", "description": "GPU fell off the bus"}
    finding = intake.alertmanager_parse(am_body(raw))[0][0].finding()
    assert (finding.summary, finding.explanation) == ("Xid 79 on gpu-003", "GPU fell off the bus")


@pytest.mark.parametrize(
    "body, field",
    [
        ([], ""),
        ("nope", ""),
        ({"version": "4"}, "alerts"),
        ({"alerts": {}}, "alerts"),
        ({"version": "3", "alerts": []}, "version"),
        ({"alerts": ["x"]}, "alerts[0]"),
        ({"alerts": [{"labels": {"a": 1}}]}, "alerts[0].labels"),
        ({"alerts": [{"annotations": {}}]}, "alerts[0].labels"),
        ({"alerts": [{"labels": {"a": "b"}, "status": "gone"}]}, "alerts[0].status"),
        ({"alerts": [{"labels": {"a": "b"}, "startsAt": "yesterday"}]}, "alerts[0].startsAt"),
    ],
)
def test_it_names_the_field_of_a_bad_body(writer, body, field):
    response = writer.post(AM, json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in [e["field"] for e in errors]
    assert all(e["reason"] for e in errors)
    assert not Alert.objects.exists()


# --- the webhook ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_firing_alert_opens_an_incident_and_repeats_fold_into_it(writer):
    Node.objects.create(hostname="gpu-003", state="in_service")
    assert post_am(writer, am_body(am_alert())).json() == {"firing": 1, "resolved": 0}
    assert post_am(writer, am_body(am_alert())).status_code == 200  # Alertmanager re-sends the group
    alert = Alert.objects.get()
    assert (alert.fingerprint, alert.kind, alert.severity, alert.count, alert.node.hostname) == (
        "am:f1",
        "alertmanager",
        "critical",
        1,
        "gpu-003",
    )
    assert alert.incident.status == Incident.Status.TRIGGERED
    post_am(writer, am_body(am_alert(fingerprint="f2", alertname="GPUHot")))
    assert Alert.objects.count() == 2
    assert Incident.objects.count() == 1  # same node: grouped


@pytest.mark.django_db
def test_resolved_resolves_only_that_alert(writer):
    post_am(writer, am_body(am_alert("f1"), am_alert("f2", alertname="GPUHot")))
    now = timezone.now().isoformat().replace("+00:00", "Z")
    assert post_am(writer, am_body(am_alert("f1", status="resolved", ends_at=now))).json()["resolved"] == 1
    assert dict(Alert.objects.values_list("fingerprint", "status")) == {"am:f1": "resolved", "am:f2": "firing"}
    # an endsAt in the past resolves too, even when the status still says firing
    past = (timezone.now() - timedelta(seconds=5)).isoformat()
    post_am(writer, am_body(am_alert("f2", ends_at=past)))
    assert set(Alert.objects.values_list("status", flat=True)) == {"resolved"}
    # firing again after resolution is a new alert
    post_am(writer, am_body(am_alert("f1")))
    assert Alert.objects.filter(fingerprint="am:f1").count() == 2


@pytest.mark.django_db
def test_the_webhook_needs_an_events_write_token(reader):
    assert APIClient().post(AM, json.dumps(am_body(am_alert())), content_type="application/json").status_code == 401
    assert post_am(reader, am_body(am_alert())).status_code == 403
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer fo_nope")
    assert post_am(bad, am_body(am_alert())).status_code == 401
    assert not Alert.objects.exists()


# --- PagerDuty Events API v2 ---------------------------------------------------------------------------------


@pytest.fixture
def routing_key(db):
    return make_token("pd-emitter", ["events:write"])


def pd(client, body):
    return client.post(PD, json.dumps(body), content_type="application/json")


def trigger(key, dedup_key=None, **payload):
    body = {
        "routing_key": key,
        "event_action": "trigger",
        "payload": {
            "summary": "NCCL timeout on llama",
            "source": "gpu-004",
            "severity": "error",
            "component": "nccl",
            "custom_details": {"gpu": 2},
            **payload,
        },
    }
    if dedup_key:
        body["dedup_key"] = dedup_key
    return body


def test_pagerduty_trigger_acknowledge_resolve(routing_key):
    client = APIClient()
    Node.objects.create(hostname="gpu-004", state="in_service")
    response = pd(client, trigger(routing_key, "nccl-1"))
    assert response.status_code == 202
    assert response.json() == {"status": "success", "message": "Event processed", "dedup_key": "nccl-1"}
    assert pd(client, trigger(routing_key, "nccl-1")).status_code == 202  # dedup: counted into the same alert
    alert = Alert.objects.get()
    assert (alert.fingerprint, alert.kind, alert.severity, alert.count, alert.node.hostname) == (
        "pd:nccl-1",
        "pagerduty",
        "error",
        1,
        "gpu-004",
    )

    ack = {"routing_key": routing_key, "event_action": "acknowledge", "dedup_key": "nccl-1"}
    assert pd(client, ack).status_code == 202
    alert.incident.refresh_from_db()
    assert alert.incident.status == Incident.Status.ACKNOWLEDGED
    assert alert.incident.timeline.filter(kind="acknowledged", actor_name="token:pd-emitter").exists()
    assert pd(client, ack).status_code == 202  # already acknowledged: ignored

    assert pd(client, {**ack, "event_action": "resolve"}).status_code == 202
    alert.refresh_from_db()
    assert alert.status == "resolved"


def test_pagerduty_makes_a_dedup_key_when_none_is_sent(routing_key):
    first = pd(APIClient(), trigger(routing_key)).json()["dedup_key"]
    second = pd(APIClient(), trigger(routing_key)).json()["dedup_key"]
    assert first != second
    assert set(Alert.objects.values_list("fingerprint", flat=True)) == {f"pd:{first}", f"pd:{second}"}


def test_pagerduty_resolve_touches_only_its_alert(routing_key):
    pd(APIClient(), trigger(routing_key, "a"))
    pd(APIClient(), trigger(routing_key, "b"))
    pd(APIClient(), {"routing_key": routing_key, "event_action": "resolve", "dedup_key": "a"})
    assert dict(Alert.objects.values_list("fingerprint", "status")) == {"pd:a": "resolved", "pd:b": "firing"}


def test_pagerduty_ack_or_resolve_of_an_unknown_key_is_accepted(routing_key):
    for action in ("acknowledge", "resolve"):
        body = {"routing_key": routing_key, "event_action": action, "dedup_key": "never"}
        assert pd(APIClient(), body).status_code == 202


@pytest.mark.parametrize(
    "change, message",
    [
        ({"event_action": "explode"}, "event_action"),
        ({"routing_key": ""}, "routing_key"),
        ({"payload": None}, "payload"),
        ({"payload": {"source": "x", "severity": "error"}}, "payload.summary"),
        ({"payload": {"summary": "s", "source": "x", "severity": "sev1"}}, "payload.severity"),
        ({"event_action": "resolve"}, "dedup_key"),
    ],
)
def test_pagerduty_rejects_bad_events_like_pagerduty(routing_key, change, message):
    response = pd(APIClient(), {**trigger(routing_key), **change})
    assert response.status_code == 400
    body = response.json()
    assert body["status"] == "invalid event"
    assert any(message in e for e in body["errors"]), body
    assert not Alert.objects.exists()


def test_pagerduty_rejects_a_body_that_is_not_json(db):
    response = APIClient().post(PD, "{nope", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["status"] == "invalid event"


def test_pagerduty_routing_key_must_be_an_events_write_token(db):
    assert pd(APIClient(), trigger("fo_unknown")).status_code == 401
    assert pd(APIClient(), trigger(make_token("ro", ["read"]))).status_code == 403
    assert not Alert.objects.exists()


def _webhook_of(n: int) -> dict:
    """n firing alerts on n nodes of one rack (its own for each n): one incident takes them all."""
    return am_body(*(am_alert(fingerprint=f"f{n}-{i:04d}", node=f"r{n}-gpu-{i:04d}") for i in range(n)))


def _queries_to_post(writer, n: int) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(n):
        Node.objects.get_or_create(hostname=f"r{n}-gpu-{i:04d}", defaults={"rack": f"r{n}"})
    with CaptureQueriesContext(connection) as queries:
        assert post_am(writer, _webhook_of(n)).status_code == 200
    return len(queries)


@pytest.mark.reliability(
    "An Alertmanager webhook with its documented maximum of 1,000 alerts on 1,000 nodes",
    how="posted to the webhook: the database queries counted at 50, 100 and 200 alerts, and the incident refreshes "
    "(each reads every firing alert of its incident); make bench times 1,000",
    outcome="one incident with every alert; each further alert costs about one query at every size and the incident "
    "is refreshed once a webhook, so the cost is linear in the alerts (before: refreshed once an alert, n^2/2 alert "
    "rows read, 3.1 s at 200 nodes; then 13 queries an alert)",
)
def test_the_cost_of_a_webhook_is_linear_in_its_alerts(writer, monkeypatch):
    from incidents import services

    refreshes = []
    refresh = services.incident_refresh
    monkeypatch.setattr(services, "incident_refresh", lambda **kw: refreshes.append(kw) or refresh(**kw))
    counts = {}
    for n in (50, 100, 200):
        refreshes.clear()
        counts[n] = _queries_to_post(writer, n)
        assert Incident.objects.get(group_key=f"rack:r{n}").alerts.count() == n
        assert len(refreshes) == 1
    first, second = (counts[100] - counts[50]) / 50, (counts[200] - counts[100]) / 100
    # One INSERT an alert, and the bulk writes' batches (SQLite binds at most 999 values a statement): about one
    # query a further alert at every size, never more (before findings_record: 13).
    assert 0.9 <= first <= 1.1 and 0.9 <= second <= 1.1, counts
