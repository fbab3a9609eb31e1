"""Every chart the console and the weekly report draw (runs.charts, incidents.reports.charts) fits its card and
writes its numbers as the pages do (issue 20: "a report chart's last label is cut", "45696.0 beside 129,034").

Checked as data: the layout a chart is drawn from, not pixels (tests/browser measures those)."""

import re
from datetime import UTC, date, datetime, timedelta

from incidents.reports import charts as report_charts
from runs import charts
from runs.domain import advisor, goodput

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = goodput.Breakdown(wall_clock_s=86400, productive_s=86400 - 1800, detection_s=600, rewound_s=1200)
REPORT = {  # the fields of report_build's data the figures read
    "stages": [{"stage": "detection", "gpu_h": 1234.5678}, {"stage": "rewound", "gpu_h": 0.25}],
    "causes": [
        {"label": "Faulty GPU", "count": 3, "share": 0.75, "llama3_share": 148 / 419},
        {"label": "Host maintenance (unplanned)", "count": 1, "share": 0.25, "llama3_share": 0.0},
    ],
    "daily": [{"day": "2026-03-01", "wall_clock_s": 86400.0, "productive_s": 84600.0, "detection_s": 1800.0}],
}


def _figures() -> dict[str, dict]:
    lost = [(T0 + timedelta(minutes=45), T0 + timedelta(minutes=46), "detection")]
    advice = advisor.advise(delta_s=60, mtbf_s=3 * 3600, restart_s=600, current_s=3600)
    return {
        "goodput_bar": charts.goodput_bar(DAY),
        "run_timeline": charts.run_timeline(
            started_at=T0, until=T0 + timedelta(hours=2), lost=lost, faults=[{"at": lost[0][0], "label": "#1"}]
        ),
        "advisor_curve": charts.advisor_curve(advice),
        "daily_goodput": charts.daily_goodput([(date(2026, 3, 1), DAY)]),
        "goodput_by_run": charts.goodput_by_run([("r1", DAY)]),
        "lost_by_cause": charts.lost_by_cause({"faulty_gpu": 10.0, "gpu_hbm3": 25.0}),
        **{f"report_{name}": figure for name, figure in report_charts.figures(REPORT).items()},
    }


def test_every_chart_takes_its_cards_width_and_keeps_its_labels_inside():
    """No fixed width (autosize: the chart takes its card's width, and plotly.js's responsive config follows it),
    and axes whose tick labels and titles widen the margins they need on every side, rather than being cut at the
    figure's edge (a bar chart's last category label, slanted, ran past a right margin of 20 px)."""
    for name, figure in _figures().items():
        layout = figure["layout"]
        assert layout["autosize"] is True and "width" not in layout, name
        for axis in ("xaxis", "yaxis"):
            assert layout[axis]["automargin"] is True, (name, axis)
            assert layout[axis]["separatethousands"] is True and layout[axis]["exponentformat"] == "none", (name, axis)
        if layout.get("showlegend", True):
            assert layout["legend"]["yanchor"] == "bottom" and layout["legend"]["y"] >= 1, name  # clear of the x axis


def test_every_hover_label_writes_numbers_as_the_pages_do():
    """Thousands separators and trailing zeros dropped (d3-format ",.N~f"), as fleet_tags.number writes them on the
    pages; a date keeps its own format, and a timeline span's length in ms is not shown."""
    for name, figure in _figures().items():
        for trace in figure["data"]:
            for field, spec in re.findall(r"%{(\w+)(?::([^}]*))?}", trace.get("hovertemplate", "")):
                values = [] if field == "x" and "base" in trace else trace.get(field) or []
                if values and all(isinstance(v, int | float) for v in values):
                    assert spec.startswith(",") and spec.endswith("~f"), (name, trace.get("name"), field, spec)
