"""The fleet page: the record's goodput by day, run and cause. Login required. runs' other page, the event quarantine,
is quarantine.py; the pages that also show incidents (overview, run, node) are in fleetops/console/."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from fleetops.pagecache import page_cached
from runs import charts, selectors
from runs.domain import quality
from runs.forms import WindowForm


@login_required
@page_cached
def fleet(request):
    form = WindowForm(request.GET or None, initial={"days": 30})
    days = form.cleaned_data["days"] if form.is_bound and form.is_valid() and form.cleaned_data["days"] else 30
    now = timezone.now()
    report = selectors.fleet_goodput_get(since=now - timedelta(days=days), until=now, now=now)
    gpu_hours = report.total.gpu_hours()
    context = {
        "form": form,
        "days": days,
        "report": report,
        "gpu_hours": gpu_hours,
        # Summed here, not with the template's `add`, which adds floats as ints (2.9 + 2.9 made 4).
        "failures_lost_gpu_h": sum(gpu_hours[stage] for stage in ("detection", "rescheduling", "reload", "rewound")),
        "daily_figure": charts.daily_goodput(report.daily),
        "runs_figure": charts.goodput_by_run([(run.name, b) for run, b in report.by_run]),
        "causes_figure": charts.lost_by_cause(report.lost_by_cause),
        "gpus_capped": selectors.runs_gpus_capped(run for run, _ in report.by_run),
        "max_gpus_per_node": quality.MAX_GPUS_PER_NODE,
    }
    return render(request, "runs/fleet.html", context)
