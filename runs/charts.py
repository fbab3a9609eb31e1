"""Plotly figures as plain dicts (data + layout), built from the domain's results and tested as data.

The browser draws them with plotly.js served from our own static files (static/js/charts.js).
Durations on axes are hours or minutes, as each axis title says. Numbers read as the pages write them
(fleet_tags.number): thousands separators, trailing zeros dropped (d3-format ",.1~f" in hover labels).
"""

import math
from datetime import date, datetime

from runs.domain import advisor, checkpoint_io, goodput
from runs.domain.taxonomy import cause_label

COLORS = {
    "productive": "#2da44e",
    "detection": "#cf222e",
    "rescheduling": "#fb8500",
    "reload": "#d4a72c",
    "rewound": "#8250df",
    "checkpoint": "#0969da",
    "other": "#8c959f",
    "shrunk": "#bf3989",
}
LABELS = {
    "productive": "productive",
    "detection": "detection",
    "rescheduling": "rescheduling",
    "reload": "reload",
    "rewound": "rewound work",
    "checkpoint": "checkpoint blocking",
    "other": "other",
    "shrunk": "shrunk (fewer GPUs)",
}
_BASE_LAYOUT = {
    # No width anywhere: autosize takes the container's, and plotly.js's responsive config (static/js/charts.js)
    # follows it when the card resizes.
    "autosize": True,
    "margin": {"l": 60, "r": 20, "t": 10, "b": 40},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"family": "system-ui, sans-serif", "size": 12},
    # Above the plot: below it, a legend and the x axis's labels and title compete for the same pixels.
    "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"},
}
# Every axis: tick labels and titles widen the margins they need, on every side (a last tick label is not cut at
# the figure's edge), and numbers read 45,000 (not 45000, nor plotly's 45k).
_AXIS = {"automargin": True, "separatethousands": True, "exponentformat": "none"}


def _layout(**extra) -> dict:
    """The shared layout with `extra` over it; each axis given keeps _AXIS's settings unless it names its own."""
    layout = {**_BASE_LAYOUT, **extra}
    for axis in ("xaxis", "yaxis"):
        layout[axis] = {**_AXIS, **layout.get(axis, {})}
    return layout


def goodput_bar(total: goodput.Breakdown) -> dict:
    """One stacked bar: the run's wall-clock hours split into productive time and each badput stage."""
    parts = {"productive": total.productive_s, **total.stages_s}
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": LABELS[name],
            "y": ["time"],
            "x": [round(seconds / 3600, 4)],
            "marker": {"color": COLORS[name]},
            "hovertemplate": f"{LABELS[name]}: %{{x:,.2~f}} h<extra></extra>",
        }
        for name, seconds in parts.items()
        if seconds > 0
    ]
    return {
        "data": data,
        "layout": _layout(
            barmode="stack", height=110, xaxis={"title": {"text": "hours"}}, yaxis={"visible": False}, showlegend=False
        ),
    }


def run_timeline(
    *, started_at: datetime, until: datetime, lost: list[tuple[datetime, datetime, str]], faults: list[dict]
) -> dict:
    """Lost time on a time axis, one row per stage; the gaps on the 'lost' rows are productive.

    `lost` are goodput.segments(); `faults` are {at, label} for the fault markers.
    """
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": "productive",
            "y": ["productive"],
            "base": [started_at.isoformat()],
            "x": [(until - started_at).total_seconds() * 1000],
            "marker": {"color": COLORS["productive"], "opacity": 0.25},
            "hoverinfo": "skip",
        }
    ]
    for stage in goodput.STAGES:
        spans = [(start, end) for start, end, name in lost if name == stage]
        if not spans:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": LABELS[stage],
                "y": [LABELS[stage]] * len(spans),
                "base": [start.isoformat() for start, _ in spans],
                "x": [(end - start).total_seconds() * 1000 for start, end in spans],
                "marker": {"color": COLORS[stage]},
                "customdata": [round((end - start).total_seconds() / 60, 1) for start, end in spans],
                "hovertemplate": (
                    f"{LABELS[stage]}: %{{customdata:,.1~f}} min from %{{base|%Y-%m-%d %H:%M}}<extra></extra>"
                ),
            }
        )
    if faults:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "faults",
                "x": [f["at"].isoformat() for f in faults],
                "y": ["faults"] * len(faults),
                "text": [f["label"] for f in faults],
                "marker": {"symbol": "x", "size": 9, "color": COLORS["detection"]},
                "hovertemplate": "%{text}<br>%{x|%Y-%m-%d %H:%M}<extra></extra>",
            }
        )
    return {
        "data": data,
        "layout": _layout(
            barmode="overlay",
            height=320,
            margin={"l": 130, "r": 20, "t": 10, "b": 40},
            xaxis={"type": "date", "title": {"text": "UTC"}},  # cached for every reader: the zone said, not converted
            yaxis={"autorange": "reversed"},
            showlegend=False,
        ),
    }


