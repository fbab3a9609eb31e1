"""Outgoing notifications: incident events sent to webhooks (generic JSON, Slack, PagerDuty Events v2) and e-mail.

Which timeline entries are events (EVENT_OF_KIND, plus a playbook step waiting for approval):

    opened -> triggered, acknowledged, mitigated, resolved, severity and escalated -> severity_changed, paged,
    playbook entries saying "waits for approval" -> playbook_waiting_approval.

`notify` runs inside the transaction that writes the entry: it stores one Delivery per matching endpoint (unique per
endpoint and entry, so an event is sent at most once per endpoint) and queues the sending on commit. `delivery_attempt`
claims the row with a conditional update, sends once, and records the outcome; the task retries a transient failure
(5xx, 429, connection error) with exponential backoff, at most settings.NOTIFY_MAX_ATTEMPTS attempts in all.

A signed webhook carries `X-FleetOps-Timestamp: <unix seconds>` and `X-FleetOps-Signature: sha256=<hex>`, the
HMAC-SHA256 with the endpoint's secret of `<timestamp>.<raw body>`.
"""

import hashlib
import hmac
import json
import smtplib
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import BadHeaderError, send_mail
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from fleetops.celery import task_named
from incidents.models import Delivery, Incident, TimelineEntry, WebhookEndpoint

EVENTS = (
    "triggered",
    "acknowledged",
    "mitigated",
    "resolved",
    "severity_changed",
    "playbook_waiting_approval",
    "paged",
)
EVENT_OF_KIND = {
    "opened": "triggered",
    "acknowledged": "acknowledged",
    "mitigated": "mitigated",
    "resolved": "resolved",
    "severity": "severity_changed",
    "escalated": "severity_changed",
    "paged": "paged",  # automation stopped and wants a person (the playbook circuit breaker)
}
# playbooks._timeline writes "Step <name> waits for approval by <role>"; the text is the only mark it leaves.
_WAITING_TEXT = "waits for approval"
# A worker holds a claimed delivery this long; longer than any send (NOTIFY_TIMEOUT_S) so two never overlap.
_LEASE = timedelta(minutes=5)
_PAGERDUTY_ACTION = {"acknowledged": "acknowledge", "resolved": "resolve"}  # anything else updates the alert
_PAGERDUTY_SEVERITY = {"SEV1": "critical", "SEV2": "error", "SEV3": "warning", "SEV4": "info"}
USER_AGENT = "FleetOps-Webhooks/1"


@dataclass(frozen=True)
class Outcome:
    """What one attempt did. `retry_in_s`: seconds until the next attempt, None when there is none to make."""

    status: str  # delivered, failed, retry, or skipped (not due, or another worker got there first)
    retry_in_s: float | None = None


def event_of(entry: TimelineEntry) -> str | None:
    """The notification event a timeline entry is, or None when it is not one."""
    if entry.kind == TimelineEntry.Kind.PLAYBOOK:
        if (entry.data or {}).get("dry_run"):
            return None  # a dry run waits for nobody: its "would wait for approval" calls no one
        return "playbook_waiting_approval" if _WAITING_TEXT in entry.text else None
    return EVENT_OF_KIND.get(entry.kind)


def notify(entry: TimelineEntry) -> list[Delivery]:
    """Store a Delivery for each enabled endpoint that wants this entry's event; send them once committed."""
    event = event_of(entry)
    if event is None:
        return []
    endpoints = [e for e in WebhookEndpoint.objects.filter(enabled=True) if e.wants(event)]
    deliveries = []
    for endpoint in endpoints:
        delivery = _delivery_create(endpoint=endpoint, entry=entry, event=event)
        if delivery is not None:
            deliveries.append(delivery)
    for delivery in deliveries:
        _queue(delivery.pk)
    return deliveries


def _delivery_create(*, endpoint: WebhookEndpoint, entry: TimelineEntry, event: str) -> Delivery | None:
    now = timezone.now()
    try:
        # A savepoint: a duplicate must not break the caller's transaction.
        with transaction.atomic():
            return Delivery.objects.create(
                endpoint=endpoint,
                incident=entry.incident,
                entry=entry,
                event=event,
                payload=payload_build(fmt=endpoint.format, endpoint=endpoint, event=event, entry=entry),
                created_at=now,
                next_attempt_at=now,
            )
    except IntegrityError:
        return None  # this entry already has its delivery to this endpoint


def _queue(delivery_id: int, countdown: float | None = None) -> None:
    deliver_notification = task_named("incidents.tasks.deliver_notification")
    if countdown is None:
        transaction.on_commit(lambda: deliver_notification.delay(delivery_id))
    else:
        deliver_notification.apply_async((delivery_id,), countdown=countdown)


# --- Payloads ---------------------------------------------------------------------------------------------


