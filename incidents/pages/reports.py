"""The weekly reliability report: list, page, and its downloads (self-contained HTML, CSV, PDF)."""

from datetime import UTC, datetime, time

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleetops.roles import can_act
from incidents.models import WeeklyReport
from incidents.reports import rendering
from incidents.reports import services as reports


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


@login_required
def report_page(request, pk):
    context = {**rendering.report_context(get_object_or_404(WeeklyReport, pk=pk)), "charts": True}
    return render(request, "incidents/report.html", context)


@login_required
def report_download(request, pk):
    """The report as one offline HTML file (rendering.report_html)."""
    report = get_object_or_404(WeeklyReport, pk=pk)
    response = HttpResponse(rendering.report_html(report, request=request))
    response["Content-Disposition"] = f'attachment; filename="{rendering.report_filename(report, "html")}"'
    return response


@login_required
def report_csv(request, pk):
    report = get_object_or_404(WeeklyReport, pk=pk)
    response = HttpResponse(rendering.report_csv(report.data), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{rendering.report_filename(report, "csv")}"'
    return response


@login_required
def report_pdf(request, pk):
    report = get_object_or_404(WeeklyReport, pk=pk)
    response = HttpResponse(rendering.report_pdf(report), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{rendering.report_filename(report, "pdf")}"'
    return response
