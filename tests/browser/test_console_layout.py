"""The console in the on-call's hand (issue 20): every page at a phone's 390x844 and a desk's 1440x900 is no wider
than the screen, logs no console error, overflows no text out of its table cell or chart, and gives axe-core
(vendored from npm, tests/browser/vendor) no serious or critical accessibility violation. Then search, the keyboard
and dark mode, each driven once; and the incident on a 16,384-node fleet in under three screens.

`make screenshots` runs this module with SCREENSHOTS_DIR=docs/screenshots: the README's pictures come from here."""

import os
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from incidents.models import Incident, Postmortem, WeeklyReport
from runs.models import Node, Run
from tests.browser.conftest import PASSWORD, log_in

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(__file__).parent / "vendor" / "axe-4.11.4.min.js"
VIEWPORTS = {"phone": {"width": 390, "height": 844}, "desk": {"width": 1440, "height": 900}}
SCREENSHOTS = os.environ.get("SCREENSHOTS_DIR")  # the README's pictures, by `make screenshots`

# From element boxes: the document's width, each table cell whose text is wider than the cell (a cell that wraps or
# scrolls inside its card is fine; one whose text spills is not), each chart text outside its chart.
OVERFLOW = """() => {
  const found = [];
  const width = document.documentElement.clientWidth;
  const wide = document.documentElement.scrollWidth;
  if (wide > width) found.push(`document ${wide} px wide in ${width}`);
  for (const cell of document.querySelectorAll("main td, main th")) {
    if (cell.scrollWidth > cell.clientWidth + 1)
      found.push(`cell "${cell.innerText.slice(0, 60)}" ${cell.scrollWidth} px in ${cell.clientWidth}`);
  }
  for (const chart of document.querySelectorAll("main .js-plotly-plot")) {
    const box = chart.getBoundingClientRect();
    for (const text of chart.querySelectorAll("svg text")) {
      const t = text.getBoundingClientRect();
      if (!t.width || !text.textContent.trim()) continue;
      const outside = t.left < box.left - 1 || t.right > box.right + 1
        || t.top < box.top - 1 || t.bottom > box.bottom + 1;
      if (outside) found.push(`chart ${chart.id} text "${text.textContent.slice(0, 40)}" outside its chart`);
    }
  }
  return found;
}"""

AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  const why = (n) => ((n.any[0] || n.all[0] || n.none[0] || {}).message || "").slice(0, 140);
  return result.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map(
    (v) => `${v.id} (${v.impact}): ${v.help}; ${v.nodes.length} element(s): `
      + v.nodes.slice(0, 4).map((n) => `${n.target.join(" ")} (${why(n)})`).join("; "));
}"""


@pytest.fixture
def demo(oncall_user):
    call_command("load_demo", "--days", "7", stdout=StringIO())
    oncall_user.is_staff = True  # the Admin link in the menu too
    oncall_user.save()
    live = Incident.objects.get(status="triggered")
    run = live.run or Run.objects.order_by("-pk").first()
    reviewed = Postmortem.objects.filter(reviewed_at__isnull=False).first()
    return {
        "/": "overview",
        "/incidents/": "board",
        f"/incidents/{live.pk}": "incident",
        f"/incidents/{reviewed.incident_id}/postmortem": "postmortem",
        "/incidents/action-items": "action items",
        "/incidents/deliveries": "deliveries",
        f"/runs/{run.name}": "run",
        f"/nodes/{Node.objects.order_by('hostname').first().hostname}": "node",
        "/fleet": "goodput",
        "/reports/": "reports",
        f"/reports/{WeeklyReport.objects.get().pk}": "report",
        "/events/quarantined": "quarantine",
        "/search?q=gpu": "search",
        "/search": "search hint",
        "/preferences": "preferences",
    }


def _check(page, live_server, path: str, errors: list[str]) -> list[str]:
    errors.clear()
    response = page.goto(live_server.url + path)
    assert response.ok, path
    page.wait_for_load_state("networkidle")
    page.evaluate(AXE.read_text())
    return [f"console: {e}" for e in errors] + page.evaluate(OVERFLOW) + page.evaluate(AXE_RUN)


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_every_page_fits_the_screen_and_passes_axe(chromium, live_server, oncall_user, demo, viewport, artifacts):
    context = chromium.new_context(viewport=VIEWPORTS[viewport])
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        problems = {}
        found = _check(page, live_server, "/login/", errors)  # the one page before signing in
        if found:
            problems["/login/"] = found
        log_in(page, live_server, "/", oncall_user)
        for path, name in demo.items():
            found = _check(page, live_server, path, errors)
            if found:
                problems[path] = found
            page.screenshot(path=str(artifacts / f"layout-{viewport}-{name.replace(' ', '-')}.png"))
            if SCREENSHOTS and name in ("overview", "board", "incident"):
                page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}-{viewport}.png"))
        if problems:
            pytest.fail("\n".join(f"{viewport} {path}: {one}" for path, found in problems.items() for one in found))
    finally:
        context.close()


def test_search_the_keyboard_and_dark_mode(chromium, live_server, oncall_user, demo):
    from playwright.sync_api import expect

    live = Incident.objects.get(status="triggered")
    context = chromium.new_context(viewport=VIEWPORTS["phone"], color_scheme="light")
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        log_in(page, live_server, "/incidents/", oncall_user)

        # "/" focuses the search box from anywhere; Enter sends it.
        page.keyboard.press("/")
        expect(page.locator("#search-input")).to_be_focused()
        page.keyboard.type(live.run.name)
        page.keyboard.press("Enter")
        page.wait_for_url("**/search?q=*")
        expect(page.locator("main")).to_contain_text(live.run.name)

        # j selects the first row (the open fault, first on the board), a acknowledges it, o opens it.
        page.goto(live_server.url + "/incidents/")
        for target in (f"#ack-{live.pk}", f"label:has(#tick-{live.pk})", "#bulk-acknowledge", "#menu-button"):
            assert page.locator(target).bounding_box()["height"] >= 44, target  # a thumb's target, on a phone
        page.keyboard.press("j")
        selected = page.locator("tr.incident-row.selected")
        expect(selected).to_have_id(f"incident-{live.pk}")
        page.keyboard.press("a")
        expect(page.locator(f"#incident-{live.pk} .badge.status-acknowledged")).to_be_visible()
        live.refresh_from_db()
        assert live.acknowledged_at is not None and live.commander.get_username() == oncall_user.get_username()
        expect(selected).to_have_id(f"incident-{live.pk}")  # the selection survived the board's reload
        page.keyboard.press("?")
        expect(page.locator("#keyboard-help")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.locator("#keyboard-help")).to_be_hidden()
        page.keyboard.press("o")
        page.wait_for_url(re.compile(rf".*/incidents/{live.pk}$"))
        for target in ("#action-assign", "#action-note", "#more-actions > summary"):  # ana commands it now
            assert page.locator(target).bounding_box()["height"] >= 44, target

        # Dark mode: the menu's toggle, kept across pages; the page background turns dark.
        page.click("#menu-button")
        page.click("#theme-toggle")
        expect(page.locator("html")).to_have_attribute("data-theme", "dark")
        page.goto(live_server.url + "/")
        expect(page.locator("html")).to_have_attribute("data-theme", "dark")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)", background
        for path in ("/", "/incidents/", f"/incidents/{live.pk}", "/search?q=gpu"):  # the dark theme passes axe too
            page.goto(live_server.url + path)
            page.wait_for_load_state("networkidle")
            page.evaluate(AXE.read_text())
            assert page.evaluate(AXE_RUN) == [], path
        page.goto(live_server.url + "/")
        if SCREENSHOTS:
            page.screenshot(path=str(Path(SCREENSHOTS) / "overview-phone-dark.png"))
    finally:
        context.close()


def test_the_system_dark_setting_is_followed(chromium, live_server, oncall_user):
    context = chromium.new_context(viewport=VIEWPORTS["desk"], color_scheme="dark")
    page = context.new_page()
    try:
        log_in(page, live_server, "/", oncall_user)
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(13, 17, 23)"
    finally:
        context.close()


def test_an_incident_on_16384_nodes_fits_in_three_screens_and_the_grid_draws_them(
    chromium, live_server, oncall_user, artifacts
):
    from playwright.sync_api import expect

    from tests.console.big_fleet import NODES, build_big_fleet

    incident = build_big_fleet()
    for name, viewport in VIEWPORTS.items():
        context = chromium.new_context(viewport=viewport)
        context.set_default_timeout(20_000)
        page = context.new_page()
        try:
            page.goto(live_server.url + "/login/")
            page.fill("input[name=username]", oncall_user.get_username())
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(live_server.url + "/")
            page.goto(live_server.url + incident.get_absolute_url())
            height = page.evaluate("document.documentElement.scrollHeight")
            page.screenshot(path=str(artifacts / f"incident-16384-{name}.png"), full_page=True)
            assert height < 3 * viewport["height"], f"{name}: {height} px tall"
            assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
            # The overview's grid: 16,384 cells by rack, as wide as the screen, one state picked out by its legend.
            # Past GRID_INLINE_NODES it comes when scrolled to, and takes the state picked before it came.
            page.goto(live_server.url + "/")
            if name == "phone":  # below the first screen: not asked for yet
                page.wait_for_timeout(500)
                assert page.locator("#grid-racks .cell").count() == 0
            page.click('#grid-filter button[data-state="draining"]')  # in view now: the grid is asked for
            expect(page.locator("#grid-racks .cell")).to_have_count(NODES)
            expect(page.locator("#grid-racks .cell:not(.faded)")).to_have_count(2)  # the two draining, faded rest
            assert page.get_attribute("#grid-racks", "data-show") == "draining"
            assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
            page.screenshot(path=str(artifacts / f"overview-16384-{name}.png"))
        finally:
            context.close()