def incident_url(incident: Incident) -> str:
    return settings.PUBLIC_URL.rstrip("/") + incident.get_absolute_url()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _headline(event: str, entry: TimelineEntry) -> str:
    incident = entry.incident
    return f"[{incident.severity}] #{incident.pk} {incident.title} — {event.replace('_', ' ')}: {entry.text}"


def payload_build(*, fmt: str, endpoint: WebhookEndpoint, event: str, entry: TimelineEntry) -> dict:
    """The body for one format, built from the incident as it is when the event happens."""
    builders = {
        WebhookEndpoint.Format.GENERIC: _generic,
        WebhookEndpoint.Format.SLACK: _slack,
        WebhookEndpoint.Format.PAGERDUTY: _pagerduty,
        WebhookEndpoint.Format.EMAIL: _email,
    }
    return builders[fmt](endpoint, event, entry)


def _generic(endpoint: WebhookEndpoint, event: str, entry: TimelineEntry) -> dict:
    incident = entry.incident
    return {
        "event": event,
        "entry_id": entry.pk,
        "at": _iso(entry.at),
        "actor": entry.actor_name,
        "text": entry.text,
        "incident": {
            "id": incident.pk,
            "title": incident.title,
            "severity": incident.severity,
            "status": incident.status,
            "url": incident_url(incident),
            "group_key": incident.group_key,
            "run": incident.run.name if incident.run_id else None,
            "started_at": _iso(incident.started_at),
            "detected_at": _iso(incident.detected_at),
            "acknowledged_at": _iso(incident.acknowledged_at),
            "mitigated_at": _iso(incident.mitigated_at),
            "resolved_at": _iso(incident.resolved_at),
        },
    }


def slack_text(text: str) -> str:
    """Text as Slack's mrkdwn shows it and does not act on: &, < and > escaped as Slack asks, so that what a sender
    wrote (a run.failed reason, a title) cannot ping <!channel>, name a <@user> or hide a <link|as something else>."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(endpoint: WebhookEndpoint, event: str, entry: TimelineEntry) -> dict:
    incident = entry.incident
    url = incident_url(incident)
    title, text, actor = slack_text(incident.title), slack_text(entry.text), slack_text(entry.actor_name)
    return {
        "text": slack_text(_headline(event, entry)),
        "blocks": [
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*[{incident.severity}] <{url}|#{incident.pk} {title}>*\n*{event.replace('_', ' ')}*: "
                    + text,
                },
            },
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"status {incident.status} · by {actor}"}],
            },
        ],
    }


def _pagerduty(endpoint: WebhookEndpoint, event: str, entry: TimelineEntry) -> dict:
    """PagerDuty Events API v2: one alert per incident (dedup_key); events other than ack and resolve update it."""
    incident = entry.incident
    return {
        "routing_key": endpoint.routing_key,
        "event_action": _PAGERDUTY_ACTION.get(event, "trigger"),
        "dedup_key": f"fleetops-incident-{incident.pk}",
        "payload": {
            "summary": _headline(event, entry)[:1024],
            "source": "fleetops",
            "severity": _PAGERDUTY_SEVERITY[incident.severity],
            "timestamp": _iso(entry.at),
            "component": incident.group_key,
            "custom_details": {"event": event, "status": incident.status, "text": entry.text},
        },
        "links": [{"href": incident_url(incident), "text": f"FleetOps incident #{incident.pk}"}],
    }


def _email(endpoint: WebhookEndpoint, event: str, entry: TimelineEntry) -> dict:
    incident = entry.incident
    body = f"{entry.text}\n\nBy {entry.actor_name} at {entry.at:%Y-%m-%d %H:%M:%S %Z}.\n"
    body += f"Status {incident.status}, severity {incident.severity}.\n\n{incident_url(incident)}\n"
    # A subject is one header line: a newline in a reason would make the mail refused (BadHeaderError), and a CR LF
    # in it a header of the sender's choosing.
    subject = " ".join(_headline(event, entry).split())[:200]
    return {"subject": subject, "body": body, "to": recipients(endpoint.url)}


def recipients(addresses: str) -> list[str]:
    return [a.strip() for a in addresses.split(",") if a.strip()]


def signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """The X-FleetOps-Signature value: sha256=<hex HMAC-SHA256 of '<timestamp>.<body>'>."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


# --- Sending ----------------------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would resend (or drop) the signed body somewhere not configured: report it as the failure it is.
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


