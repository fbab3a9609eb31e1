"""The weekly reliability report: list, page, and its downloads (self-contained HTML, CSV, PDF)."""

import csv
from datetime import UTC, datetime, time
from pathlib import Path

import plotly
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleetops.roles import can_act
from incidents.reports import charts as report_charts
from incidents.reports import services as reports
from runs.models import WeeklyReport

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STATIC = Path(settings.BASE_DIR) / "static"


class WindowForm(forms.Form):
    since = forms.DateField()
    until = forms.DateField()

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["until"] <= data["since"]:
            raise forms.ValidationError("The window must end after it starts.")
        return data


@login_required
def report_list(request):
    rows = list(WeeklyReport.objects.order_by("since", "until").values("pk", "since", "until", "generated_at", "data"))
    previous = None
    for row in rows:
        row["goodput"] = row["data"]["goodput"]["fleet"]
        row["unplanned"] = row["data"]["interruptions"]["unplanned"]
        row["delta_pp"] = None if previous is None else 100 * (row["goodput"] - previous)
        previous = row["goodput"]
    return render(request, "incidents/reports.html", {"reports": rows[::-1], "form": WindowForm()})


@login_required
@require_POST
def report_create(request):
    if not can_act(request.user):
        return HttpResponseForbidden("Viewers read reports; generating one needs the oncall or admin role.")
    form = WindowForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give a window: two dates, the end after the start.")
        return redirect("report-list")
    since, until = (datetime.combine(form.cleaned_data[k], time(), tzinfo=UTC) for k in ("since", "until"))
    report = reports.report_generate(since=since, until=until, now=timezone.now())
    return redirect(report)


def _context(report: WeeklyReport) -> dict:
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
    return {"report": report, "data": data, "response": response, "runs": runs, "figures": report_charts.figures(data)}


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 60


@login_required
def report_page(request, pk):
    context = {**_context(get_object_or_404(WeeklyReport, pk=pk)), "charts": True}
    return render(request, "incidents/report.html", context)


@login_required
def report_download(request, pk):
    """One HTML file with plotly.js, the chart script and the CSS inline: it renders offline, from an e-mail."""
    report = get_object_or_404(WeeklyReport, pk=pk)
    context = {
        **_context(report),
        "charts": True,
        "inline_css": (STATIC / "css" / "fleetops.css").read_text(),
        "inline_js": PLOTLY_JS.read_text() + "\n" + (STATIC / "js" / "charts.js").read_text(),
    }
    response = HttpResponse(render_to_string("incidents/report_standalone.html", context, request=request))
    response["Content-Disposition"] = f'attachment; filename="{_filename(report)}.html"'
    return response


@login_required
def report_csv(request, pk):
    report = get_object_or_404(WeeklyReport, pk=pk)
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{_filename(report)}.csv"'
    writer = csv.writer(response)
    writer.writerow(["section", "item", "metric", "value"])
    writer.writerows(reports.report_csv_rows(report.data))
    return response


@login_required
def report_pdf(request, pk):
    report = get_object_or_404(WeeklyReport, pk=pk)
    response = HttpResponse(reports_pdf(report), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{_filename(report)}.pdf"'
    return response


def reports_pdf(report: WeeklyReport) -> bytes:
    """The report's tables as a PDF (WeasyPrint: no browser, no JavaScript, so the charts are left out)."""
    import weasyprint  # imported here: it loads Pango through cffi, which only the PDF needs

    context = {**_context(report), "charts": False, "inline_css": (STATIC / "css" / "fleetops.css").read_text()}
    html = render_to_string("incidents/report_pdf.html", context)
    return weasyprint.HTML(string=html, base_url=str(STATIC)).write_pdf()


def _filename(report: WeeklyReport) -> str:
    return f"fleetops-report-{report.since:%Y-%m-%d}-{report.until:%Y-%m-%d}"
