"""Script injection: every free-text field a person or an event can set, shown on every page, is escaped.

Each field gets its own payload, tagged with the field's name so that a failure says which field leaked and so that
the test can check the text really is on the page (escaped), not silently dropped.
"""

import json
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from django.utils import timezone

from incidents import services
from incidents.models import Incident, PlaybookExecution
from incidents.playbooks.engine import playbook_start
from incidents.reports.services import report_generate
from runs.models import Node, Run
from tests.stories import spares, story_until_failure, xid_storm

BATCH = "application/cloudevents-batch+json"


def payload(field: str) -> str:
    return f"[{field}]<script>alert(1)</script><img src=x onerror=alert(1)>"


class _Live(HTMLParser):
    """What a browser would run: script elements and on* attributes that call alert."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self._in_script = tag == "script"
        for name, value in attrs:
            if name.startswith("on") and "alert(1)" in (value or ""):
                self.found.append(f"<{tag} {name}={value}>")
            if name in ("href", "src") and (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value}>")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script and "alert(1)" in data:
            self.found.append(f"<script>{data[:80]}")


def assert_safe(html: str, where: str) -> None:
    assert "<script>alert(1)" not in html, f"{where}: an unescaped <script> payload"
    assert "onerror=alert" not in html.replace("&lt;img src=x onerror=alert(1)&gt;", ""), f"{where}: a live onerror"
    live = _Live()
    live.feed(html)
    assert live.found == [], f"{where}: {live.found}"


def _tainted_story() -> list[dict]:
    events = spares("s1") + story_until_failure() + xid_storm(3)
    for e in events:
        data = e["data"]
        if e["type"] == "run.failed":
            data["reason"] = payload("run.failed reason")
        elif e["type"] == "node.state" and data.get("state") == "cordoned":
            data["reason"] = payload("node.state reason")
        elif e["type"] == "gpu.xid":
            data["message"] = payload("gpu.xid message")
    return events


def _ok(response, what: str):
    assert response.status_code in (200, 202, 302), f"{what}: {response.status_code} {response.content[:300]!r}"
    return response


def test_no_free_text_field_runs_as_script_on_any_page(oncall, writer, settings, django_capture_on_commit_callbacks):
    settings.PLAYBOOK_AUTO_START = False
    with django_capture_on_commit_callbacks(execute=True):
        _ok(writer.post("/api/v1/events", json.dumps(_tainted_story()), content_type=BATCH), "events")

    # Alertmanager and PagerDuty intake: summaries and descriptions come from outside.
    now = timezone.now()
    alert = {
        "status": "firing",
        "labels": {"alertname": "GpuHot", "instance": "n7:9400", "severity": "critical"},
        "annotations": {"summary": payload("alertmanager summary"), "description": payload("alertmanager description")},
        "startsAt": now.isoformat(),
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "f00d",
    }
    body = {"version": "4", "status": "firing", "receiver": "fleetops", "alerts": [alert]}
    with django_capture_on_commit_callbacks(execute=True):
        _ok(writer.post("/api/v1/intake/alertmanager", body, format="json"), "alertmanager")
    pd = {
        "routing_key": writer._credentials["HTTP_AUTHORIZATION"].removeprefix("Bearer "),
        "event_action": "trigger",
        "dedup_key": "pd-xss",
        "payload": {"summary": payload("pagerduty summary"), "source": "n8", "severity": "critical"},
    }
    with django_capture_on_commit_callbacks(execute=True):
        _ok(writer.post("/api/v1/intake/pagerduty/v2/enqueue", pd, format="json"), "pagerduty")

    incident = Incident.objects.get(run__name="r1")
    base = f"/incidents/{incident.pk}"

    # A playbook step waiting for approval (SEV4 needs oncall to drain), refused with a reason.
    Incident.objects.filter(pk=incident.pk).update(severity="SEV4")
    incident.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        execution = playbook_start(
            playbook="drain-and-replace",
            actor=services.FLEETOPS,
            node=Node.objects.get(hostname="n2"),
            run=Run.objects.get(name="r1"),
            incident=incident,
        )
    assert PlaybookExecution.objects.get(pk=execution.pk).status == "waiting_approval"
    _ok(
        oncall.post(
            f"{base}/playbooks/{execution.pk}/abort", {"refuse": "1", "reason": payload("playbook refusal reason")}
        ),
        "refuse",
    )

    # What a person types on the incident page.
    _ok(oncall.post(f"{base}/note", {"text": payload("incident note")}), "note")
    _ok(oncall.post(f"{base}/escalate", {"reason": payload("escalate reason")}), "escalate")
    _ok(oncall.post(f"{base}/severity", {"severity": "SEV2", "reason": payload("severity reason")}), "severity")
    _ok(oncall.post(f"{base}/resolve", {"override_reason": payload("resolve override reason")}), "resolve")
    _ok(oncall.post(f"{base}/reopen", {"reason": payload("reopen reason")}), "reopen")
    _ok(oncall.post(f"{base}/resolve", {"override_reason": payload("resolve override reason")}), "resolve again")

    # The postmortem and its action items.
    _ok(oncall.post(f"{base}/postmortem/draft"), "draft")
    _ok(oncall.post(f"{base}/postmortem/save", {"markdown": "# Cause\n\n" + payload("postmortem markdown")}), "save")
    _ok(oncall.post(f"{base}/postmortem/item", {"text": payload("action item text")}), "item")
    preview = _ok(oncall.post(f"{base}/postmortem/preview", {"markdown": payload("postmortem preview")}), "preview")
    assert_safe(preview.content.decode(), "postmortem preview")

    since = datetime(2026, 2, 27, tzinfo=UTC)
    report = report_generate(since=since, until=since + timedelta(days=7), now=since + timedelta(days=8))

    pages = [
        "/",
        "/fleet",
        "/runs/r1",
        "/runs/r1/advisor",
        "/nodes/n2",
        "/nodes/n7",
        "/nodes/n8",
        "/incidents/",
        "/incidents/action-items",
        "/incidents/deliveries",
        f"/reports/{report.pk}",
        f"/reports/{report.pk}.html",
        "/reports/",
    ]
    for other in Incident.objects.all():
        pages += [f"/incidents/{other.pk}", f"/incidents/{other.pk}/postmortem"]
        pages += [f"/incidents/{other.pk}?part={part}" for part in ("impact", "timeline", "playbooks")]
    shown = ""
    for url in pages:
        headers = {"HTTP_HX_REQUEST": "true"} if "part=" in url else {}
        response = oncall.get(url, **headers)
        if response.status_code == 404 and url.startswith("/nodes/"):
            continue  # an intake alert need not make a node
        assert response.status_code in (200, 286), f"{url}: {response.status_code}"
        html = response.content.decode()
        assert_safe(html, url)
        shown += html

    # The payloads are on the pages, escaped: the test looked at the places they are shown.
    for field in (
        "run.failed reason",
        "node.state reason",
        "gpu.xid message",
        "alertmanager summary",
        "pagerduty summary",
        "playbook refusal reason",
        "incident note",
        "escalate reason",
        "severity reason",
        "resolve override reason",
        "reopen reason",
        "postmortem markdown",
        "action item text",
    ):
        assert f"[{field}]" in shown, f"{field} is shown nowhere: the test would not see it leak"
