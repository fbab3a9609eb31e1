"""The access policy as data, shared by the access and CSRF tests: one row per endpoint (method, URL name, the
objects its URL needs, the body it sends, the expected status per role), and the world the rows act on (the `world`
fixture, registered for every test by tests/conftest.py)."""

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client, TestCase, override_settings
from django.urls import URLPattern, URLResolver
from django.utils import timezone

from incidents import services
from incidents.models import Delivery, Incident, WebhookEndpoint
from incidents.playbooks.engine import playbook_start
from incidents.postmortems import services as postmortems
from incidents.reports.services import report_generate
from runs.models import Node, Run
from tests.conftest import make_token
from tests.stories import at, event, spares, story_until_failure, xid_storm

BATCH = "application/cloudevents-batch+json"


ROLES = ("anonymous", "viewer", "oncall", "admin", "token:events:write", "token:read", "token:incidents:write")


SESSIONS = ("viewer", "oncall", "admin")


TOKENS = ("token:events:write", "token:read", "token:incidents:write")


def policy(anonymous, viewer, oncall, admin, events, read, incidents) -> dict[str, int]:
    return dict(zip(ROLES, (anonymous, viewer, oncall, admin, events, read, incidents), strict=True))


# Web pages: a session is needed; a bearer token is no session, so it is sent to the login form too.
PAGE = policy(302, 200, 200, 200, 302, 302, 302)


# Incident, playbook and postmortem actions: oncall and admin act (302 back to the page), viewers get 403.
ACT = policy(302, 403, 302, 302, 302, 302, 302)


# The same, where the engine or the state machine refuses what is asked, shown on the page with 409.
ACT_CONFLICT = policy(302, 403, 409, 409, 302, 302, 302)


# Anything signed in may do it: it writes nothing a viewer could not read (preview), or only derived data (report).
SIGNED_IN_POST_200 = policy(302, 200, 200, 200, 302, 302, 302)


SIGNED_IN_POST_302 = policy(302, 302, 302, 302, 302, 302, 302)


# Sending a notification again is for admins only.
ADMIN_ACT = policy(302, 403, 403, 302, 302, 302, 302)


# API reads: a token with read, or any signed-in person; a token without read is refused.
API_READ = policy(401, 200, 200, 200, 403, 200, 403)


# Event intake: only events:write tokens; people signed in do not post events.
API_EVENTS = policy(401, 403, 403, 403, 202, 403, 403)


API_INTAKE = policy(401, 403, 403, 403, 200, 403, 403)


# PagerDuty authenticates by the routing_key in the body (the role's token; "not-a-token" for people).
API_PAGERDUTY = policy(401, 401, 401, 401, 202, 403, 403)


# /metrics: only a token with the metrics:read scope (test_metrics.py); no session, no other scope.
METRICS = policy(401, 401, 401, 401, 403, 403, 403)


# Incident API actions: incidents:write tokens or the oncall role.
API_ACT = policy(401, 403, 200, 200, 403, 403, 200)


# The same, where the state machine refuses what is asked (409).
API_ACT_CONFLICT = policy(401, 403, 409, 409, 403, 403, 409)


@dataclass(frozen=True)
class Row:
    method: str
    name: str  # the URL name
    expected: dict[str, int]
    args: dict[str, str] = field(default_factory=dict)  # URL kwarg -> key in the world
    data: dict = field(default_factory=dict)  # the body; values "@key" come from the world
    api: bool = False  # a JSON body rather than a form
    query: str = ""

    def __str__(self):
        return f"{self.method} {self.name}{'?' + self.query if self.query else ''}"


INCIDENT = {"pk": "incident"}


EXECUTION = {"pk": "incident", "execution_pk": "execution"}


RUN = {"name": "run"}


NODE = {"hostname": "node"}


REPORT = {"pk": "report"}


