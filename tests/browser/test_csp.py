"""The Content-Security-Policy holds in a real browser: every console page loads, draws its plotly charts and runs
its htmx actions with no CSP violation (securitypolicyviolation events and console errors both collected), while an
inline script injected into a page is refused, which proves the policy is enforced and the listener hears it."""

from datetime import UTC, datetime

import pytest

from incidents.models import Incident
from incidents.reports.services import report_generate
from tests.browser.conftest import log_in
from tests.conftest import make_token
from tests.stories import NOW, SINCE, UNTIL, build_week, outage, post_events

pytestmark = [pytest.mark.django_db(transaction=True)]

# Runs before any page script in every document of the context (Playwright injects it outside the page's CSP).
LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(
    {directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample, source: e.sourceFile, line: e.lineNumber}
));
"""


def _figures_drawn(page) -> int:
    """How many [data-figure] charts have plotly's SVG inside; fails on any that has none."""
    from playwright.sync_api import expect

    charts = page.locator("[data-figure]")
    for i in range(charts.count()):
        expect(charts.nth(i).locator(".main-svg").first).to_be_visible()
    return charts.count()


@pytest.mark.reliability(
    "Script injection reaching a page (the Content-Security-Policy as the second layer)",
    how="headless Chromium signs in and opens every console page, the API docs and the admin; acts through htmx "
    "(acknowledge, note, an hx-confirm escalation) and a data-confirm form; then an inline <script> is injected",
    outcome="every page is served with the CSP; no securitypolicyviolation event and no console error on any "
    "page; every plotly chart draws; the injected script is refused (a violation is reported, it does not run)",
)
def test_no_page_violates_the_policy_and_charts_and_htmx_work(chromium, live_server, oncall_user, settings, artifacts):
    from playwright.sync_api import expect

    settings.PLAYBOOK_AUTO_START = False
    token = make_token("csp-writer", ["events:write", "read"])
    build_week(lambda events: post_events(live_server, token, events))
    report = report_generate(since=SINCE, until=UNTIL, now=NOW)
    post_events(live_server, token, outage(datetime.now(UTC)))
    incident = Incident.objects.get(status="triggered")
    oncall_user.is_staff = oncall_user.is_superuser = True  # the admin pages too
    oncall_user.save()

    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(10_000)
    context.add_init_script(LISTEN)
    page = context.new_page()
    console = []

    def heard(message) -> None:
        # "Failed to load resource" without its URL: the admin has no icon, so Chromium's own /favicon.ico is a 404
        # (no page event). Every resource a page asks for is checked by status just below.
        if message.type in ("error", "warning") and not message.text.startswith("Failed to load resource"):
            console.append(f"{page.url}: {message.text}")

    page.on("console", heard)
    page.on("pageerror", lambda error: console.append(f"{page.url}: {error}"))
    page.on("response", lambda r: console.append(f"{page.url}: {r.status} {r.url}") if r.status >= 400 else None)
    violations = []

    def visit(path: str) -> None:
        response = page.goto(live_server.url + path)
        assert response.ok, path
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
        violations.extend({"page": path, **v} for v in page.evaluate("window.__csp"))

    try:
        log_in(page, live_server, "/", oncall_user)  # the sign-in form itself, under the policy
        violations.extend(page.evaluate("window.__csp"))
        charts = 0
        for path in ("/", "/fleet", "/runs/ra", "/runs/llama-70b", "/nodes/gpu-0003"):
            visit(path)
            charts += _figures_drawn(page)
        visit(f"/reports/{report.pk}")
        charts += _figures_drawn(page)
        assert charts >= 8, charts
        for path in ("/incidents/", "/incidents/action-items", "/incidents/deliveries", "/reports/", "/api/v1/docs"):
            visit(path)
        expect(page.locator(".swagger-ui .info")).to_be_visible()  # Swagger UI ran from its files
        for path in ("/admin/", "/admin/runs/apitoken/", "/admin/runs/apitoken/add/"):
            visit(path)

        # htmx: actions swap parts of the incident page; a confirmation (hx-confirm) is asked and accepted.
        visit(f"/incidents/{incident.pk}")
        page.click("#action-acknowledge")
        timeline = page.locator("#incident-timeline")
        expect(timeline.locator("li.tl-acknowledged")).to_be_visible()
        page.fill("#note-text", "Draining gpu-0003.")
        page.click("#action-note")
        expect(timeline.locator("li.tl-note")).to_contain_text("Draining gpu-0003.")
        asked = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        page.click("#action-escalate")
        expect(timeline.locator("li.tl-escalated")).to_be_visible()
        assert asked and asked[0].startswith(f"Escalate #{incident.pk}")

        # A form without htmx asks through static/js/confirm.js (data-confirm); dismissing it sends nothing.
        visit(f"/incidents/{incident.pk}/postmortem")
        if page.locator("#postmortem-redraft").count() == 0:
            page.click("#postmortem-draft")
            page.wait_for_load_state("networkidle")
        before = page.url
        asked.clear()
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.click("#postmortem-redraft")
        assert asked and asked[0].startswith("Redraft from the record?")
        assert page.url == before
        violations.extend({"page": "actions", **v} for v in page.evaluate("window.__csp"))
        page.screenshot(path=str(artifacts / "csp-incident.png"), full_page=True)

        assert violations == [], violations
        assert console == [], console

        # The control: an inline script is refused and reported.
        page.evaluate(
            "() => { const s = document.createElement('script'); s.textContent = 'window.inlineRan = true';"
            " document.head.appendChild(s); }"
        )
        page.wait_for_function("window.__csp.length > 0")
        assert page.evaluate("window.inlineRan") is None
        assert page.evaluate("window.__csp")[-1]["directive"].startswith("script-src")
    finally:
        context.close()
