"""Per-token quotas on the event intake (runs/quotas.py, issue 15; bytes: issue 45): one noisy sender gets 429 and
Retry-After, the others go on, and what was refused is not counted."""

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from rest_framework.test import APIClient

from runs import services
from runs.models import ApiToken, Event, TokenQuota
from runs.quotas import quota_take
from tests.conftest import make_token
from tests.services import postgres  # noqa: F401 -- the fixture

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


BYTE_QUOTA = 1_000_000


@pytest.fixture
def byte_quota(settings):
    """The event quota as shipped (100,000 a window), the byte quota at 1 MB a window over bodies of 500 kB at most."""
    settings.EVENTS_QUOTA_PER_WINDOW, settings.EVENTS_QUOTA_WINDOW_S = 100_000, 10.0
    settings.EVENTS_QUOTA_BYTES_PER_WINDOW = BYTE_QUOTA
    settings.EVENTS_MAX_BODY_BYTES = settings.INTAKE_MAX_BODY_BYTES = settings.QUOTA_BYTES_MIN = 500_000


def big_batch(prefix: str, n: int = 50) -> bytes:
    """`n` valid health-check results, each naming its check at the 1,000-character limit in four-byte characters:
    about 4 kB an event, sent as UTF-8 (no escapes), so the body is the size of what is stored."""
    check = "\N{FIRE}" * 1000
    events = [
        {
            "specversion": "1.0",
            "id": f"{prefix}-{i}",
            "source": f"health://{prefix}",
            "type": "healthcheck.result",
            "time": "2026-03-01T12:00:00Z",
            "data": {"node": f"{prefix}-n1", "check": check, "passed": True},
        }
        for i in range(n)
    ]
    return json.dumps(events, ensure_ascii=False).encode()


def post(client: APIClient, body: bytes):
    return client.post("/api/v1/events", body, content_type="application/json")


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


@pytest.mark.parametrize("budget", ["quota", "byte_quota"])
def test_a_batch_that_fails_to_store_counts_nothing(db, budget, request, monkeypatch):
    """Neither its events nor its bytes: after more failed batches than the budget holds, as many as it holds go in."""
    request.getfixturevalue(budget)
    make, fits = (batch, 3) if budget == "quota" else (big_batch, 4)
    client = client_of("unlucky")
    real = services.events_ingest
    monkeypatch.setattr(services, "events_ingest", lambda **kw: (_ for _ in ()).throw(RuntimeError("disk full")))
    with time_machine.travel(T, tick=False):
        for i in range(fits + 1):
            with pytest.raises(RuntimeError):
                post(client, make(f"u{i}"))
        monkeypatch.setattr(services, "events_ingest", real)
        for i in range(fits):
            assert post(client, make(f"v{i}")).status_code == 202
        assert post(client, make(f"v{fits}")).status_code == 429


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


# --- Bytes (issue 45): one token added 443 MB to the database in 15 s inside its event quota. ---


@pytest.mark.reliability(
    "One token sending big but valid events, inside its event quota, past its byte quota",
    how="a byte quota of 1 MB per 10 s beside the event quota of 100,000; the sender posts batches of 50 events of "
    "~4 kB each (a health check's name at its 1,000-character limit), another token one such batch",
    outcome="the fifth batch (200 events sent, 0.2% of the event quota) gets 429 with Retry-After and a reason naming "
    "the 1,000,000 bytes; nothing of it stored; the other token's batch accepted; after the window the sender is "
    "accepted again (before: every batch accepted, 443 MB in 15 s from one token)",
)
def test_a_token_over_its_byte_quota_gets_429_while_its_events_are_far_inside(db, byte_quota):
    sender, other = client_of("sender"), client_of("other")
    body = big_batch("s0")
    assert 4 * len(body) <= BYTE_QUOTA < 5 * len(body)
    with time_machine.travel(T, tick=False):
        for i in range(4):
            assert post(sender, big_batch(f"s{i}")).status_code == 202
        refused = post(sender, big_batch("s4"))
        assert refused.status_code == 429 and refused["Retry-After"] == "9"
        reason = refused.json()["errors"][0]["reason"]
        assert "1,000,000 bytes every 10 s" in reason and "nothing of this batch was stored" in reason
        assert not Event.objects.filter(source="health://s4").exists()
        assert post(other, big_batch("o")).status_code == 202
    quota = TokenQuota.objects.get(token__name="sender")
    assert (quota.used, quota.used_bytes) == (200, 4 * len(body))  # the event count far inside its 100,000
    with time_machine.travel(T + timedelta(seconds=10), tick=False):
        assert post(sender, big_batch("s4")).status_code == 202
    assert Event.objects.count() == 300


