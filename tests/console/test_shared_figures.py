"""One figure, one source: each figure that two surfaces show (the overview, the fleet page, a run's page, the weekly
report, the API) agrees on one fleet, and says its window (issue 17: spare need 11 on the overview and 7 in the
report, the advised interval 33 min on the run page and 44.2 min in the report, neither with a window).

The report's week (tests.stories.build_week) is read with the clock at its end: "the record up to now" and "this
week" then hold the same history, so figures with those two windows must be equal, to the digit shown."""

import re

import pytest
import time_machine

from incidents.playbooks import spares
from incidents.reports.services import report_generate
from runs.templatetags.fleet_tags import duration, number, percent
from tests.stories import SINCE, UNTIL, build_week

WINDOW = f"since={SINCE.isoformat().replace('+00:00', 'Z')}&until={UNTIL.isoformat().replace('+00:00', 'Z')}"


@pytest.fixture
def week(post, settings):
    settings.REPAIR_HOURS_DEFAULT = 48.0
    settings.PLAYBOOK_AUTO_START = False
    build_week(post)


def _text(html: str, element_id: str, end: str = r"p|td|span|strong|a|h\d") -> str:
    """The text inside the element with this id (up to the first closing `end` tag), tags stripped."""
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</({end})>', html, re.S)
    assert found, element_id
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def _row(html: str, table_id: str, first_cell: str) -> list[str]:
    """The cells of the row whose first cell is `first_cell`, in the table of the section with this id."""
    section = html[html.index(f'id="{table_id}"') :]
    row = re.search(rf"<tr><td>{re.escape(first_cell)}</td>(.*?)</tr>", section, re.S)
    assert row, (table_id, first_cell)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]


def test_each_figure_two_surfaces_show_comes_from_one_source_and_agrees(week, oncall, reader):
    with time_machine.travel(UNTIL, tick=False):
        report = report_generate(since=SINCE, until=UNTIL, now=UNTIL)
        pages = {
            "overview": oncall.get("/").content.decode(),
            "fleet": oncall.get(f"/fleet?{WINDOW}").content.decode(),
            "run": oncall.get("/runs/ra").content.decode(),
            "report": oncall.get(f"/reports/{report.pk}").content.decode(),
        }
        api = {
            "fleet": reader.get(f"/api/v1/fleet/goodput?{WINDOW}").json(),
            "run": reader.get("/api/v1/runs/ra/goodput").json(),
            "advice": reader.get("/api/v1/runs/ra/advice").json(),
        }
        pools = spares.spare_pools_get(now=UNTIL)

    # Fleet goodput over the week: the report, the fleet page and the API.
    fleet = api["fleet"]["goodput"]
    assert _text(pages["report"], "report-goodput") == percent(fleet, 2)
    assert _text(pages["fleet"], "fleet-goodput") == percent(fleet)
    assert report.data["goodput"]["fleet"] == pytest.approx(fleet, abs=1e-12)

    # Run ra's goodput over its life (inside the week): its page, the API, the report's runs table.
    run_goodput = api["run"]["goodput"]
    assert _text(pages["run"], "goodput-value") == percent(run_goodput)
    ra = _row(pages["report"], "report-runs", "ra")
    assert ra[1] == percent(run_goodput, 2)

    # The advised interval (Daly's), from the record up to now: the run page, the API, the report made now.
    daly_s = api["advice"]["advice"]["daly_s"]
    assert _text(pages["run"], "daly-interval") == duration(daly_s)
    assert ra[3] == number(daly_s / 60, 1)
    assert "up to 2026-03-09 00:00 UTC, when this report was made" in pages["report"]  # its window, said
    assert "the whole record up to 2026-03-09 00:00 UTC" in pages["run"]

    # Per-GPU MTBF: the report's week, and the failure rate the advice scales to the run (the same record).
    rate = api["advice"]["failure_rate"]
    assert _text(pages["report"], "report-mtbf") == f"{number(1 / rate['per_gpu_hour'])} GPU-h"
    assert report.data["mtbf"]["mtbf_gpu_h"] == pytest.approx(1 / rate["per_gpu_hour"])

    # Spare-pool need: one function (incidents.playbooks.spares), each surface over the window it names.
    (pool,) = pools.values()
    overview_pool = " ".join(_text(pages["overview"], f"spare-pool-{pool.cluster_id}", end="p").split())
    assert f"Hot spares {pool.spares} of {pool.needed} needed" in overview_pool
    # The cluster's record is the week, shorter than the overview's 30-day window: the rate's span is said.
    said = f"({pool.failures} failures in the cluster's 168 h of record, shorter than the 30-day window"
    assert said in overview_pool
    week_need = spares.fleet_spares(spares.spare_pools_get(now=UNTIL, window_days=7))
    assert _text(pages["report"], "report-spares-needed") == str(week_need["needed"])
    assert "over this report's 7 days" in pages["report"]
