"""The on-call's night, in a real browser: an incident appears on the open board, they acknowledge it and write."""

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from incidents.models import Incident
from runs.models import Node
from tests.browser.conftest import log_in
from tests.conftest import make_token
from tests.runs.scenario import event, ts

pytestmark = pytest.mark.django_db(transaction=True)


def outage(now: datetime) -> list[dict]:
    """A 64-GPU run trains on 8 nodes; gpu-0003's GPU 5 falls off the bus (an Xid 79 storm) and the run fails."""

    def t(minutes: float) -> datetime:
        return now + timedelta(minutes=minutes)

    nodes = [f"gpu-{i:04d}" for i in range(8)]
    events = [
        event("run.started", t(-40), "b-start", run="llama-70b", cluster="c1", gpus=64, nodes=nodes, job_id="4242")
    ]
    events += [event("run.step", t(-35 + 5 * i), f"b-step-{i}", run="llama-70b", step=i) for i in range(1, 7)]
    storm = dict(node="gpu-0003", gpu=5, xid=79, message="GPU has fallen off the bus")
    events += [event("gpu.xid", t(-3) + timedelta(milliseconds=10 * i), f"b-xid-{i}", **storm) for i in range(200)]
    failed = dict(reason="GPU fell off the bus", node="gpu-0003", gpu=5, xid=79, detected_at=ts(t(-2.5)))
    events.append(event("run.failed", t(-3), "b-failed", run="llama-70b", **failed))
    return events


def post_events(live_server, token: str, events: list[dict]) -> None:
    """As an alert source would: over HTTP, so the live server applies them and its detectors open the incident."""
    request = urllib.request.Request(
        live_server.url + "/api/v1/events",
        data=json.dumps(events).encode(),
        headers={"Content-Type": "application/cloudevents-batch+json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status in (200, 202)


def test_an_incident_appears_live_and_the_oncall_acknowledges_and_writes(page, live_server, oncall_user, artifacts):
    from playwright.sync_api import expect

    token = make_token("alerts", ["events:write"])
    log_in(page, live_server, "/incidents/", oncall_user)
    expect(page.locator("#incident-list")).to_contain_text("No open incidents.")
    page.evaluate("window.stillTheSamePage = true")

    post_events(live_server, token, outage(datetime.now(UTC)))
    incident = Incident.objects.get()

    # No reload: the nav's open count notices within 10 s and the board reloads its list.
    row = page.locator(f"#incident-{incident.pk}")
    expect(row).to_be_visible(timeout=20_000)
    assert page.evaluate("window.stillTheSamePage") is True
    expect(row).to_contain_text("reboot node, drain")
    expect(row.locator("td.impact")).to_have_text("64")
    expect(page.locator("#open-incidents")).to_have_text("1")
    page.screenshot(path=str(artifacts / "board.png"), full_page=True)

    row.get_by_role("link", name=incident.title).click()
    page.wait_for_url(live_server.url + f"/incidents/{incident.pk}")
    expect(page.locator("#recommended-action")).to_contain_text("reboot node, drain")
    page.evaluate("window.stillTheSamePage = true")

    page.click("#action-acknowledge")
    timeline = page.locator("#incident-timeline")
    expect(timeline.locator("li.tl-acknowledged")).to_contain_text("Acknowledged by ana")
    expect(page.locator("#incident-status")).to_have_text("acknowledged")
    expect(page.locator("#incident-commander")).to_have_text("ana")
    expect(page.locator("#action-acknowledge")).to_have_count(0)

    page.fill("#note-text", "Draining gpu-0003; the job restarts on a spare.")
    page.click("#action-note")
    expect(timeline.locator("li.tl-note")).to_contain_text("Draining gpu-0003; the job restarts on a spare.")
    expect(timeline.locator("li.tl-acknowledged")).to_have_count(1)
    assert page.evaluate("window.stillTheSamePage") is True  # htmx swapped the parts, no navigation
    page.screenshot(path=str(artifacts / "incident.png"), full_page=True)

    kinds = list(incident.timeline.values_list("kind", flat=True))
    assert kinds[-2:] == ["acknowledged", "note"] and "refused" not in kinds


def test_the_fleet_grid_stays_readable_at_2048_nodes(page, live_server, oncall_user, artifacts):
    from playwright.sync_api import expect

    states = ["in_service"] * 40 + ["suspect", "cordoned", "in_repair", "draining", "hot_spare", "burn_in", "retired"]
    Node.objects.bulk_create(
        Node(hostname=f"gpu-{i:04d}", rack=f"r{i // 32:02d}", state=states[(i * 7) % len(states)]) for i in range(2048)
    )
    log_in(page, live_server, "/", oncall_user)
    grid = page.locator("#node-grid")
    expect(grid.locator(".rack")).to_have_count(64)
    expect(grid.locator("a.cell")).to_have_count(2048)
    box = grid.locator("a.cell").first.bounding_box()
    assert 9 <= box["width"] <= 13 and 9 <= box["height"] <= 13
    page.screenshot(path=str(artifacts / "fleet-grid.png"), full_page=True)

    grid.locator('a.cell[title="gpu-0100 · ' + Node.objects.get(hostname="gpu-0100").state + '"]').click()
    page.wait_for_url(live_server.url + "/nodes/gpu-0100")
    expect(page.locator("h1")).to_contain_text("gpu-0100")
