"""The demo in a real browser: what `make run` loads leads with its open fault, and its report, postmortem and
playbook pages have something to show (issue 18)."""

from io import StringIO

import pytest
from django.core.management import call_command

from incidents.demo.services import ACK_MIN
from incidents.models import Incident, Postmortem, WeeklyReport
from tests.browser.conftest import log_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_demo_leads_with_its_open_fault_and_its_pages_have_content(page, live_server, oncall_user, artifacts):
    from playwright.sync_api import expect

    call_command("load_demo", "--days", "7", stdout=StringIO())
    live = Incident.objects.get(status="triggered")

    log_in(page, live_server, "/incidents/", oncall_user)
    first = page.locator("#incident-list tr.incident-row").first
    expect(first).to_have_attribute("id", f"incident-{live.pk}")  # the one triggered, unacknowledged, burning
    expect(page.locator("#group-needs-a-person tr.incident-row")).to_have_count(1)
    expect(page.locator("#open-incidents")).to_have_text("1")
    page.screenshot(path=str(artifacts / "demo-board.png"), full_page=True)

    page.goto(f"{live_server.url}/incidents/{live.pk}")
    expect(page.locator("#incident-playbooks")).to_contain_text("drain-and-replace")  # FleetOps drained the node
    expect(page.locator("#incident-playbooks")).to_contain_text("succeeded")

    report = WeeklyReport.objects.get()
    page.goto(f"{live_server.url}/reports/{report.pk}")
    mttd = float(page.locator("#response-mttd td").nth(2).inner_text())
    mtta = float(page.locator("#response-mtta td").nth(2).inner_text())
    assert 0 <= mttd <= 2  # the simulator's detections: 5-120 s for a crash, an agent's Xid at once
    assert ACK_MIN[0] <= mtta <= ACK_MIN[2]  # the rotation's 1-15 min
    page.screenshot(path=str(artifacts / "demo-report.png"), full_page=True)

    page.goto(f"{live_server.url}/incidents/deliveries")
    expect(page.locator("#delivery-table tr.delivery-delivered", has_text="triggered")).to_have_count(1)

    reviewed = Postmortem.objects.get(reviewed_at__isnull=False)
    page.goto(f"{live_server.url}/incidents/{reviewed.incident_id}/postmortem")
    expect(page.locator("#postmortem-reviewed")).to_contain_text("reviewed by")
