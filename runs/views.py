"""Web console pages. Function-based, login required; htmx requests get the named partial."""

import functools
from collections import Counter
from datetime import timedelta
from html import escape
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import json_script
from django.utils.safestring import mark_safe
from django.views.decorators.vary import vary_on_headers

from fleetops import paging
from incidents import selectors as incident_selectors
from incidents.domain.xid import XidSample, dedupe_xids
from incidents.models import StepExecution
from runs import charts, selectors
from runs.domain import advisor, goodput
from runs.domain.taxonomy import cause_label
from runs.forms import WhatIfForm, WindowForm
from runs.models import Node, Run

RUNS_PAGE = 25  # rows of the overview's run table a page: a fleet's months of runs are ?page=2 and on
INTERRUPTIONS_SHOWN = 20  # the run page's latest interruptions, as many as attempts and checkpoints; ?interruptions=all


@login_required
@vary_on_headers("HX-Request")
def overview(request):
    state = request.GET.get("state", "")
    if state not in Run.State.values:
        state = ""
    total = selectors.runs_count(state=state)
    page = paging.page_get(request, total=total, size=RUNS_PAGE)
    if page is None:
        return HttpResponseBadRequest("page: a whole number of 1 or more", content_type="text/plain")
    runs = selectors.runs_list(state=state, first=page.first, limit=page.size)
    context = {
        "runs": runs,
        "run_states": Run.State.values,
        "state": state,
        "pager": paging.pager(request, "overview", page, shown=len(runs), total=total),
        # What the table's poll asks for: this page, with its filter.
        "table_url": reverse("overview") + (f"?{request.GET.urlencode()}" if request.GET else ""),
        "pending_events": selectors.events_pending_count(),
    }
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, "runs/overview.html#run-table", context)
    context |= {
        "clusters": selectors.node_states_by_cluster(),
        "spare_pools": incident_selectors.spare_pools_get(now=timezone.now()),
        "node_states": Node.STATES,
        "interruptions": selectors.interruptions_recent(),
        **_fleet_health_context(timezone.now()),
    }
    return render(request, "runs/overview.html", context)


def _fleet_health_context(now) -> dict:
    """What the on-call looks at first: goodput now, what is open, which nodes are bad, every node's state."""
    grid = selectors.node_grid_get()
    goodput_24h = selectors.fleet_goodput_get(since=now - timedelta(hours=24), until=now, now=now).total
    suspect_count, suspects = selectors.suspect_nodes_get(limit=8)
    lemon_count, lemons = selectors.lemon_nodes_get(limit=8)
    state_counts = Counter(state for row in grid for _, state in row.nodes)
    in_incident = incident_selectors.nodes_in_open_incidents()
    return {
        "grid": [(row, _grid_cells(row, in_incident)) for row in grid],
        "grid_width": max((len(row.nodes) for row in grid), default=0),
        "grid_legend": [(value, label, state_counts[value]) for value, label in Node.STATES],
        "node_total": sum(state_counts.values()),
        "goodput_24h": goodput_24h if goodput_24h.wall_clock_s > 0 else None,
        "open_incidents": list(incident_selectors.incidents_list(open_only=True)[:8]),
        "open_summary": incident_selectors.open_incidents_summary(),
        "suspect_count": suspect_count,
        "suspects": suspects,
        "lemon_count": lemon_count,
        "lemons": lemons,
    }


def _grid_cells(row: selectors.RackRow, in_incident: set[str]) -> str:
    """A rack's cells as HTML. Built here, not by a template loop: a loop costs ~0.3 ms a cell, ~0.6 s at 2,000
    nodes; a cell here is a dictionary lookup once its node and state have been seen."""
    node_url = reverse("node-page", args=["-"])[:-1]  # one reverse a rack, not one a cell
    cells = (_grid_cell(node_url, hostname, state, hostname in in_incident) for hostname, state in row.nodes)
    return mark_safe("".join(cells))  # noqa: S308 -- escaped in _grid_cell


@functools.lru_cache(maxsize=65_536)
def _grid_cell(node_url: str, hostname: str, state: str, hot: bool) -> str:
    """One node's cell. Hostnames and states come from events: escaped as autoescape would."""
    url, host, state = escape(node_url + quote(hostname)), escape(hostname), escape(state)
    return f'<a href="{url}" class="cell s-{state}{" hot" if hot else ""}" title="{host} · {state}"></a>'


@login_required
def run_detail(request, name):
    run = get_object_or_404(Run.objects.select_related("cluster"), name=name)
    now = timezone.now()
    # Goodput, charts and the advisor's measured costs come from the cache while the run's record is unchanged.
    version = selectors.run_record_version(run=run)
    limit = None if request.GET.get("interruptions") == "all" else INTERRUPTIONS_SHOWN
    context = {
        "run": run,
        "attempts": selectors.attempts_latest(run=run, limit=20),
        "attempt_count": run.attempts.count(),
        "checkpoints": run.checkpoints.order_by("-step")[:20],
        # A long run has hundreds of interruptions: the latest few unless all are asked for (rendering 477 rows
        # was most of the page's time on the 54-day run).
        **_goodput_context(run, now, limit=limit, version=version),
        **_advisor_context(run, now, form=None, version=version),
    }
    return render(request, "runs/run_detail.html", context)