TABLE = [
    # --- Pages (runs) ---
    Row("GET", "overview", PAGE),
    Row("GET", "fleet", PAGE),
    Row("GET", "event-quarantine", PAGE),
    Row("POST", "event-quarantine-replay", ADMIN_ACT),
    Row("GET", "run-page", PAGE, RUN),
    Row("GET", "run-advisor", PAGE, RUN),
    Row("GET", "run-levers", PAGE, RUN),
    Row("GET", "node-page", PAGE, NODE),
    Row("GET", "preferences", PAGE),
    Row("POST", "preferences-save", SIGNED_IN_POST_302, data={"time_zone": "UTC"}),
    Row("GET", "search", PAGE, query="q=gpu"),
    Row("GET", "metrics", METRICS),
    # --- Pages (incidents) ---
    Row("GET", "incident-board", PAGE),
    Row("GET", "incident-open-count", PAGE),
    Row("GET", "incident-page", PAGE, INCIDENT),
    Row("GET", "action-items", PAGE),
    Row("GET", "incident-deliveries", PAGE),
    Row("GET", "incident-postmortem", PAGE, INCIDENT),
    Row("GET", "incident-postmortem-md", PAGE, INCIDENT),
    # --- Pages (reports) ---
    Row("GET", "report-list", PAGE),
    Row("GET", "report-page", PAGE, REPORT),
    Row("GET", "report-download", PAGE, REPORT),
    Row("GET", "report-csv", PAGE, REPORT),
    Row("GET", "report-pdf", PAGE, REPORT),
    Row("POST", "report-create", ACT, data={"since": "2026-03-02", "until": "2026-03-09"}),
    # --- Incident actions ---
    Row("POST", "incident-action-acknowledge", ACT, INCIDENT),
    Row("POST", "incident-bulk-acknowledge", ACT, data={"ids": "@incident"}),
    Row("POST", "incident-action-assign", ACT, INCIDENT),
    Row("POST", "incident-action-command", ACT, INCIDENT),
    Row("POST", "incident-action-escalate", ACT, INCIDENT, {"reason": "two runs down"}),
    Row("POST", "incident-action-note", ACT, INCIDENT, {"text": "draining n2"}),
    Row("POST", "incident-action-severity", ACT, INCIDENT, {"severity": "SEV2", "reason": "a second run"}),
    Row("POST", "incident-action-resolve", ACT, INCIDENT, {"override_reason": "replaced by hand"}),
    Row("POST", "incident-action-reopen", ACT_CONFLICT, INCIDENT, {"reason": "back"}),  # it is not resolved
    Row("POST", "incident-action-close", ACT_CONFLICT, INCIDENT),  # it is not resolved
    # --- Playbooks ---
    Row(
        "POST",
        "incident-playbook-start",
        ACT,
        INCIDENT,
        {"playbook": "drain-and-replace", "node": "n2", "dry_run": "on"},
    ),
    Row("POST", "incident-playbook-approve", ACT, EXECUTION),
    Row("POST", "incident-playbook-abort", ACT, EXECUTION, {"reason": "wrong node"}),
    # --- Postmortems ---
    Row("POST", "incident-postmortem-preview", SIGNED_IN_POST_200, INCIDENT, {"markdown": "# Cause"}),
    Row("POST", "postmortem-draft", ACT, INCIDENT),
    Row("POST", "postmortem-save", ACT, INCIDENT, {"markdown": "# Cause\n\nA GPU fell off the bus."}),
    Row("POST", "postmortem-review", ACT, INCIDENT),
    Row("POST", "postmortem-close", ACT_CONFLICT, INCIDENT),  # the incident is not resolved
    Row("POST", "postmortem-item", ACT, INCIDENT, {"text": "add a spare", "due_on": "2026-04-01"}),
    Row("POST", "postmortem-done", ACT, INCIDENT, {"item": "@item"}),
    # --- Notifications ---
    Row("POST", "incident-delivery-retry", ADMIN_ACT, {"pk": "delivery"}),
    # --- API: runs and nodes ---
    Row("POST", "events", API_EVENTS, data={"events": "@events"}, api=True),
    Row("GET", "run-list", API_READ),
    Row("GET", "run-detail", API_READ, RUN),
    Row("GET", "run-attempts", API_READ, RUN),
    Row("GET", "run-interruptions", API_READ, RUN),
    Row("GET", "run-checkpoints", API_READ, RUN),
    Row("GET", "run-goodput", API_READ, RUN),
    Row("GET", "run-advice", API_READ, RUN),
    Row("GET", "run-levers-api", API_READ, RUN),
    Row("GET", "run-checkpoint-io", API_READ, RUN),
    Row("GET", "fleet-goodput", API_READ),
    Row("GET", "advisor", API_READ, query="delta_s=60&mtbf_s=36000&restart_s=300"),
    Row("GET", "node-list", API_READ),
    Row("GET", "node-detail", API_READ, NODE),
    # --- API: incidents ---
    Row("GET", "response-metrics", API_READ),
    Row("GET", "incident-list", API_READ),
    Row("GET", "incident-detail", API_READ, INCIDENT),
    Row("POST", "incident-acknowledge", API_ACT, INCIDENT, api=True),
    Row("POST", "incident-notes", API_ACT, INCIDENT, {"text": "draining n2"}, api=True),
    Row("POST", "incident-resolve", API_ACT, INCIDENT, {"override_reason": "replaced by hand"}, api=True),
    Row("POST", "incident-reopen", API_ACT_CONFLICT, INCIDENT, {"reason": "back"}, api=True),  # it is not resolved
    Row("POST", "intake-alertmanager", API_INTAKE, data={"alertmanager": "@alertmanager"}, api=True),
    Row("POST", "intake-pagerduty", API_PAGERDUTY, data={"pagerduty": "@pagerduty"}, api=True),
]


