"""The run page: goodput by stage, timeline, interruption costs with their playbook steps, the checkpoint advisor.

The playbook steps come from incidents, so the page lives here, above both apps; htmx asks for the advisor partial."""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.html import json_script

from fleetops.pagecache import page_cached
from incidents.models import StepExecution
from runs import charts, selectors
from runs.domain import advisor, goodput
from runs.domain.taxonomy import cause_label
from runs.forms import WhatIfForm
from runs.models import Run

INTERRUPTIONS_SHOWN = 20  # the run page's latest interruptions, as many as attempts and checkpoints; ?interruptions=all


@login_required
@page_cached
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
        "quality": selectors.run_quality_get(run=run, version=version),
    }
    context.update(_advisor_context(run, now, form=None, version=version, tiers=context.get("tier_measure")))
    context.update(_checkpoint_io_context(run, now, inputs=context["inputs"], version=version))
    return render(request, "console/run_detail.html", context)


@login_required
def run_advisor(request, name):
    """The what-if form: the advisor section again, for the values typed in (htmx) or the record's."""
    run = get_object_or_404(Run, name=name)
    form = WhatIfForm(request.GET) if request.GET else None
    version = selectors.run_record_version(run=run)
    context = {"run": run, **_advisor_context(run, timezone.now(), form=form, version=version)}
    return render(request, "console/run_detail.html#advisor", context)


@login_required
def run_levers(request, name):
    """The levers section (htmx asks for it once the page is in: weighing every fix takes a few hundred ms on a long
    run, which the page itself does not wait for)."""
    run = get_object_or_404(Run, name=name)
    found = selectors.run_levers_get(run=run, now=timezone.now(), version=selectors.run_record_version(run=run))
    context = {"run": run, "levers": found, "levers_loaded": True}
    return render(request, "console/run_detail.html#levers", context)


def _goodput_context(run: Run, now, *, limit: int | None, version: str | None) -> dict:
    if run.started_at is None:
        return {"report": None}
    if run.ended_at is None:
        # Still going: the figures grow with `now` and are computed each time; the rows they come from keep. A
        # restarting run's are read afresh: how long it has been silent is in its events, which the version omits.
        timeline = (
            selectors.run_timeline_get(run=run)
            if run.state == Run.State.RESTARTING
            else selectors.run_record_cached(
                run=run, version=version, part="timeline", compute=lambda: selectors.run_timeline_get(run=run)
            )
        )
        figures = _goodput_figures(run, timeline, now)
        if timeline.heard_until is not None and timeline.heard_until < now:
            figures["silent"] = (timeline.heard_until - timedelta(seconds=settings.RUN_SILENT_S), timeline.heard_until)
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
        # The two-tier plan's reading of the same timeline, kept with the rest (no second read of the record).
        "tier_measure": selectors.tier_measure(timeline),
        # As <script> elements, escaped once here: json_script on the 54-day run's timeline (~250 kB) took ~20 ms.
        "goodput_figure": json_script(charts.goodput_bar(report.total), "goodput-figure"),
        "timeline_figure": json_script(timeline_figure, "timeline-figure"),
    }


def _advisor_context(run: Run, now, *, form: WhatIfForm | None, version: str | None = None, tiers=None) -> dict:
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
        "advisor_figure": charts.advisor_curve(advice) if advice and advice.in_range else None,
        "scale": selectors.advice_at_scale(advice, gpus=run.gpu_count) if advice else [],
        "tiers": selectors.run_tier_advice_get(
            run=run,
            delta_s=advice.delta_s,
            mtbf_s=advice.mtbf_s,
            restart_s=advice.restart_s,
            version=version,
            measured=tiers,
        )
        if advice and advice.in_range
        else None,
    }


def _checkpoint_io_context(run: Run, now, *, inputs, version: str | None) -> dict:
    """The run's writes measured and the write designs priced (selectors.run_checkpoint_io_get), with their charts."""
    found = selectors.run_checkpoint_io_get(run=run, now=now, inputs=inputs, version=version)
    writes = charts.checkpoint_writes(found.record) if found.record.writes else None
    front = charts.checkpoint_front(found.pricing, found.today) if found.pricing else None
    return {
        "checkpoint_io": found,
        "checkpoint_io_figure": writes and json_script(writes, "checkpoint-io-figure"),
        "checkpoint_front_figure": front and json_script(front, "checkpoint-front-figure"),
    }


def _round(value):
    return None if value is None else round(value, 2)
