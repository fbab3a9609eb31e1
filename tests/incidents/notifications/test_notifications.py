"""Outgoing notifications: webhooks signed and retried against a real HTTP receiver, payload formats, e-mail, log."""

import hashlib
import hmac
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.utils import timezone

from incidents import services
from incidents.models import Delivery, Incident, WebhookEndpoint
from incidents.notifications import services as notifications
from incidents.notifications import tasks
from tests.stories import story_until_failure, xid_storm

SECRET = "s3cret-hmac-key"
pytestmark = pytest.mark.django_db


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers the scripted statuses in turn (then the last one)."""

    def __init__(self, statuses: list[int]):
        self.statuses = list(statuses)
        self.requests: list[dict] = []  # {"status", "headers" (any case), "body"}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                receiver.requests.append({"status": status, "headers": self.headers, "body": body})
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok" if status < 300 else b"nope")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    started = []

    def start(*statuses: int) -> Receiver:
        started.append(Receiver(list(statuses)))
        return started[-1]

    yield start
    for r in started:
        r.close()


def _endpoint(url="http://127.0.0.1:9/hook", **fields) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(name=fields.pop("name", "hook"), url=url, **fields)


def _incident(**fields) -> Incident:
    now = timezone.now()
    return Incident.objects.create(
        title="Xid 79 on n2", group_key="node:n2", severity="SEV2", started_at=now, detected_at=now, **fields
    )


def _run_until_done(delivery: Delivery) -> list[notifications.Outcome]:
    """What the task does over time: attempt, and attempt again when the backoff has passed."""
    outcomes = []
    for _ in range(20):
        delivery.refresh_from_db()
        outcome = notifications.delivery_attempt(delivery_id=delivery.pk, now=delivery.next_attempt_at)
        outcomes.append(outcome)
        if outcome.retry_in_s is None:
            break
    return outcomes


def _verifies(request: dict, secret: str) -> bool:
    signed = request["headers"]["X-FleetOps-Timestamp"].encode() + b"." + request["body"]
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(request["headers"]["X-FleetOps-Signature"], expected)


def test_it_delivers_once_with_a_valid_signature_after_two_failures(post, receiver):
    hook = receiver(500, 500, 200)
    _endpoint(hook.url, secret=SECRET, events=["triggered"])

    post(story_until_failure() + xid_storm(20))  # the first attempt runs on commit (eager Celery) and gets a 500

    delivery = Delivery.objects.get()
    assert delivery.event == "triggered" and delivery.attempts == 1 and delivery.last_status_code == 500
    outcomes = _run_until_done(delivery)
    assert [o.status for o in outcomes] == ["retry", "delivered"]

    assert [r["status"] for r in hook.requests] == [500, 500, 200]
    (ok,) = [r for r in hook.requests if r["status"] == 200]
    assert _verifies(ok, SECRET)
    body = json.loads(ok["body"])
    incident = Incident.objects.get()
    assert body["event"] == "triggered" and body["incident"]["id"] == incident.pk
    assert body["incident"]["url"].endswith(f"/incidents/{incident.pk}")
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempts == 3 and delivery.last_status_code == 200
    assert delivery.delivered_at is not None and delivery.last_error == ""

    # Delivered is final: another attempt (a duplicate task, the sweeper) sends nothing.
    assert notifications.delivery_attempt(delivery_id=delivery.pk, now=timezone.now() + timedelta(hours=1)).status == (
        "skipped"
    )
    assert len(hook.requests) == 3


def test_it_fails_a_404_without_retrying(receiver):
    hook = receiver(404)
    _endpoint(hook.url, secret=SECRET)
    services.timeline_add(incident=_incident(), kind="opened", text="Opened by hand")

    delivery = Delivery.objects.get()
    assert [o.status for o in _run_until_done(delivery)] == ["failed"]
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempts == 1 and delivery.last_status_code == 404
    assert "HTTP 404" in delivery.last_error
    assert len(hook.requests) == 1


def test_it_gives_up_after_the_attempt_bound(receiver, settings):
    settings.NOTIFY_MAX_ATTEMPTS = 3
    hook = receiver(503)
    _endpoint(hook.url)
    services.timeline_add(incident=_incident(), kind="opened", text="Opened by hand")

    delivery = Delivery.objects.get()
    assert [o.status for o in _run_until_done(delivery)] == ["retry", "retry", "failed"]
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempts == 3 and delivery.last_error.startswith("gave up")
    assert len(hook.requests) == 3


def test_it_retries_a_refused_connection():
    _endpoint("http://127.0.0.1:9/hook")  # the discard port: nothing listens there
    services.timeline_add(incident=_incident(), kind="opened", text="Opened by hand")
    delivery = Delivery.objects.get()
    outcome = notifications.delivery_attempt(delivery_id=delivery.pk)
    assert outcome.status == "retry" and outcome.retry_in_s == 30.0
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.last_error.startswith("connection")


def test_the_task_queues_the_next_attempt_after_the_backoff(receiver, monkeypatch):
    hook = receiver(500)
    _endpoint(hook.url)
    services.timeline_add(incident=_incident(), kind="opened", text="Opened by hand")
    queued = []
    monkeypatch.setattr(tasks.deliver_notification, "apply_async", lambda args, countdown: queued.append(countdown))

    assert tasks.deliver_notification(Delivery.objects.get().pk) == "retry"
    assert tasks.deliver_notification(Delivery.objects.get().pk) == "skipped"  # not due yet: nothing sent
    assert queued == [30.0] and len(hook.requests) == 1


def test_a_claimed_delivery_is_not_sent_by_a_second_worker(receiver):
    hook = receiver(200)
    _endpoint(hook.url)
    services.timeline_add(incident=_incident(), kind="opened", text="Opened by hand")
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(claimed_until=timezone.now() + timedelta(minutes=1))

    assert notifications.delivery_attempt(delivery_id=delivery.pk).status == "skipped"
    assert hook.requests == []


def test_the_same_timeline_entry_never_makes_two_deliveries():
    _endpoint()
    entry = services.timeline_add(incident=_incident(), kind="acknowledged", text="Acknowledged by ana")
    assert notifications.notify(entry) == []  # _entry already notified once
    assert Delivery.objects.filter(entry=entry).count() == 1


def test_events_filter_and_disabled_endpoints():
    _endpoint(name="resolved-only", events=["resolved"])
    _endpoint(name="off", enabled=False)
    _endpoint(name="all")
    incident = _incident()
    services.timeline_add(incident=incident, kind="opened", text="Opened")
    services.timeline_add(incident=incident, kind="note", text="Not an event")
    services.timeline_add(incident=incident, kind="resolved", text="Resolved by ana")
    sent = sorted(Delivery.objects.values_list("endpoint__name", "event"))
    assert sent == [("all", "resolved"), ("all", "triggered"), ("resolved-only", "resolved")]


def test_it_maps_timeline_entries_to_events():
    _endpoint()
    incident = _incident()
    for kind, text in [
        ("opened", "Opened"),
        ("acknowledged", "Acknowledged by ana"),
        ("mitigated", "Run trains again"),
        ("severity", "Severity SEV4 → SEV3 from impact"),
        ("escalated", "Severity SEV3 → SEV2: escalated"),
        ("playbook", "Step drain waits for approval by admin"),
        ("playbook", "Playbook reboot #3 succeeded"),
        ("resolved", "Resolved by ana"),
    ]:
        services.timeline_add(incident=incident, kind=kind, text=text)
    events = list(Delivery.objects.order_by("id").values_list("event", flat=True))
    assert events == [
        "triggered",
        "acknowledged",
        "mitigated",
        "severity_changed",
        "severity_changed",
        "playbook_waiting_approval",
        "resolved",
    ]


def test_a_severity_change_is_sent_with_the_severity_it_changed_to(post):
    """The demo's mail read "[SEV4] ... Severity SEV4 → SEV2 ... severity SEV4": built before the grade was set."""
    _endpoint(url="oncall@example.com", format="email")
    post(story_until_failure())  # 16 GPUs idle: SEV4 → SEV3 from impact
    payload = Delivery.objects.get(event="severity_changed").payload
    assert payload["subject"].startswith("[SEV3] ") and "severity SEV3." in payload["body"]