class _Transient(Exception):
    """A failure worth another attempt: 5xx, 429, a timeout or a refused connection."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class _Permanent(Exception):
    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


def backoff_s(attempts: int) -> float:
    """Seconds before attempt `attempts + 1`: NOTIFY_BACKOFF_S doubled per attempt made, at most an hour."""
    return min(settings.NOTIFY_BACKOFF_S * 2 ** (attempts - 1), 3600.0)


def delivery_attempt(*, delivery_id: int, now: datetime | None = None) -> Outcome:
    """Make one attempt, if the delivery is due and no other worker holds it; record what happened."""
    now = now or timezone.now()
    lease = now + _LEASE
    # Claim: only one worker gets this row; the attempt counts whether or not the send gets anywhere.
    claimed = (
        Delivery.objects.filter(pk=delivery_id, status=Delivery.Status.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=lease, attempts=F("attempts") + 1)
    )
    if not claimed:
        return Outcome("skipped")  # delivered, failed, not due yet, or another worker got there first
    delivery = Delivery.objects.select_related("endpoint").get(pk=delivery_id)
    try:
        code = _send(delivery)
    except _Transient as error:
        if delivery.attempts >= settings.NOTIFY_MAX_ATTEMPTS:
            return _finish(delivery, lease, Delivery.Status.FAILED, error.status_code, f"gave up: {error}")
        delay = backoff_s(delivery.attempts)
        _finish(
            delivery,
            lease,
            Delivery.Status.PENDING,
            error.status_code,
            str(error),
            next_at=now + timedelta(seconds=delay),
        )
        return Outcome("retry", retry_in_s=delay)
    except _Permanent as error:
        return _finish(delivery, lease, Delivery.Status.FAILED, error.status_code, str(error))
    return _finish(delivery, lease, Delivery.Status.DELIVERED, code, "", delivered_at=timezone.now())


def _finish(delivery, lease, status, code, error, *, next_at=None, delivered_at=None) -> Outcome:
    # Only the holder of this lease records the outcome; a worker that took over after it expired owns the row now.
    Delivery.objects.filter(pk=delivery.pk, claimed_until=lease).update(
        status=status,
        last_status_code=code,
        last_error=error[:2000],
        next_attempt_at=next_at,
        delivered_at=delivered_at,
        claimed_until=None,
    )
    return Outcome(status)


def _send(delivery: Delivery) -> int | None:
    endpoint = delivery.endpoint
    if endpoint.format == WebhookEndpoint.Format.EMAIL:
        return _send_email(delivery.payload)
    return _post(endpoint, delivery.payload)


def _send_email(payload: dict) -> None:
    try:
        send_mail(payload["subject"], payload["body"], settings.DEFAULT_FROM_EMAIL, payload["to"])
    except smtplib.SMTPRecipientsRefused as error:
        raise _Permanent(f"recipients refused: {error}") from error
    except BadHeaderError as error:  # sending it again cannot help: failed, with the reason, not pending forever
        raise _Permanent(f"the message cannot be sent: {error}") from error
    except (smtplib.SMTPException, OSError) as error:
        raise _Transient(f"mail server: {error}") from error
    return None


def _post(endpoint: WebhookEndpoint, payload: dict) -> int:
    body = json.dumps(payload, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "X-FleetOps-Timestamp": timestamp}
    if endpoint.secret:
        headers["X-FleetOps-Signature"] = signature(secret=endpoint.secret, timestamp=timestamp, body=body)
    request = urllib.request.Request(endpoint.url, data=body, headers=headers, method="POST")
    try:
        with _opener.open(request, timeout=settings.NOTIFY_TIMEOUT_S) as response:
            return response.status
    except urllib.error.HTTPError as error:
        detail = f"HTTP {error.code}: {error.read(500).decode(errors='replace')}"
        if error.code >= 500 or error.code == 429:
            raise _Transient(detail, error.code) from error
        raise _Permanent(detail, error.code) from error
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        raise _Transient(f"connection: {getattr(error, 'reason', error)}") from error
    except ValueError as error:  # not a URL urllib can open
        raise _Permanent(f"bad URL: {error}") from error


def delivery_send(*, delivery_id: int) -> Outcome:
    """What the task does: one attempt, and the next one queued after the backoff when it may succeed later."""
    outcome = delivery_attempt(delivery_id=delivery_id)
    if outcome.retry_in_s is not None:
        _queue(delivery_id, countdown=outcome.retry_in_s)
    return outcome


@transaction.atomic
def delivery_retry(*, delivery: Delivery) -> bool:
    """A person asks to send a failed delivery again: a fresh set of attempts, starting now."""
    retried = Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.FAILED).update(
        status=Delivery.Status.PENDING, attempts=0, next_attempt_at=timezone.now(), claimed_until=None
    )
    if retried:
        _queue(delivery.pk)
    return bool(retried)


def deliveries_resume(*, now: datetime) -> int:
    """Queue pending deliveries overdue by a lease: their task was lost (broker restart, worker killed)."""
    overdue = Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now - _LEASE).filter(
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    )
    ids = list(overdue.values_list("pk", flat=True)[:1000])
    for delivery_id in ids:
        _queue(delivery_id, countdown=0)
    return len(ids)
