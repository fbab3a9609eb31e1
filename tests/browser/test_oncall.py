"""The on-call's night, in a real browser: an incident appears on the open board, they acknowledge it and write."""

import json
from datetime import UTC, datetime, timedelta

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


def _renamed_outage(now: datetime, run: str, prefix: str) -> list[dict]:
    """outage() on other nodes, for another run, under other ids."""
    text = json.dumps(outage(now)).replace('"llama-70b"', f'"{run}"').replace('"gpu-0', f'"{prefix}-0')
    return json.loads(text.replace('"b-', f'"{prefix}-'))


def test_the_board_and_the_overview_put_what_needs_a_person_first(page, live_server, oncall_user, artifacts):
    from playwright.sync_api import expect

    from incidents import services

    now = datetime.now(UTC)
    calm = Incident.objects.create(  # acknowledged, idles nothing: open, but somebody has it
        title="SEV1 on rack r7, acknowledged", group_key="rack:r7", severity="SEV1", status="acknowledged",
        started_at=now - timedelta(hours=2), detected_at=now - timedelta(hours=2),
    )  # fmt: skip
    quiet = Incident.objects.create(  # nobody acknowledged it, though it idles nothing
        title="SEV4 on node n-77", group_key="node:n-77", severity="SEV4", status="triggered",
        started_at=now - timedelta(hours=1), detected_at=now - timedelta(hours=1),
    )  # fmt: skip
    token = make_token("alerts", ["events:write"])
    post_events(live_server, token, _renamed_outage(now, "llama-8b", "w"))  # 64 GPUs down, then acknowledged
    seen = Incident.objects.get(run__name="llama-8b")
    services.incident_acknowledge(incident=seen, actor=services.FLEETOPS)
    post_events(live_server, token, outage(now))  # 64 GPUs down, nobody on it yet
    fresh = Incident.objects.get(run__name="llama-70b")

    # Unacknowledged first (burning before not), then acknowledged but burning; the calm SEV1 last.
    expected = [f"incident-{i.pk}" for i in (fresh, quiet, seen, calm)]
    log_in(page, live_server, "/incidents/", oncall_user)
    for width in (1440, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(live_server.url + "/incidents/")
        rows = page.locator("#incident-list tr.incident-row")
        expect(rows).to_have_count(4)
        assert [rows.nth(i).get_attribute("id") for i in range(4)] == expected
        needs = page.locator("#group-needs-a-person tr.incident-row")
        assert [needs.nth(i).get_attribute("id") for i in range(needs.count())] == expected[:3]
        expect(page.locator("#open-incidents")).to_have_text("3")  # the badge counts what needs a person
        page.screenshot(path=str(artifacts / f"board-needs-a-person-{width}.png"), full_page=True)

        page.goto(live_server.url + "/")
        listed = page.locator("#open-incidents-list tr[id^='incident-']")
        assert [listed.nth(i).get_attribute("id") for i in range(listed.count())] == expected
        expect(page.locator("#needs-person-count")).to_have_text("3")
        expect(page.locator("#fleet-burn")).to_contain_text("$5.33")  # 128 GPUs idle at $2.50 an hour
        page.screenshot(path=str(artifacts / f"overview-needs-a-person-{width}.png"), full_page=True)