def test_slack_payload_shape():
    _endpoint(format="slack")
    incident = _incident()
    services.timeline_add(incident=incident, kind="opened", text="Opened by the xid detector")
    payload = Delivery.objects.get().payload
    assert payload["text"].startswith(f"[SEV2] #{incident.pk} Xid 79 on n2 — triggered")
    assert [b["type"] for b in payload["blocks"]] == ["section", "context"]
    assert payload["blocks"][0]["text"]["type"] == "mrkdwn"
    assert f"/incidents/{incident.pk}|" in payload["blocks"][0]["text"]["text"]


def test_pagerduty_payload_shape():
    _endpoint(format="pagerduty", routing_key="R0UT1NG")
    incident = _incident()
    for kind in ("opened", "acknowledged", "severity", "resolved"):
        services.timeline_add(incident=incident, kind=kind, text=kind)
    payloads = [d.payload for d in Delivery.objects.order_by("id")]
    assert [p["event_action"] for p in payloads] == ["trigger", "acknowledge", "trigger", "resolve"]
    first = payloads[0]
    assert first["routing_key"] == "R0UT1NG" and first["dedup_key"] == f"fleetops-incident-{incident.pk}"
    assert first["payload"]["severity"] == "error" and first["payload"]["source"] == "fleetops"
    assert set(first["payload"]) >= {"summary", "source", "severity", "timestamp"}


def test_it_sends_email_through_django_mail():
    _endpoint("sre@example.com, oncall@example.com", format="email")
    incident = _incident()
    services.timeline_add(incident=incident, kind="opened", text="Opened by the xid detector")
    delivery = Delivery.objects.get()

    assert notifications.delivery_attempt(delivery_id=delivery.pk).status == "delivered"
    (message,) = mail.outbox
    assert message.to == ["sre@example.com", "oncall@example.com"]
    assert message.subject.startswith(f"[SEV2] #{incident.pk}") and "Opened by the xid detector" in message.body


