"""The weekly reliability report: list, page, and its downloads (self-contained HTML, CSV, PDF)."""

from datetime import UTC, datetime, time

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleetops.roles import can_act
from incidents.models import WeeklyReport
from incidents.reports import rendering
from incidents.reports import services as reports

# A report reads every run of its window day by day: a window of years is minutes of work, held by a web worker.
REPORT_WINDOW_MAX_DAYS = 366


class WindowForm(forms.Form):
    since = forms.DateField()
    until = forms.DateField()

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and until <= since:
            raise forms.ValidationError("The window must end after it starts.")
        if since and until and (until - since).days > REPORT_WINDOW_MAX_DAYS:
            raise forms.ValidationError(f"A report covers at most {REPORT_WINDOW_MAX_DAYS} days.")
        return data


@login_required
def report_list(request, form: WindowForm | None = None, status: int = 200):
    rows = list(WeeklyReport.objects.order_by("since", "until").values("pk", "since", "until", "generated_at", "data"))
    previous = None
    for row in rows:
        row["goodput"] = row["data"]["goodput"]["fleet"]
        row["unplanned"] = row["data"]["interruptions"]["unplanned"]
        row["delta_pp"] = None if previous is None else 100 * (row["goodput"] - previous)
        previous = row["goodput"]
    context = {"reports": rows[::-1], "form": form or WindowForm()}
    return render(request, "incidents/reports.html", context, status=status)


@login_required
@require_POST
def report_create(request):
    if not can_act(request.user):
        return HttpResponseForbidden("Viewers read reports; generating one needs the oncall or admin role.")
    form = WindowForm(request.POST)
    if not form.is_valid():
        return report_list(request, form=form, status=400)  # the list again, the form saying what is wrong
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
