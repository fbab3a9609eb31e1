"""The on-call's night, in a real browser: an incident appears on the open board, they acknowledge it and write."""

from datetime import UTC, datetime

import pytest

from incidents.models import Incident
from runs.models import Node
from tests.browser.conftest import log_in
from tests.conftest import make_token
from tests.stories import outage, post_events

pytestmark = pytest.mark.django_db(transaction=True)


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