def advisor_curve(advice: advisor.Advice) -> dict:
    """Expected waste (%) against the checkpoint interval (minutes), with Young, Daly, the current interval
    and the floor marked."""
    taus = [tau / 60 for tau, _ in advice.curve]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "expected waste W(τ)",
            "x": taus,
            # A waste of 100% or more is not a fraction of the time: a gap in the line, not a point off the chart.
            "y": [w * 100 if w < 1 else None for _, w in advice.curve],
            "line": {"color": COLORS["checkpoint"]},
            "hovertemplate": "τ = %{x:,.1~f} min: %{y:,.2~f}%<extra></extra>",
        }
    ]
    # Named in the legend, not beside their points: Young, Daly and the current interval often sit close together
    # (or on one point), and labels on the plot then print over each other whatever their positions.
    marks = [
        ("Young", advice.young_s, advice.waste_at_young, "#2da44e", "circle"),
        ("Daly", advice.daly_s, advice.waste_at_daly, "#8250df", "diamond"),
    ]
    if advice.current_s:
        marks.append(("current", advice.current_s, advice.waste_at_current, "#cf222e", "x"))
    for name, tau, w, color, symbol in marks:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "x": [tau / 60],
                "y": [w * 100],
                "marker": {"size": 10, "color": color, "symbol": symbol},
                "hovertemplate": f"{name}: τ = %{{x:,.1~f}} min, waste %{{y:,.2~f}}%<extra></extra>",
            }
        )
    floor_line = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": advice.floor * 100,
        "y1": advice.floor * 100,
        "line": {"dash": "dot", "color": "#6b7785"},
    }
    return {
        "data": data,
        "layout": _layout(
            height=320,
            xaxis={"type": "log", "title": {"text": "checkpoint interval τ (minutes)"}},
            yaxis={"title": {"text": "expected waste (% of wall-clock)"}, "rangemode": "tozero"},
            shapes=[floor_line],
            annotations=[
                {
                    "xref": "paper",
                    "x": 1,
                    "y": advice.floor * 100,
                    "text": "floor",
                    "showarrow": False,
                    "yanchor": "bottom",
                    "xanchor": "right",
                }
            ],
            showlegend=True,
        ),
    }


def daily_goodput(daily: list[tuple[date, goodput.Breakdown]]) -> dict:
    """Per day, the share of wall-clock that was productive and each badput stage (stacked to 100%)."""
    days = [day.isoformat() for day, _ in daily]

    def share(b: goodput.Breakdown, seconds: float) -> float:
        return round(100 * seconds / b.wall_clock_s, 3) if b.wall_clock_s else 0

    data = []
    for name in ("productive", *goodput.STAGES):
        values = [share(b, b.productive_s if name == "productive" else b.stages_s[name]) for _, b in daily]
        if any(values):
            data.append(
                {
                    "type": "bar",
                    "name": LABELS[name],
                    "x": days,
                    "y": values,
                    "marker": {"color": COLORS[name]},
                    "hovertemplate": f"%{{x}} {LABELS[name]}: %{{y:,.1~f}}%<extra></extra>",
                }
            )
    return {
        "data": data,
        "layout": _layout(barmode="stack", height=300, yaxis={"title": {"text": "% of wall-clock"}, "range": [0, 100]}),
    }


def goodput_by_run(by_run: list[tuple[str, goodput.Breakdown]]) -> dict:
    names = [name for name, _ in by_run]
    return {
        "data": [
            {
                "type": "bar",
                "x": names,
                "y": [round(b.goodput * 100, 2) for _, b in by_run],
                "marker": {"color": COLORS["productive"]},
                "hovertemplate": "%{x}: %{y:,.1~f}%<extra></extra>",
            }
        ],
        "layout": _layout(height=280, yaxis={"title": {"text": "goodput (%)"}, "range": [0, 100]}),
    }