def test_a_token_s_own_byte_quota_overrides_the_default(db, byte_quota):
    free, roomy = client_of("free"), client_of("roomy")
    ApiToken.objects.filter(name="free").update(quota_bytes=0)  # no limit
    ApiToken.objects.filter(name="roomy").update(quota_bytes=2 * BYTE_QUOTA)
    with time_machine.travel(T, tick=False):
        for i in range(12):
            assert post(free, big_batch(f"f{i}")).status_code == 202
        for i in range(9):
            assert post(roomy, big_batch(f"r{i}")).status_code == 202
        refused = post(roomy, big_batch("r9"))
        assert refused.status_code == 429 and "2,000,000 bytes" in refused.json()["errors"][0]["reason"]


def test_the_alert_intakes_count_their_bytes_against_the_same_quota(db, byte_quota):
    token = make_token("alertmanager", ["events:write"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + token)
    description = "\N{FIRE}" * 100_000  # 400 kB of annotation, kept as the alert's evidence
    alert = {
        "status": "firing", "labels": {"alertname": "DiskFull", "node": "n1"}, "startsAt": "2026-03-01T12:00:00Z",
        "annotations": {"description": description},
    }  # fmt: skip
    webhook = {"version": "4", "status": "firing", "alerts": [{**alert, "fingerprint": "f1"}]}
    pagerduty = {
        "routing_key": token, "event_action": "trigger", "dedup_key": "disk-n2",
        "payload": {"summary": "disk full on n2", "source": "n2", "severity": "warning",
                    "custom_details": {"df": description}},
    }  # fmt: skip

    def send(url: str, body: dict, sender: APIClient):
        return sender.post(url, json.dumps(body, ensure_ascii=False).encode(), content_type="application/json")

    with time_machine.travel(T, tick=False):
        assert send("/api/v1/intake/alertmanager", webhook, client).status_code == 200
        assert send("/api/v1/intake/pagerduty/v2/enqueue", pagerduty, APIClient()).status_code == 202
        refused = send("/api/v1/intake/alertmanager", webhook, client)
        assert refused.status_code == 429 and "1,000,000 bytes" in refused.json()["errors"][0]["reason"]
        refused = send("/api/v1/intake/pagerduty/v2/enqueue", pagerduty, APIClient())
        assert refused.status_code == 429 and refused.json()["status"] == "throttled" and refused["Retry-After"] == "9"
        assert "routing_key may send 1,000,000 bytes" in refused.json()["errors"][0]


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_cannot_both_take_the_last_bytes(postgres, byte_quota):  # noqa: F811
    """16 threads, each with its own PostgreSQL connection, ask for 100 kB at once, 8 times each: the 1 MB budget
    lets exactly 10 through, however the statements interleave."""
    make_token("racer", ["events:write"])
    token = ApiToken.objects.get(name="racer")
    taken, start = [], threading.Barrier(16)

    def race():
        start.wait()
        try:
            for _ in range(8):
                taken.append(quota_take(token=token, count=1, size=100_000, now=T) is None)
        finally:
            connection.close()

    threads = [threading.Thread(target=race) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert taken.count(True) == 10 and len(taken) == 128
    assert TokenQuota.objects.get(token=token).used_bytes == BYTE_QUOTA


def test_the_default_byte_quota_leaves_heavy_senders_far_inside(settings):
    """Ten times a 1,024-rank job's clients at their busiest (a gradient norm a rank a second, steps of 0.1 s, and a
    step time every 10 s), as the client sends them, and ten of the largest bodies, fit in one window."""
    run, node = "llama3-405b-pretrain-2026-03", "gpu-a100-node-0127"

    def sample(kind: str, rank: int, step: int, **data) -> dict:
        return {
            "specversion": "1.0", "id": f"{run}:1a2b3c4d5e6f:{kind}:{step}", "type": kind,
            "source": f"fleetops-client://{run}/rank-{rank}", "time": "2026-03-01T12:00:00.123Z",
            "data": {"run": run, "rank": rank, "node": node, "step": step, **data},
        }  # fmt: skip

    events = [
        sample("rank.grad_norm", rank, 1_234_560 + 10 * s, value=1.23456789) for rank in range(1024) for s in range(10)
    ]
    events += [
        sample("rank.step_time", rank, 1_234_659, seconds=0.1234567, steps=100, dropped=0) for rank in range(1024)
    ]
    window = sum(len(json.dumps(events[i : i + 500], separators=(",", ":"))) for i in range(0, len(events), 500))
    assert 10 * window * settings.EVENTS_QUOTA_WINDOW_S / 10 <= settings.EVENTS_QUOTA_BYTES_PER_WINDOW
    assert 10 * settings.EVENTS_MAX_BODY_BYTES <= settings.EVENTS_QUOTA_BYTES_PER_WINDOW
