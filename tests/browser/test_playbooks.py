"""A playbook from the incident page, in a real browser: dry run, start, approve, and follow it live to the end."""

from datetime import UTC, datetime, timedelta

import pytest

from incidents import services
from incidents.models import Incident
from runs.models import Node
from tests.browser.conftest import log_in
from tests.conftest import make_token
from tests.stories import event, outage, post_events

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_oncall_dry_runs_a_playbook_then_starts_it_and_follows_it_live(
    page, live_server, oncall_user, artifacts, settings
):
    from playwright.sync_api import expect

    settings.PLAYBOOK_AUTO_START = False  # the on-call starts it here, not the Xid detector
    settings.PLAYBOOK_MAX_OUT_SHARE = 0.2  # nine nodes: the breaker would refuse to take out even one at 5%
    now = datetime.now(UTC)
    spare = dict(node="gpu-0100", state="hot_spare", reason="burn-in passed", cluster="c1")
    spare = event("node.state", now - timedelta(hours=1), "b-spare", **spare)
    post_events(live_server, make_token("alerts", ["events:write"]), [spare, *outage(now)])
    incident = Incident.objects.get()
    # At SEV4 the drain and the requeue wait for an oncall approval: the page shows the wait, and who may end it.
    services.incident_severity_set(incident=incident, actor=services.FLEETOPS, severity="SEV4", reason="a drill")

    log_in(page, live_server, f"/incidents/{incident.pk}", oncall_user)
    page.evaluate("window.stillTheSamePage = true")
    card = page.locator("#incident-playbooks")
    expect(card).to_contain_text("No playbook has run for this incident.")
    page.select_option("#playbook-name", "drain-and-replace")
    page.select_option("#playbook-node", "gpu-0003")

    page.click("#playbook-dry-run")
    dry_run = card.locator("article.execution").first
    expect(dry_run).to_contain_text("dry run")
    expect(dry_run).to_contain_text("post node.state gpu-0003 -> draining or cordoned")
    expect(dry_run.locator(".badge.pb-succeeded")).to_have_count(6)  # the execution and its five steps
    assert Node.objects.get(hostname="gpu-0003").state != "in_repair"

    page.on("dialog", lambda dialog: dialog.accept())  # "Start this playbook on the chosen node?"
    page.click("#playbook-start-button")
    article = card.locator("article.execution").first  # newest first
    expect(article).to_contain_text("waits for approval by oncall")
    expect(card.locator(".pulse")).to_be_visible()  # the card follows it
    card.screenshot(path=str(artifacts / "playbook-waiting.png"))
    article.get_by_role("button", name="Approve drain").click()
    expect(article.get_by_role("button", name="Approve requeue job")).to_be_visible()

    # A colleague approves the requeue on their own screen; this page catches up by polling.
    other = page.context.new_page()
    other.goto(live_server.url + f"/incidents/{incident.pk}")
    other.get_by_role("button", name="Approve requeue job").click()
    expect(other.locator("#incident-playbooks article.execution").first).to_contain_text("wait running")
    other.close()
    expect(article.locator("header .badge").last).to_have_text("succeeded", timeout=15_000)
    expect(article.locator("tbody .badge.pb-succeeded")).to_have_count(5)
    expect(article).to_contain_text("spare gpu-0100")
    expect(card.locator(".pulse")).to_have_count(0)  # nothing active: polling stopped
    assert page.evaluate("window.stillTheSamePage") is True
    card.screenshot(path=str(artifacts / "playbook.png"))
    page.screenshot(path=str(artifacts / "playbook-page.png"), full_page=True)

    assert Node.objects.get(hostname="gpu-0003").state == "in_repair"
    texts = list(incident.timeline.values_list("text", flat=True))
    assert "ana approved step drain" in texts and "ana approved step requeue job" in texts
