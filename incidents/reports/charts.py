"""Plotly figures of the weekly report as plain dicts, built from its stored numbers (incidents.reports.services)."""

from dataclasses import fields
from datetime import date

from runs import charts
from runs.domain import goodput

_BREAKDOWN_FIELDS = {f.name for f in fields(goodput.Breakdown)}


def badput_by_stage(data: dict) -> dict:
    """GPU-hours lost in each badput stage over the window."""
    rows = data["stages"]
    return {
        "data": [
            {
                "type": "bar",
                "x": [charts.LABELS[row["stage"]] for row in rows],
                "y": [round(row["gpu_h"], 3) for row in rows],
                "marker": {"color": [charts.COLORS[row["stage"]] for row in rows]},
                "hovertemplate": "%{x}: %{y:,.2~f} GPU-h<extra></extra>",
            }
        ],
        "layout": charts._layout(height=280, yaxis={"title": {"text": "GPU-hours lost"}}),
    }


def causes_vs_llama3(data: dict) -> dict:
    """Share of unexpected interruptions by cause this window next to Llama 3's (Table 5 counts / 419), in %."""
    rows = [row for row in data["causes"] if row["count"] or row["llama3_share"] >= 0.01]
    labels = [row["label"] for row in rows]
    return {
        "data": [
            {
                "type": "bar",
                "name": "this window",
                "x": labels,
                "y": [round(100 * row["share"], 2) for row in rows],
                "marker": {"color": charts.COLORS["detection"]},
                "hovertemplate": "%{x}: %{y:,.1~f}%<extra>this window</extra>",
            },
            {
                "type": "bar",
                "name": "Llama 3 (419 interruptions)",
                "x": labels,
                "y": [round(100 * row["llama3_share"], 2) for row in rows],
                "marker": {"color": charts.COLORS["other"]},
                "hovertemplate": "%{x}: %{y:,.1~f}%<extra>Llama 3</extra>",
            },
        ],
        "layout": charts._layout(
            barmode="group",
            height=360,
            yaxis={"title": {"text": "%"}},
        ),
    }


def daily_goodput(data: dict) -> dict:
    days = [
        (
            date.fromisoformat(row["day"]),
            goodput.Breakdown(**{k: v for k, v in row.items() if k in _BREAKDOWN_FIELDS}),
        )
        for row in data["daily"]
    ]
    return charts.daily_goodput(days)


def figures(data: dict) -> dict:
    return {"stages": badput_by_stage(data), "causes": causes_vs_llama3(data), "daily": daily_goodput(data)}