PHISH = "<!channel> urgent: re-auth at <https://evil.example/login|https://fleetops.example/login> & retry"


@pytest.mark.reliability(
    "A run.failed reason written to reach people: a Slack <!channel> ping with a disguised link, a newline for mail",
    how="a timeline entry whose text carries <!channel>, a <url|label> link and a newline, delivered to a Slack "
    "endpoint and an e-mail endpoint",
    outcome="Slack gets it escaped (&lt;!channel&gt;: shown, no ping, no link); the mail's subject is one line and the "
    "mail is sent (before: Slack pinged the channel with the link; the mail raised BadHeaderError and stayed "
    "pending, retried every 5 minutes, never sent and never failed)",
)
def test_text_from_a_sender_reaches_slack_and_mail_as_text(settings):
    _endpoint(format="slack", name="slack")
    _endpoint("sre@example.com", format="email", name="mail")
    incident = _incident()
    Incident.objects.filter(pk=incident.pk).update(title="Run r1 stopped: " + PHISH)
    incident.refresh_from_db()
    services.timeline_add(incident=incident, kind="opened", text=PHISH + "\nSubject: forged\r\nBcc: x@evil.example")
    slack = Delivery.objects.get(endpoint__name="slack").payload
    shown = [slack["text"], slack["blocks"][0]["text"]["text"]]
    for text in shown:
        assert "<!channel>" not in text and "<https://evil" not in text and "&lt;!channel&gt;" in text, text
    assert "&amp; retry" in shown[1]
    assert f"/incidents/{incident.pk}|#{incident.pk} Run r1 stopped: &lt;!channel&gt;" in shown[1]  # our own link
    delivery = Delivery.objects.get(endpoint__name="mail")
    assert "\n" not in delivery.payload["subject"] and "\r" not in delivery.payload["subject"]
    assert notifications.delivery_attempt(delivery_id=delivery.pk).status == "delivered"
    (message,) = mail.outbox
    headers = message.message()
    assert headers["Bcc"] is None and message.bcc == [] and message.to == ["sre@example.com"]
    assert "\n" not in message.subject and "\r" not in message.subject


def test_a_message_that_cannot_be_sent_fails_with_its_reason():
    """A delivery stored before subjects were made one line (a newline in it) fails, once, saying why."""
    _endpoint("sre@example.com", format="email")
    services.timeline_add(incident=_incident(), kind="opened", text="x")
    delivery = Delivery.objects.get()
    delivery.payload["subject"] = "two\nlines"
    delivery.save(update_fields=["payload"])
    assert notifications.delivery_attempt(delivery_id=delivery.pk).status == "failed"
    delivery.refresh_from_db()
    assert delivery.status == "failed" and "cannot be sent" in delivery.last_error and not mail.outbox


# --- Pages ------------------------------------------------------------------------------------------------


def _login(client, django_user_model, name, group):
    user = django_user_model.objects.create_user(name, password="s3cret-pass")
    user.groups.add(Group.objects.get(name=group))
    client.force_login(user)
    return client


def _failed_delivery() -> Delivery:
    _endpoint()
    services.timeline_add(incident=_incident(), kind="opened", text="Opened")
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(status="failed", attempts=6, last_error="HTTP 500: boom")
    return delivery


def test_it_shows_the_delivery_log_and_an_admin_retries(client, django_user_model, django_capture_on_commit_callbacks):
    delivery = _failed_delivery()
    _login(client, django_user_model, "ada", "admin")
    page = client.get("/incidents/deliveries")
    assert page.status_code == 200
    assert f'id="delivery-{delivery.pk}"' in page.content.decode() and "HTTP 500: boom" in page.content.decode()
    assert f'id="delivery-retry-{delivery.pk}"' in page.content.decode()

    with django_capture_on_commit_callbacks() as queued:
        response = client.post(f"/incidents/deliveries/{delivery.pk}/retry")
    assert response.status_code == 302 and len(queued) == 1
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.attempts == 0


def test_it_refuses_a_retry_from_a_viewer(client, django_user_model):
    delivery = _failed_delivery()
    _login(client, django_user_model, "vic", "viewer")
    assert 'id="delivery-retry-' not in client.get("/incidents/deliveries").content.decode()
    assert client.post(f"/incidents/deliveries/{delivery.pk}/retry").status_code == 403
    delivery.refresh_from_db()
    assert delivery.status == "failed"


def test_the_incident_page_lists_its_notifications(client, django_user_model):
    delivery = _failed_delivery()
    _login(client, django_user_model, "vic", "viewer")
    html = client.get(f"/incidents/{delivery.incident_id}").content.decode()
    assert 'id="incident-notifications"' in html and f'id="delivery-{delivery.pk}"' in html
