"""The weekly report rendered from its stored numbers: the template context, the CSV, the offline HTML file and the
PDF, each under one file-name rule (report_filename). Downloads, e-mail and pages all render through here."""

import csv
import io
from pathlib import Path

import plotly
from django.conf import settings
from django.template.loader import render_to_string

from incidents.models import WeeklyReport
from incidents.reports import charts

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATIC = Path(settings.BASE_DIR) / "static"
CSV_HEADER = ["section", "item", "metric", "value"]


def report_filename(report: WeeklyReport, extension: str) -> str:
    """fleetops-report-<since>-<until>.<extension>: a window of any length is named by both ends."""
    return f"fleetops-report-{report.since:%Y-%m-%d}-{report.until:%Y-%m-%d}.{extension}"


def report_context(report: WeeklyReport) -> dict:
    data = report.data
    response = [
        {
            "metric": metric.upper(),
            **{k: v / 60 if k.endswith("_s") and v is not None else v for k, v in values.items()},
        }
        for metric, values in data["response"].items()
        if isinstance(values, dict)
    ]
    runs = [
        {**row, "interval_min": _minutes(row["interval_s"]), "advised_min": _minutes(row["advised_s"])}
        for row in data["runs"]
    ]
    return {"report": report, "data": data, "response": response, "runs": runs, "figures": charts.figures(data)}


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 60


def report_csv(data: dict) -> str:
    """Every number of the report, one (section, item, metric, value) row each, full precision; text cells escaped
    against spreadsheet formula injection (csv_cell)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_HEADER)
    writer.writerows([csv_cell(cell) for cell in row] for row in report_csv_rows(data))
    return buffer.getvalue()


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula (it starts with =, +, -, @, a tab or a carriage return) gets a
    leading apostrophe, as OWASP advises against CSV injection; numbers are written as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def report_csv_rows(data: dict) -> list[tuple[str, str, str, object]]:
    """(section, item, metric, value) rows: every number of the report, full precision."""
    rows: list[tuple[str, str, str, object]] = []
    for key, value in data["goodput"].items():
        rows.append(("goodput", "fleet", key, value))
    for row in data["stages"]:
        rows += [("stages", row["stage"], "gpu_h", row["gpu_h"]), ("stages", row["stage"], "minutes", row["minutes"])]
    for row in data["daily"]:
        wall = row["wall_clock_s"]
        rows.append(("daily", row["day"], "goodput", row["productive_s"] / wall if wall else 0.0))
    for key, value in data["interruptions"].items():
        rows.append(("interruptions", "all", key, value))
    for row in data["causes"]:
        for key in ("count", "share", "llama3_count", "llama3_share"):
            rows.append(("causes", row["cause"], key, row[key]))
    for key, value in data["mtbf"].items():
        rows.append(("mtbf", "per_gpu", key, value))
    for metric in ("mttd", "mtta", "mttm", "mttr"):
        for key, value in data["response"][metric].items():
            rows.append(("response", metric, key, value))
    for key in ("incidents", "off_hours_incidents"):
        rows.append(("response", "all", key, data["response"][key]))
    rows += [("top_nodes", row["node"], "interruptions", row["interruptions"]) for row in data["top_nodes"]]
    rows += [("top_racks", row["rack"], "interruptions", row["interruptions"]) for row in data["top_racks"]]
    rows += [("findings", f"{row['kind']}:{row['node']}", "count", row["count"]) for row in data["findings"]]
    for row in data["runs"]:
        for key, value in row.items():
            if key != "run":
                rows.append(("runs", row["run"], key, value))
    for row in data.get("levers", []):  # reports made before the levers have none
        for lever in [*row["levers"], *([row["together"]] if row["together"] else [])]:
            for key in ("target_s", "goodput", "returned_gpu_h", "returned_usd"):
                rows.append(("levers", f"{row['run']}:{lever['lever']}", key, lever[key]))
    for row in data.get("checkpoint_io", []):  # reports made before checkpoint I/O have none
        for key in ("bytes_per_rank", "blocking_s", "bandwidth_gb_s", "drain_s", "interval_s", "failed", "lost",
                    "never_durable", "overhead", "shortfall"):  # fmt: skip
            rows.append(("checkpoint_io", row["run"], key, row[key]))
    for key, value in data["spares"].items():
        rows.append(("spares", "pool", key, value))
    for item in data["action_items"] or []:
        rows.append(("action_items", str(item["id"]), "open", item["text"]))
    return rows


def report_html(report: WeeklyReport, *, request=None) -> str:
    """One HTML file with plotly.js, the chart script and the CSS inline: it renders offline, from an e-mail."""
    context = {
        **report_context(report),
        "charts": True,
        "inline_css": (STATIC / "css" / "fleetops.css").read_text(),
        "inline_js": PLOTLY_JS.read_text() + "\n" + (STATIC / "js" / "charts.js").read_text(),
    }
    return render_to_string("incidents/report_standalone.html", context, request=request)


def report_pdf(report: WeeklyReport) -> bytes:
    """The report's tables as a PDF (WeasyPrint: no browser, no JavaScript, so the charts are left out)."""
    import weasyprint  # imported here: it loads Pango through cffi, which only the PDF needs

    context = {**report_context(report), "charts": False, "inline_css": (STATIC / "css" / "fleetops.css").read_text()}
    html = render_to_string("incidents/report_pdf.html", context)
    return weasyprint.HTML(string=html, base_url=str(STATIC)).write_pdf()
