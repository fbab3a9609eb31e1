"""Per-token quotas on the event intake (runs/quotas.py, issue 15): one noisy sender gets 429 and Retry-After, the
others go on, and what was refused is not counted."""

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from rest_framework.test import APIClient

from runs import services
from runs.models import Event
from tests.conftest import make_token

T = datetime(2026, 3, 1, 12, 0, 1, tzinfo=UTC)  # a second into a 10 s window


def client_of(name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + make_token(name, ["events:write"]))
    return client


def batch(prefix: str, n: int = 10) -> str:
    return json.dumps(
        [
            {
                "specversion": "1.0",
                "id": f"{prefix}-{i}",
                "source": f"agent://{prefix}",
                "type": "node.heartbeat",
                "time": "2026-03-01T12:00:00Z",
                "data": {"node": f"{prefix}-{i}"},
            }
            for i in range(n)
        ]
    )


@pytest.fixture
def quota(settings):
    settings.EVENTS_QUOTA_PER_WINDOW, settings.EVENTS_QUOTA_WINDOW_S = 30, 10.0


@pytest.mark.reliability(
    "One token flooding the intake past its quota while another token posts",
    how="a quota of 30 events per 10 s; the flooder posts four batches of 10, the other token one",
    outcome="the fourth batch gets 429 with Retry-After (the seconds left in the window) and nothing of it is stored; "
    "the other token's batch is accepted; after the window the flooder is accepted again",
)
def test_a_token_over_its_quota_gets_429_and_others_go_on(db, quota):
    flooder, other = client_of("flooder"), client_of("other")
    with time_machine.travel(T, tick=False):
        for i in range(3):
            assert flooder.post("/api/v1/events", batch(f"f{i}"), content_type="application/json").status_code == 202
        refused = flooder.post("/api/v1/events", batch("f3"), content_type="application/json")
        assert refused.status_code == 429 and refused["Retry-After"] == "9"
        assert "30 events every 10 s" in refused.json()["errors"][0]["reason"]
        assert not Event.objects.filter(source="agent://f3").exists()
        assert other.post("/api/v1/events", batch("o"), content_type="application/json").status_code == 202
    with time_machine.travel(T + timedelta(seconds=10), tick=False):
        assert flooder.post("/api/v1/events", batch("f3"), content_type="application/json").status_code == 202
    assert Event.objects.count() == 50


def test_a_batch_that_fails_to_store_counts_nothing(db, quota, monkeypatch):
    client = client_of("unlucky")
    real = services.events_ingest
    monkeypatch.setattr(services, "events_ingest", lambda **kw: (_ for _ in ()).throw(RuntimeError("disk full")))
    with time_machine.travel(T, tick=False):
        for i in range(3):
            with pytest.raises(RuntimeError):
                client.post("/api/v1/events", batch(f"u{i}"), content_type="application/json")
        monkeypatch.setattr(services, "events_ingest", real)
        for i in range(3):
            assert client.post("/api/v1/events", batch(f"v{i}"), content_type="application/json").status_code == 202


def test_a_batch_larger_than_the_quota_is_refused_and_counts_nothing(db, quota):
    """In a window of its own too: the count begins again only where the batch fits."""
    client = client_of("big")
    with time_machine.travel(T, tick=False):
        assert client.post("/api/v1/events", batch("b0", 31), content_type="application/json").status_code == 429
        assert client.post("/api/v1/events", batch("b1", 30), content_type="application/json").status_code == 202
        assert client.post("/api/v1/events", batch("b2", 1), content_type="application/json").status_code == 429
    with time_machine.travel(T + timedelta(seconds=10), tick=False):
        assert client.post("/api/v1/events", batch("b3", 31), content_type="application/json").status_code == 429
        assert client.post("/api/v1/events", batch("b4", 30), content_type="application/json").status_code == 202
    assert Event.objects.count() == 60


def test_no_limit_when_the_quota_is_zero(db, settings):
    settings.EVENTS_QUOTA_PER_WINDOW = 0
    client = client_of("free")
    for i in range(5):
        assert client.post("/api/v1/events", batch(f"z{i}"), content_type="application/json").status_code == 202


def test_every_moment_of_a_window_gives_the_same_start():
    from runs.quotas import window_of

    starts = {window_of(T + timedelta(microseconds=us), 10.0) for us in range(-1_000_000, 8_999_999, 12_347)}
    assert starts == {datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)}
    assert window_of(T + timedelta(seconds=9), 10.0) == datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC)
    assert window_of(datetime(2026, 3, 1, 12, 0, 7, 300000, tzinfo=UTC), 2.5) == datetime(
        2026, 3, 1, 12, 0, 5, tzinfo=UTC
    )


def test_the_alert_intakes_count_against_the_same_quota(db, quota):
    token = make_token("alertmanager", ["events:write"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + token)
    alert = {"status": "firing", "labels": {"alertname": "Xid79", "node": "n1"}, "startsAt": "2026-03-01T12:00:00Z"}
    webhook = {"version": "4", "status": "firing", "alerts": [{**alert, "fingerprint": f"f{i}"} for i in range(25)]}
    pagerduty = {
        "routing_key": token, "event_action": "trigger", "dedup_key": "disk-n2",
        "payload": {"summary": "disk full on n2", "source": "n2", "severity": "warning"},
    }  # fmt: skip
    with time_machine.travel(T, tick=False):
        assert client.post("/api/v1/intake/alertmanager", webhook, format="json").status_code == 200
        again = client.post("/api/v1/intake/alertmanager", webhook, format="json")
        assert again.status_code == 429 and again["Retry-After"] == "9"
        for _ in range(5):
            assert APIClient().post("/api/v1/intake/pagerduty/v2/enqueue", pagerduty, format="json").status_code == 202
        refused = APIClient().post("/api/v1/intake/pagerduty/v2/enqueue", pagerduty, format="json")
        assert refused.status_code == 429 and refused.json()["status"] == "throttled" and refused["Retry-After"] == "9"
