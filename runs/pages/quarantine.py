"""The record's own page: fleet goodput by day, run and cause. Login required. The pages that also show incidents
(overview, run, node) are in fleetops/console/."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleetops.pagecache import page_cached
from fleetops.roles import is_admin
from runs import charts, selectors, services
from runs.domain import quality
from runs.forms import WindowForm
from runs.models import Event


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


QUARANTINE_SHOWN = 200


@login_required
def quarantine(request):
    """Events that failed to apply on their own: what, when, the error; an admin replays them after a fix."""
    rows = Event.objects.filter(quarantined_at__isnull=False).order_by("-quarantined_at", "-id")
    context = {"events": rows[:QUARANTINE_SHOWN], "total": rows.count(), "may_replay": is_admin(request.user)}
    return render(request, "runs/quarantine.html", context)


@login_required
@require_POST
def quarantine_replay(request):
    if not is_admin(request.user):
        return HttpResponseForbidden("Replaying quarantined events needs the admin role.")
    ids = [int(pk) for pk in request.POST.getlist("event") if pk.isdigit()] or None
    applied = services.quarantined_replay(event_ids=ids)
    left = Event.objects.filter(quarantined_at__isnull=False).count()
    messages.info(request, f"Replayed: {applied} applied, {left} still quarantined.")
    return redirect("event-quarantine")