# URL names with no row, and why.
EXEMPT_NAMES = {
    "login": "the login form is for everyone",
    "logout": "signing out is for everyone",
    "schema": "the OpenAPI schema is public (permission_classes=[])",
    "api-docs": "the Swagger UI is public (permission_classes=[])",
}


EXEMPT_NAMESPACES = {"admin"}  # Django admin: staff only, by Django


def _names(resolver: URLResolver, namespace: str = "") -> set[str]:
    names = set()
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            names |= _names(pattern, pattern.namespace or namespace)
        elif isinstance(pattern, URLPattern) and not namespace:
            names.add(pattern.name or f"<unnamed {pattern.pattern}>")
    return names


def _user(name: str, group: str):
    user = get_user_model().objects.create_user(name, password="s3cret-pass")
    user.groups.add(Group.objects.get(name=group))
    return user


def _fresh_event(i: int) -> dict:
    return event("node.heartbeat", at(0), f"access-hb-{i}", node="n1")


def _post(events: list[dict]) -> None:
    client = Client(HTTP_AUTHORIZATION="Bearer " + make_token("seed", ["events:write"]))
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = client.post("/api/v1/events", json.dumps(events), content_type=BATCH)
    assert response.status_code in (200, 202), response.content


def _build_world() -> dict:
    _post(spares("s1") + story_until_failure() + xid_storm(3))
    Incident.objects.update(severity="SEV4")  # at SEV4 draining waits for oncall: an execution to approve
    incident = Incident.objects.get()
    node, run = Node.objects.get(hostname="n2"), Run.objects.get(name="r1")
    ana = _user("ana", "oncall")
    with TestCase.captureOnCommitCallbacks(execute=True):
        execution = playbook_start(
            playbook="drain-and-replace", actor=services.Actor.of_user(ana), node=node, run=run, incident=incident
        )
    Incident.objects.update(severity="SEV3")
    execution.refresh_from_db()
    assert execution.status == "waiting_approval", execution.error
    postmortems.postmortem_draft(incident=incident, actor=services.FLEETOPS)
    item = postmortems.action_item_add(
        incident=incident, actor=services.FLEETOPS, text="burn in spares", owner=None, due_on=None
    )
    since = datetime(2026, 3, 2, tzinfo=UTC)
    report = report_generate(since=since, until=since + timedelta(days=7), now=since + timedelta(days=7, hours=1))
    endpoint = WebhookEndpoint.objects.create(name="hook", url="http://127.0.0.1:9/hook")
    delivery = Delivery.objects.create(
        endpoint=endpoint, incident=incident, entry=incident.timeline.first(), event="triggered", payload={},
        status=Delivery.Status.FAILED, attempts=3, created_at=timezone.now(),
    )  # fmt: skip
    incident.refresh_from_db()
    assert incident.status == "triggered" and incident.alerts.filter(status="firing").exists()
    return {
        "incident": incident.pk,
        "execution": execution.pk,
        "run": run.name,
        "node": node.hostname,
        "report": report.pk,
        "delivery": delivery.pk,
        "item": item.pk,
        "users": {"viewer": _user("vic", "viewer"), "oncall": ana, "admin": _user("ada", "admin")},
        "tokens": {role: make_token(role, [role.removeprefix("token:")]) for role in TOKENS},
    }


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """An incident (alerts, nodes, the run), a playbook execution waiting for approval, a postmortem with an action
    item, a weekly report and a failed delivery; and the tokens of each scope.

    Built once for the module inside a transaction that is rolled back at its end (as TestCase.setUpTestData);
    each test runs in a savepoint of it (the db fixture), so what one test's action changes, the next does not see.
    """
    with django_db_blocker.unblock(), override_settings(PLAYBOOK_AUTO_START=False):
        with transaction.atomic():
            yield _build_world()
            transaction.set_rollback(True)


def _body(row: Row, world: dict, role: str):
    if "events" in row.data:
        return [_fresh_event(1)]
    if "alertmanager" in row.data:
        now = timezone.now()
        alert = {
            "status": "firing", "labels": {"alertname": "GpuHot", "instance": "n2:9400", "severity": "warning"},
            "annotations": {"summary": "GPU hot"}, "startsAt": now.isoformat(), "endsAt": "0001-01-01T00:00:00Z",
            "fingerprint": "abc123",
        }  # fmt: skip
        return {"version": "4", "status": "firing", "receiver": "fleetops", "alerts": [alert]}
    if "pagerduty" in row.data:
        key = world["tokens"].get(role, "not-a-token")
        return {
            "routing_key": key, "event_action": "trigger", "dedup_key": "disk-n2",
            "payload": {"summary": "disk full on n2", "source": "n2", "severity": "warning"},
        }  # fmt: skip
    return {k: world[v[1:]] if isinstance(v, str) and v.startswith("@") else v for k, v in row.data.items()}
