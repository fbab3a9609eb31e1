"""Web console pages. Function-based, login required; htmx requests get the named partial."""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.vary import vary_on_headers

from . import charts, selectors
from .domain import advisor, goodput
from .domain.taxonomy import cause_label
from .forms import WhatIfForm, WindowForm
from .models import Node, Run


@login_required
@vary_on_headers("HX-Request")
def overview(request):
    state = request.GET.get("state", "")
    if state not in Run.State.values:
        state = ""
    context = {
        "clusters": selectors.node_states_by_cluster(),
        "node_states": Node.STATES,
        "runs": selectors.runs_list(state=state),
        "run_states": Run.State.values,
        "state": state,
        "pending_events": selectors.events_pending_count(),
        "interruptions": selectors.interruptions_recent(),
    }
    template = "runs/overview.html#run-table" if request.htmx else "runs/overview.html"
    return render(request, template, context)


@login_required
def run_detail(request, name):
    run = get_object_or_404(Run.objects.select_related("cluster"), name=name)
    now = timezone.now()
    context = {
        "run": run,
        "attempts": run.attempts.annotate(node_count=Count("nodes")).order_by("-number")[:20],
        "attempt_count": run.attempts.count(),
        "checkpoints": run.checkpoints.order_by("-step")[:20],
        **_goodput_context(run, now),
        **_advisor_context(run, now, form=None),
    }
    return render(request, "runs/run_detail.html", context)


@login_required
def run_advisor(request, name):
    """The what-if form: the advisor section again, for the values typed in (htmx) or the record's."""
    run = get_object_or_404(Run, name=name)
    form = WhatIfForm(request.GET) if request.GET else None
    context = {"run": run, **_advisor_context(run, timezone.now(), form=form)}
    return render(request, "runs/run_detail.html#advisor", context)


def _goodput_context(run: Run, now) -> dict:
    if run.started_at is None:
        return {"report": None}
    timeline = selectors.run_timeline_get(run=run)
    report = selectors.run_goodput_get(run=run, since=None, until=None, now=now)
    costs = {c.number: c for c in goodput.interruption_costs(timeline, now=now)}
    interruptions = list(run.interruptions.select_related("node", "gpu").order_by("-number"))
    for interruption in interruptions:
        interruption.cost = costs.get(interruption.number)
    faults = [{"at": i.fault_at, "label": f"#{i.number} {cause_label(i.cause)}"} for i in interruptions]
    return {
        "report": report,
        "interruptions": interruptions,
        "goodput_figure": charts.goodput_bar(report.total),
        "timeline_figure": charts.run_timeline(
            started_at=run.started_at,
            until=run.ended_at or now,
            lost=goodput.segments(timeline, now=now),
            faults=faults,
        ),
    }


def _advisor_context(run: Run, now, *, form: WhatIfForm | None) -> dict:
    inputs = selectors.run_advice_inputs_get(run=run, now=now)
    if form is None:
        initial = {
            "delta_s": _round(inputs.delta_s),
            "mtbf_h": _round(inputs.mtbf_s and inputs.mtbf_s / 3600),
            "restart_min": _round(inputs.restart_s and inputs.restart_s / 60),
            "interval_min": _round(inputs.current_s and inputs.current_s / 60),
        }
        form = WhatIfForm(initial) if not inputs.missing else WhatIfForm(initial=initial)
    advice = advisor.advise(**form.costs()) if form.is_bound and form.is_valid() else None
    return {
        "inputs": inputs,
        "what_if": form,
        "advice": advice,
        "advisor_figure": charts.advisor_curve(advice) if advice else None,
    }


def _round(value):
    return None if value is None else round(value, 2)


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


@login_required
def node_detail(request, hostname):
    node = get_object_or_404(Node.objects.select_related("cluster"), hostname=hostname)
    context = {
        "node": node,
        "gpus": node.gpus.all(),
        "events": selectors.node_recent_events(node=node),
        "interruptions": node.interruptions.select_related("run").order_by("-fault_at")[:20],
    }
    return render(request, "runs/node_detail.html", context)
