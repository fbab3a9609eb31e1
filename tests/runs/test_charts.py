"""Plotly figures are plain data: check what they would draw."""

from datetime import UTC, date, datetime, timedelta

import pytest

from runs import charts
from runs.domain import advisor, checkpoint_io, goodput

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_the_goodput_bar_stacks_productive_and_each_nonzero_stage_in_hours():
    figure = charts.goodput_bar(goodput.Breakdown(wall_clock_s=7200, productive_s=5400, detection_s=1800))
    assert [(t["name"], t["x"]) for t in figure["data"]] == [("productive", [1.5]), ("detection", [0.5])]
    assert figure["layout"]["barmode"] == "stack"


def test_the_timeline_draws_each_lost_span_at_its_time_and_marks_faults():
    lost = [
        (T0 + timedelta(minutes=45), T0 + timedelta(minutes=46), "detection"),
        (T0 + timedelta(minutes=30), T0 + timedelta(minutes=45), "rewound"),
    ]
    figure = charts.run_timeline(
        started_at=T0,
        until=T0 + timedelta(hours=2),
        lost=lost,
        faults=[{"at": T0 + timedelta(minutes=45), "label": "#1 Faulty GPU"}],
    )
    by_name = {t["name"]: t for t in figure["data"]}
    assert by_name["detection"]["base"] == ["2026-03-01T00:45:00+00:00"] and by_name["detection"]["x"] == [60_000]
    assert by_name["rewound work"]["x"] == [900_000]
    assert by_name["productive"]["x"] == [7_200_000]
    assert by_name["faults"]["text"] == ["#1 Faulty GPU"]


def test_the_advisor_curve_marks_young_daly_current_and_the_floor():
    advice = advisor.advise(delta_s=60, mtbf_s=3 * 3600, restart_s=600, current_s=3600)
    figure = charts.advisor_curve(advice)
    marks = {t["name"]: t for t in figure["data"] if t["mode"] == "markers"}
    assert set(marks) == {"Young", "Daly", "current"}
    assert round(marks["Young"]["x"][0], 2) == 18.97  # docs/DOMAIN.md section 3: sqrt(2 * 1 * 180) minutes
    assert figure["layout"]["shapes"][0]["y0"] == advice.floor * 100
    assert figure["layout"]["xaxis"]["type"] == "log"


def test_daily_shares_stack_to_one_hundred_percent():
    day = goodput.Breakdown(wall_clock_s=86400, productive_s=86400 - 1800, detection_s=600, rewound_s=1200)
    figure = charts.daily_goodput([(date(2026, 3, 1), day)])
    assert [t["name"] for t in figure["data"]] == ["productive", "detection", "rewound work"]
    assert round(sum(t["y"][0] for t in figure["data"]), 6) == 100


def test_lost_by_cause_lists_the_biggest_last_for_the_top_of_a_horizontal_bar():
    figure = charts.lost_by_cause({"faulty_gpu": 10.0, "gpu_hbm3": 25.0, "nic": 1.0})
    assert figure["data"][0]["y"] == ["NIC", "Faulty GPU", "GPU HBM3 memory"]


def test_the_advisor_names_its_marks_in_the_legend_where_labels_cannot_overprint():
    # Daly and the current interval on one point: text beside the points would print one label over the other.
    advice = advisor.advise(delta_s=60, mtbf_s=3 * 3600, restart_s=600, current_s=None)
    advice = advisor.advise(delta_s=60, mtbf_s=3 * 3600, restart_s=600, current_s=advice.daly_s)
    figure = charts.advisor_curve(advice)
    marks = [t for t in figure["data"] if t["name"] in ("Young", "Daly", "current")]
    assert len(marks) == 3 and all(t["mode"] == "markers" and "text" not in t for t in marks)
    assert len({t["marker"]["symbol"] for t in marks}) == 3  # told apart without colour too
    assert figure["layout"]["showlegend"] is True
    assert [a["text"] for a in figure["layout"]["annotations"]] == ["floor"]  # the only text on the plot
    legend = figure["layout"]["legend"]
    assert legend["yanchor"] == "bottom" and legend["y"] >= 1  # above the plot, clear of the x axis's title


def test_the_checkpoint_writes_chart_draws_blocking_and_drain_at_each_completion_with_the_interval():
    rows = [
        checkpoint_io.WriteRow(
            step, "completed", "durable", T0 + timedelta(minutes=10 * step),
            T0 + timedelta(minutes=10 * step, seconds=5), T0 + timedelta(minutes=10 * step + 15, seconds=5), 5.0,
            16 * 10**9,
        )
        for step in (1, 2)
    ]  # fmt: skip
    figure = charts.checkpoint_writes(checkpoint_io.measure(rows, ranks=16, interval_s=600.0))
    blocking, drain = figure["data"]
    assert blocking["x"] == ["2026-03-01T00:10:05+00:00", "2026-03-01T00:20:05+00:00"] and blocking["y"] == [5.0, 5.0]
    assert drain["y"] == [900.0, 900.0] and drain["customdata"] == [1, 2]
    assert figure["layout"]["shapes"][0]["y0"] == 600.0
    assert figure["layout"]["yaxis"]["type"] == "log"


def test_the_front_chart_puts_each_design_at_its_interval_and_the_run_today():
    hops = checkpoint_io.Hops(gpu_host=50.0, nvme=6.5, storage=2000.0, peer=400.0)
    pricing = checkpoint_io.price(state_bytes=1.13e12, ranks=2048, hops=hops, mtbf_s=86_400, restart_s=600)
    figure = charts.checkpoint_front(pricing, (1800.0, 30.0, 0.05))
    by_name = {t["name"]: t for t in figure["data"]}
    assert by_name["synchronous"]["x"] == [pytest.approx(312.0846 / 60, abs=1e-4)]
    assert by_name["this run today"]["x"] == [30.0] and by_name["this run today"]["y"] == [5.0]
    assert len(by_name["Pareto front"]["x"]) == 2
