"""Web console pages. Function-based, login required; htmx requests get the named partial."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.views.decorators.vary import vary_on_headers

from . import selectors
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
    context = {
        "run": run,
        "attempts": run.attempts.prefetch_related("nodes").order_by("-number"),
        "interruptions": run.interruptions.select_related("node", "gpu", "attempt").order_by("-number"),
        "checkpoints": run.checkpoints.order_by("-step")[:50],
    }
    return render(request, "runs/run_detail.html", context)


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