@login_required
def run_advisor(request, name):
    """The what-if form: the advisor section again, for the values typed in (htmx) or the record's."""
    run = get_object_or_404(Run, name=name)
    form = WhatIfForm(request.GET) if request.GET else None
    version = selectors.run_record_version(run=run)
    context = {"run": run, **_advisor_context(run, timezone.now(), form=form, version=version)}
    return render(request, "runs/run_detail.html#advisor", context)


def _goodput_context(run: Run, now, *, limit: int | None, version: str | None) -> dict:
    if run.started_at is None:
        return {"report": None}
    if run.ended_at is None:
        # Still going: the figures grow with `now` and are computed each time; the rows they come from keep.
        timeline = selectors.run_record_cached(
            run=run, version=version, part="timeline", compute=lambda: selectors.run_timeline_get(run=run)
        )
        figures = _goodput_figures(run, timeline, now)
    else:
        # Ended: nothing below depends on `now` any more (the engine stops at ended_at).
        def compute():
            return _goodput_figures(run, selectors.run_timeline_get(run=run), now)

        figures = selectors.run_record_cached(run=run, version=version, part="goodput", compute=compute)
    all_costs = figures["costs"]
    costs = {c.number: c for c in all_costs}
    interruptions = list(run.interruptions.select_related("node", "gpu").order_by("-number")[:limit])
    # The run's playbook executions and their steps in two queries, then shared out as Interruption.playbooks does.
    steps = Prefetch("steps", queryset=StepExecution.objects.order_by("index"))
    executions = list(run.playbooks.filter(dry_run=False).prefetch_related(steps).order_by("started_at"))
    for interruption in interruptions:
        interruption.cost = costs.get(interruption.number)
        until = interruption.resumed_at or now
        interruption.steps = [
            (execution, list(execution.steps.all()))
            for execution in executions
            if interruption.fault_at <= execution.started_at <= until
        ]
    return {**figures, "interruptions": interruptions, "interruption_count": len(all_costs)}


def _goodput_figures(run: Run, timeline: goodput.RunTimeline, now) -> dict:
    """The run's goodput report, each interruption's cost and the two charts: what the run page computes."""
    report = selectors.run_goodput_get(run=run, since=None, until=None, now=now, timeline=timeline)
    costs = goodput.interruption_costs(timeline, now=now)
    # Every fault on the chart, shown in the table or not: the costs carry their number, time and cause.
    faults = [{"at": c.fault_at, "label": f"#{c.number} {cause_label(c.cause)}"} for c in reversed(costs)]
    timeline_figure = charts.run_timeline(
        started_at=run.started_at, until=run.ended_at or now, lost=goodput.segments(timeline, now=now), faults=faults
    )
    return {
        "report": report,
        "costs": costs,
        # As <script> elements, escaped once here: json_script on the 54-day run's timeline (~250 kB) took ~20 ms.
        "goodput_figure": json_script(charts.goodput_bar(report.total), "goodput-figure"),
        "timeline_figure": json_script(timeline_figure, "timeline-figure"),
    }


def _advisor_context(run: Run, now, *, form: WhatIfForm | None, version: str | None = None) -> dict:
    inputs = selectors.run_advice_inputs_get(run=run, now=now, version=version)
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
    alerts = list(node.alerts.select_related("incident", "gpu").order_by("status", "-last_seen_at")[:50])
    context = {
        "node": node,
        "gpus": node.gpus.all(),
        "events": selectors.node_recent_events(node=node),
        "rollups": selectors.node_rollups_get(node=node),
        "raw_retention_days": settings.EVENTS_RAW_RETENTION_DAYS,
        **_xid_history(node),
        "alerts": alerts,
        # Statistical evidence against the node: slow ranks, disagreeing gradients, too many interruptions.
        "evidence_alerts": [a for a in alerts if a.kind in ("straggler", "sdc", "lemon")],
        "interruptions": node.interruptions.select_related("run").order_by("-fault_at")[:20],
    }
    return render(request, "runs/node_detail.html", context)


def _xid_history(node: Node, *, bursts: int = 50) -> dict:
    """The node's Xids newest first, a storm folded into one row with its count (as detection folds it)."""
    events = selectors.node_xid_events(node=node)
    samples = [
        XidSample(time, node.hostname, data["gpu"], data["xid"], data.get("message", ""), data.get("recovery_action"))
        for time, data in events
    ]
    faults = dedupe_xids(samples, window_s=settings.XID_DEDUPE_WINDOW_S)
    return {"xids": sorted(faults, key=lambda f: f.last_at, reverse=True)[:bursts], "xid_events": len(events)}
