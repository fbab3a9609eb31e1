"""The record's own page: fleet goodput by day, run and cause. Login required. The pages that also show incidents
(overview, run, node) are in fleetops/console/."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from runs import charts, selectors
from runs.forms import WindowForm


@login_required
def fleet(request):
    form = WindowForm(request.GET or None, initial={"days": 30})
    days = form.cleaned_data["days"] if form.is_bound and form.is_valid() and form.cleaned_data["days"] else 30
    now = timezone.now()
    report = selectors.fleet_goodput_get(since=now - timedelta(days=days), until=now, now=now)
    context = {
        "form": form,
        "days": days,
        "report": report,
        "gpu_hours": report.total.gpu_hours(),
        "daily_figure": charts.daily_goodput(report.daily),
        "runs_figure": charts.goodput_by_run([(run.name, b) for run, b in report.by_run]),
        "causes_figure": charts.lost_by_cause(report.lost_by_cause),
    }
    return render(request, "runs/fleet.html", context)
