"""Alertmanager alerts with an `xid` label (contrib/prometheus/dcgm-rules.yml) are Xid occurrences: graded from the
Xid catalog, one FleetOps alert per node, GPU and Xid, counted once per firing episode (startsAt), never cleared by
Alertmanager. Alerts with an `action` label recommend that action."""

import json
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from incidents.domain import intake
from incidents.domain.xid import Action
from incidents.models import Alert, Incident
from runs.models import GPU, Node

AM = "/api/v1/intake/alertmanager"
T0 = "2026-11-29T10:00:00Z"
ZERO = "0001-01-01T00:00:00Z"


def xid_alert(xid="79", starts_at=T0, status="firing", ends_at=ZERO, **labels):
    labels = {"alertname": "DCGMXid", "node": "gpu-017", "gpu": "3", "xid": xid, "severity": "error", **labels}
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"Xid {xid} on gpu-017 GPU 3"},
        "startsAt": starts_at,
        "endsAt": ends_at,
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": "0a1b2c3d4e5f6a7b",
    }


def post(client, *alerts):
    body = {"version": "4", "status": "firing", "receiver": "fleetops", "alerts": list(alerts)}
    response = client.post(AM, json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def parsed(raw: dict) -> intake.AmAlert:
    (alert,), problems = intake.alertmanager_parse({"alerts": [raw]})
    assert problems == []
    return alert


@pytest.fixture
def gpu017(db) -> GPU:
    return GPU.objects.create(node=Node.objects.create(hostname="gpu-017", rack="r17"), index=3)


# --- the finding ---------------------------------------------------------------------------------------------


def test_an_xid_label_makes_an_xid_finding_graded_from_the_catalog():
    alert = parsed(xid_alert(severity="info"))
    finding = alert.finding()
    assert (finding.kind, finding.fingerprint, finding.node, finding.gpu) == (
        "xid",
        "am-xid:gpu-017:3:79",
        "gpu-017",
        3,
    )
    assert (finding.severity, finding.action, finding.recommended_action) == (
        "critical",  # the catalog's, not the label's: the label routes in Alertmanager
        Action.REBOOT_NODE,
        "reboot node, drain",
    )
    assert finding.summary == "Xid 79 on gpu-017 GPU 3: GPU has fallen off the bus"
    assert "clears nothing" in finding.explanation
    assert finding.evidence["xid"] == 79 and finding.evidence["labels"]["alertname"] == "DCGMXid"
    assert finding.episode == datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_the_fingerprint_is_the_node_gpu_and_xid_whatever_the_rule():
    count = parsed(xid_alert()).finding()
    gauge = parsed({**xid_alert(alertname="DCGMXidLastValue"), "fingerprint": "ffff"}).finding()
    other = parsed(xid_alert(xid="48")).finding()
    assert count.fingerprint == gauge.fingerprint != other.fingerprint
    assert other.action == Action.RESET_GPU


@pytest.mark.parametrize("value", ["79.5", "0x4f", "seventy-nine", "", "0", "-79", "٧٩", str(2**31), "9" * 5000])
def test_an_xid_label_that_is_not_an_xid_code_leaves_an_ordinary_alert(value):
    finding = parsed(xid_alert(xid=value)).finding()
    assert (finding.kind, finding.fingerprint, finding.episode) == ("alertmanager", "am:0a1b2c3d4e5f6a7b", None)


def test_a_node_name_too_long_for_a_node_still_fits_the_fingerprint():
    finding = parsed(xid_alert(node="n" * 5000)).finding()
    assert finding.fingerprint.startswith("am-xid:") and len(finding.fingerprint) < 300


@pytest.mark.parametrize(
    "label, action", [("reset_gpu", Action.RESET_GPU), (" Drain_RMA ", Action.DRAIN_RMA), ("watch", Action.WATCH)]
)
def test_an_action_label_is_the_action(label, action):
    raw = xid_alert(alertname="DCGMDoubleBitECC", action=label)
    del raw["labels"]["xid"]
    finding = parsed(raw).finding()
    assert (finding.kind, finding.action) == ("alertmanager", action)


def test_an_action_label_overrides_the_catalog_for_an_xid():
    assert parsed(xid_alert(action="drain_rma")).finding().action == Action.DRAIN_RMA


def test_an_unknown_action_label_is_ignored_and_said_so():
    raw = xid_alert(alertname="DCGMDoubleBitECC", action="rm -rf")
    del raw["labels"]["xid"]
    finding = parsed(raw).finding()
    assert finding.action == Action.NONE
    assert "action label 'rm -rf' is not one of FleetOps' actions" in finding.explanation


# --- recorded ------------------------------------------------------------------------------------------------


def test_an_xid_alert_opens_an_incident_on_its_gpu_with_the_catalogs_action(writer, gpu017):
    assert post(writer, xid_alert()) == {"firing": 1, "resolved": 0}
    alert = Alert.objects.select_related("incident").get()
    assert (alert.kind, alert.fingerprint, alert.node, alert.gpu, alert.severity, alert.count) == (
        "xid",
        "am-xid:gpu-017:3:79",
        gpu017.node,
        gpu017,
        "critical",
        1,
    )
    assert alert.recommended_action == alert.incident.recommended_action == "reboot node, drain"
    assert list(alert.incident.nodes.all()) == [gpu017.node]
    assert alert.evidence["episode"] == "2026-11-29T10:00:00+00:00"


def test_notices_of_one_episode_count_once_and_its_resolved_notice_clears_nothing(writer, gpu017):
    post(writer, xid_alert())
    post(writer, xid_alert())  # group_interval or repeat_interval: the same startsAt
    post(writer, xid_alert(ends_at="2026-11-29T10:04:00Z"))  # Prometheus' endsAt moves on while it fires
    assert post(writer, xid_alert(status="resolved", ends_at="2026-11-29T10:01:00Z")) == {"firing": 0, "resolved": 0}
    alert = Alert.objects.get()
    assert (alert.status, alert.count, alert.resolved_at) == ("firing", 1, None)
    assert alert.incident.is_open


def test_a_new_episode_counts_once_more_on_the_same_alert(writer, gpu017):
    post(writer, xid_alert())
    post(writer, xid_alert(status="resolved", ends_at="2026-11-29T10:01:00Z"))
    post(writer, xid_alert(starts_at="2026-11-29T10:07:00Z"))
    post(writer, xid_alert(starts_at="2026-11-29T10:07:00Z"))  # its repeat
    alert = Alert.objects.get()
    assert (alert.count, alert.first_seen_at, alert.last_seen_at) == (
        2,
        datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
        datetime(2026, 11, 29, 10, 7, tzinfo=UTC),
    )
    assert Incident.objects.count() == 1
    assert alert.evidence["episode"] == "2026-11-29T10:07:00+00:00"


def test_an_older_episode_sent_late_counts_nothing(writer, gpu017):
    post(writer, xid_alert(starts_at="2026-11-29T10:07:00Z"))
    post(writer, xid_alert(starts_at=T0, status="resolved", ends_at="2026-11-29T10:01:00Z"))
    assert Alert.objects.get().count == 1


def test_an_episode_first_heard_of_in_its_resolved_notice_is_counted(writer, gpu017):
    """FleetOps missed the firing notice (it was down past Alertmanager's retries): the Xid still happened."""
    assert post(writer, xid_alert(status="resolved", ends_at="2026-11-29T10:01:00Z"))["resolved"] == 0
    alert = Alert.objects.get()
    assert (alert.kind, alert.status, alert.count) == ("xid", "firing", 1)


def test_an_episode_the_oncall_resolved_is_not_opened_again_by_its_repeat(writer, gpu017):
    from incidents import services

    post(writer, xid_alert())
    alert = Alert.objects.get()
    services.alerts_resolve(at=alert.last_seen_at, reason="GPU reset by ana", fingerprint=alert.fingerprint)
    post(writer, xid_alert())  # Alertmanager's repeat of the episode ana dealt with
    assert list(Alert.objects.values_list("status", "count")) == [("resolved", 1)]
    post(writer, xid_alert(starts_at="2026-11-29T10:30:00Z"))  # the fault again: a new alert
    assert sorted(Alert.objects.values_list("status", "count")) == [("firing", 1), ("resolved", 1)]


def test_different_xids_on_one_gpu_are_different_alerts_in_one_incident(writer, gpu017):
    post(writer, xid_alert(), {**xid_alert(xid="48"), "fingerprint": "other"})
    assert dict(Alert.objects.values_list("fingerprint", "recommended_action")) == {
        "am-xid:gpu-017:3:79": "reboot node, drain",
        "am-xid:gpu-017:3:48": "reset GPU",
    }
    assert Incident.objects.get().recommended_action == "reboot node, drain"  # the critical one's


def test_a_non_xid_alert_gets_its_action_label_and_still_resolves(writer, gpu017):
    ecc = xid_alert(alertname="DCGMDoubleBitECC", action="reset_gpu")
    del ecc["labels"]["xid"]
    post(writer, ecc)
    alert = Alert.objects.select_related("incident").get()
    assert (alert.kind, alert.fingerprint, alert.severity, alert.gpu) == (
        "alertmanager",
        "am:0a1b2c3d4e5f6a7b",
        "error",
        gpu017,
    )
    assert alert.recommended_action == alert.incident.recommended_action == "reset GPU"
    post(writer, {**ecc, "status": "resolved", "endsAt": "2026-11-29T10:05:00Z"})
    assert Alert.objects.get().status == "resolved"


def test_an_unknown_action_label_records_the_alert_without_an_action(writer, gpu017):
    bad = xid_alert(alertname="DCGMDoubleBitECC", action="reboot_everything")
    del bad["labels"]["xid"]
    post(writer, bad)
    alert = Alert.objects.get()
    assert alert.recommended_action == ""
    assert "'reboot_everything' is not one of FleetOps' actions" in alert.explanation


# --- cost ----------------------------------------------------------------------------------------------------


def _queries(writer, n: int, starts_at: str) -> int:
    alerts = [{**xid_alert(node=f"x{n}-{i:03d}", starts_at=starts_at), "fingerprint": f"{n}-{i}"} for i in range(n)]
    with CaptureQueriesContext(connection) as queries:
        post(writer, *alerts)
    return len(queries)


def test_repeats_and_new_episodes_cost_the_same_for_any_number_of_xid_alerts(writer):
    for n in (20, 40):
        Node.objects.bulk_create([Node(hostname=f"x{n}-{i:03d}", rack=f"x{n}") for i in range(n)])
    post(writer, xid_alert(node="elsewhere"))  # the first request's own reads (the token's) out of the counts
    first = {n: _queries(writer, n, T0) for n in (20, 40)}
    repeat = {n: _queries(writer, n, T0) for n in (20, 40)}
    again = {n: _queries(writer, n, "2026-11-29T10:30:00Z") for n in (20, 40)}
    assert repeat[20] == repeat[40], repeat  # nothing written
    assert again[20] == again[40], again  # one bulk update
    assert 0.9 <= (first[40] - first[20]) / 20 <= 1.1, first  # an INSERT a new alert, as for any alert
    assert set(Alert.objects.filter(fingerprint__startswith="am-xid:x").values_list("count", flat=True)) == {2}