def lost_by_cause(lost: dict[str, float]) -> dict:
    """GPU-hours lost by root cause, largest at the top."""
    ranked = sorted(lost.items(), key=lambda item: item[1])
    return {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": [cause_label(c) for c, _ in ranked],
                "x": [round(h, 2) for _, h in ranked],
                "marker": {"color": COLORS["detection"]},
                "hovertemplate": "%{y}: %{x:,.1~f} GPU-h<extra></extra>",
            }
        ],
        "layout": _layout(
            height=max(200, 28 * len(ranked) + 60),
            margin={"l": 200, "r": 20, "t": 10, "b": 40},
            xaxis={"title": {"text": "GPU-hours lost"}},
        ),
    }


def checkpoint_writes(record: checkpoint_io.RecordIO) -> dict:
    """Each completed write's blocking and its drain to durable storage (seconds, log axis) at its completion time
    (UTC), with the run's checkpoint interval as a line: a drain above the line took longer than the interval."""
    times, steps = [w.at.isoformat() for w in record.writes], [w.step for w in record.writes]

    def trace(name: str, seconds: list, **style) -> dict:
        # A write that blocked or drained for nothing has no point on a log axis: a gap, not a zero.
        y = [value or None for value in seconds]
        return {"type": "scatter", "name": name, "x": times, "y": y, "customdata": steps, **style}

    data = [
        trace(
            "blocking",
            [w.blocking_s for w in record.writes],
            mode="lines+markers",
            line={"color": COLORS["checkpoint"]},
            hovertemplate="step %{customdata:,}: blocked %{y:,.3~f} s<extra></extra>",
        ),
        trace(
            "drain to durable",
            [w.drain_s for w in record.writes],
            mode="markers",
            marker={"color": COLORS["rescheduling"], "symbol": "triangle-up"},
            hovertemplate="step %{customdata:,}: durable %{y:,.1~f} s after completion<extra></extra>",
        ),
    ]
    shapes, annotations = [], []
    if record.interval_s:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": record.interval_s,
                "y1": record.interval_s,
                "line": {"dash": "dot", "color": COLORS["detection"]},
            }
        )
        annotations.append(
            {"xref": "paper", "x": 1, "y": math.log10(record.interval_s), "text": "interval", "showarrow": False,
             "yanchor": "bottom", "xanchor": "right"}
        )  # fmt: skip
    return {
        "data": data,
        "layout": _layout(
            height=300,
            xaxis={"type": "date", "title": {"text": "completed (UTC)"}},
            yaxis={"type": "log", "title": {"text": "seconds"}},
            shapes=shapes,
            annotations=annotations,
            showlegend=True,
        ),
    }


def checkpoint_front(pricing: checkpoint_io.Pricing, today: tuple[float, float, float] | None) -> dict:
    """The Pareto front of interval against expected waste (advisor.pareto_front over the designs' write costs):
    each design at its interval, the front through the non-dominated ones, and where the run sits today."""
    front = sorted(pricing.front, key=lambda p: p.interval_s)
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "Pareto front",
            "x": [p.interval_s / 60 for p in front],
            "y": [p.waste * 100 for p in front],
            "line": {"color": "#6b7785", "dash": "dot"},
            "hoverinfo": "skip",
        }
    ]
    symbols = {"sync": "square", "async": "diamond", "local": "triangle-up", "peer": "circle"}
    for design in pricing.designs:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": design.label,
                "x": [design.interval_s / 60],
                "y": [design.waste * 100],
                "customdata": [design.blocking_s],
                "marker": {"size": 11, "symbol": symbols[design.name]},
                "hovertemplate": f"{design.label}: blocks %{{customdata:,.3~f}} s, every %{{x:,.1~f}} min, "
                "waste %{y:,.2~f}%<extra></extra>",
            }
        )
    if today is not None:
        interval, blocking, waste = today
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "this run today",
                "x": [interval / 60],
                "y": [waste * 100],
                "customdata": [blocking],
                "marker": {"size": 12, "symbol": "x", "color": COLORS["detection"]},
                "hovertemplate": "today: blocks %{customdata:,.3~f} s, every %{x:,.1~f} min, waste %{y:,.2~f}%"
                "<extra></extra>",
            }
        )
    return {
        "data": data,
        # Six legend entries take rows above a phone's plot: a short axis title keeps inside what is left of it.
        "layout": _layout(
            height=360,
            xaxis={"type": "log", "title": {"text": "interval (minutes)"}},
            yaxis={"title": {"text": "waste (%)"}, "rangemode": "tozero"},
            showlegend=True,
        ),
    }
