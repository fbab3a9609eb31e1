"""The weekly report in real headless Chromium: its charts draw with no console error, and the PDF download
carries the same figures as the page (text extracted with pypdf)."""

import io

import pytest

from incidents.reports.services import report_generate
from tests.browser.conftest import log_in
from tests.stories import NOW, SINCE, UNTIL, build_week

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def post(live_server):
    from tests.conftest import make_token
    from tests.stories import post_events

    token = make_token("report-writer", ["events:write", "read"])
    return lambda events: post_events(live_server, token, events)


def test_the_report_draws_its_charts_and_the_pdf_has_the_page_figures(
    page, live_server, oncall_user, artifacts, settings, post
):
    from playwright.sync_api import expect

    pypdf = pytest.importorskip("pypdf")
    settings.PLAYBOOK_AUTO_START = False
    build_week(post)
    report = report_generate(since=SINCE, until=UNTIL, now=NOW)
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))

    log_in(page, live_server, f"/reports/{report.pk}", oncall_user)
    for name in ("stages", "causes", "daily"):
        expect(page.locator(f'[data-figure="{name}-figure"] .main-svg').first).to_be_visible()
    expect(page.locator("#report-goodput")).to_have_text("94.22%")
    page.screenshot(path=str(artifacts / "report.png"), full_page=True)
    assert errors == []

    figures = [text.strip() for text in page.locator("#report-body td.num, #report-body .big").all_inner_texts()]
    figures = [text for text in figures if text and text != "—"]
    assert len(figures) > 40
    response = page.request.get(live_server.url + f"/reports/{report.pk}.pdf")
    assert response.ok and response.headers["content-type"] == "application/pdf"
    pdf = pypdf.PdfReader(io.BytesIO(response.body()))
    text = " ".join(" ".join(p.extract_text().split()) for p in pdf.pages)
    missing = [figure for figure in figures if " ".join(figure.split()) not in text]
    assert missing == []
