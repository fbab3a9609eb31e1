"""Goodput and checkpoint-advice endpoints."""

import math
from dataclasses import asdict
from datetime import timedelta

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from runs import selectors
from runs.api.windows import WindowQuery, days_before, window_get
from runs.domain import advisor, goodput, levers
from runs.models import Run

# Costs and MTBF past about 30 years mean nothing, and huge ones overflow the advisor's arithmetic (a 500).
MAX_S = 1e9


class CostsQuery(serializers.Serializer):
    delta_s = serializers.FloatField(
        min_value=advisor.MIN_COST_S, max_value=MAX_S, help_text="Blocking checkpoint cost, seconds."
    )
    mtbf_s = serializers.FloatField(
        min_value=advisor.MIN_COST_S, max_value=MAX_S, help_text="Job mean time between failures, seconds."
    )
    restart_s = serializers.FloatField(
        min_value=0, max_value=MAX_S, default=0.0, help_text="Detection + rescheduling + reload, s."
    )
    interval_s = serializers.FloatField(
        min_value=0.001, max_value=MAX_S, required=False, help_text="The interval in use, seconds."
    )


class OverridesQuery(serializers.Serializer):
    delta_s = serializers.FloatField(min_value=advisor.MIN_COST_S, max_value=MAX_S, required=False)
    mtbf_s = serializers.FloatField(min_value=advisor.MIN_COST_S, max_value=MAX_S, required=False)
    restart_s = serializers.FloatField(min_value=0, max_value=MAX_S, required=False)
    # The two-tier plan's own inputs (the durable tier's are delta_s and restart_s unless the record has them).
    fast_s = serializers.FloatField(min_value=0, max_value=MAX_S, required=False, help_text="Fast-tier blocking, s.")
    survive = serializers.FloatField(
        min_value=0, max_value=1, required=False, help_text="Share of faults the fast copy survives."
    )
    fast_restart_s = serializers.FloatField(
        min_value=0, max_value=MAX_S, required=False, help_text="Fault to training again from a fast copy, s."
    )


TIER_FIELDS = ("fast_s", "survive", "fast_restart_s")


class LeverTargetsQuery(serializers.Serializer):
    detection_s = serializers.FloatField(min_value=0, max_value=MAX_S, required=False, help_text="Detection target, s.")
    rescheduling_s = serializers.FloatField(
        min_value=0, max_value=MAX_S, required=False, help_text="Rescheduling target, s."
    )
    reload_s = serializers.FloatField(min_value=0, max_value=MAX_S, required=False, help_text="Reload target, s.")
    blocking_s = serializers.FloatField(
        min_value=0, max_value=MAX_S, required=False, help_text="Blocking of a checkpoint write, s."
    )
    interval_s = serializers.FloatField(
        min_value=1, max_value=MAX_S, required=False, help_text="Checkpoint interval, s."
    )
    lemons = serializers.BooleanField(required=False, default=None, allow_null=True, help_text="Lemon nodes out.")


# The daily series has a row per day of the window: a window from year 1 to 9999 took minutes and answered
# megabytes (found by tests/test_schema_fuzz.py). Two years covers any run and any fleet report.
MAX_WINDOW = timedelta(days=731)


def _query(serializer_class, request) -> dict:
    query = serializer_class(data=request.query_params)
    query.is_valid(raise_exception=True)
    return query.validated_data


def breakdown_json(b: goodput.Breakdown) -> dict:
    return {
        "wall_clock_s": b.wall_clock_s,
        "productive_s": b.productive_s,
        "goodput": b.goodput,
        "badput": {f"{stage}_s": value for stage, value in b.stages_s.items()},
        "interruptions": b.interruptions,
    }


def report_json(report: selectors.GoodputReport) -> dict:
    return {
        "since": report.since,
        "until": report.until,
        **breakdown_json(report.total),
        "daily": [{"date": day, **breakdown_json(b)} for day, b in report.daily],
    }


def advice_json(advice: advisor.Advice) -> dict:
    return {
        "delta_s": advice.delta_s,
        "mtbf_s": advice.mtbf_s,
        "restart_s": advice.restart_s,
        "young_s": advice.young_s,
        "daly_s": advice.daly_s,
        "waste_at_young": advice.waste_at_young,
        "waste_at_daly": advice.waste_at_daly,
        "goodput_at_daly": advice.goodput_at_daly,
        "floor": advice.floor,
        # False: even the floor is 100% or more, the first-order model has no answer (nothing to plot).
        "in_range": advice.in_range,
        "current_s": advice.current_s,
        "waste_at_current": advice.waste_at_current,
        "goodput_at_current": advice.goodput_at_current,
        "curve": [{"interval_s": tau, "waste": w} for tau, w in advice.curve],
    }


@extend_schema(parameters=[WindowQuery], responses=dict, summary="A run's goodput and badput by stage")
@api_view(["GET"])
def run_goodput(request, name):
    run = get_object_or_404(Run, name=name)
    now = timezone.now()
    # The run's whole life, the default, is as long as it is: only a window the request names is bounded.
    window = window_get(
        request.query_params, since_default=run.started_at, until_default=run.ended_at or now, max_window=MAX_WINDOW
    )
    report = selectors.run_goodput_get(
        run=run, since=window.given.get("since"), until=window.given.get("until"), now=now
    )
    # The findings of the window the request names; with none, all of the run's (a run that never started has no span).
    # Kept under the run's record version, as the run page keeps them: a long run's findings read its whole event log.
    version = selectors.run_record_version(run=run)
    named = {"since": window.given.get("since"), "until": window.given.get("until")}
    quality = [
        {"code": f.code, "what": f.what, "at": f.at, "events": list(f.events), "resolution": f.resolution}
        for f in selectors.findings_in(selectors.run_quality_get(run=run, version=version), **named)
    ]
    body = {"run": run.name, "gpus": run.gpu_count, "gpus_claimed": run.gpus_claimed, **report_json(report)}
    return Response({**body, "data_quality": quality})


@extend_schema(parameters=[WindowQuery], responses=dict, summary="Fleet goodput, weighted by GPU-hours")
@api_view(["GET"])
def fleet_goodput(request):
    now = timezone.now()
    window = window_get(request.query_params, since_default=days_before(30), until_default=now, max_window=MAX_WINDOW)
    report = selectors.fleet_goodput_get(since=window.since, until=window.until, now=now)
    body = report_json(report)
    body["gpu_hours"] = report.total.gpu_hours()
    body["runs"] = [
        {"run": run.name, "gpus": run.gpu_count, "gpus_claimed": run.gpus_claimed, **breakdown_json(b)}
        for run, b in report.by_run
    ]
    body["lost_gpu_hours_by_cause"] = report.lost_by_cause
    return Response(body)


@extend_schema(parameters=[CostsQuery], responses=dict, summary="What-if: Young and Daly intervals, waste, floor")
@api_view(["GET"])
def advisor_what_if(request):
    costs = _query(CostsQuery, request)
    advice = advisor.advise(
        delta_s=costs["delta_s"],
        mtbf_s=costs["mtbf_s"],
        restart_s=costs["restart_s"],
        current_s=costs.get("interval_s"),
    )
    return Response(advice_json(advice))


@extend_schema(parameters=[OverridesQuery], responses=dict, summary="Checkpoint advice from the run's record")
@api_view(["GET"])
def run_advice(request, name):
    run = get_object_or_404(Run, name=name)
    query = _query(OverridesQuery, request)
    tier_overrides = {name: query.pop(name) for name in TIER_FIELDS if name in query}
    version = selectors.run_record_version(run=run)
    inputs = selectors.run_advice_inputs_get(run=run, now=timezone.now(), version=version, **query)
    body = {"run": run.name, "gpus": run.gpu_count, "sources": inputs.sources, "missing": inputs.missing}
    if inputs.rate is not None:
        rate = inputs.rate
        body["failure_rate"] = {
            "failures": rate.failures,
            "gpu_hours": rate.gpu_hours,
            "per_gpu_hour": rate.rate,
            "lower": rate.lower,
            "upper": rate.upper,
            "confidence": rate.confidence,
        }
    if inputs.mtbf_range_s is not None:
        body["mtbf_range_s"] = list(inputs.mtbf_range_s)
    if inputs.missing:
        body["advice"] = None
        body["detail"] = f"Not enough record to advise: pass {', '.join(inputs.missing)} to override."
        return Response(body)
    advice = advisor.advise(
        delta_s=inputs.delta_s, mtbf_s=inputs.mtbf_s, restart_s=inputs.restart_s, current_s=inputs.current_s
    )
    body["advice"] = advice_json(advice)
    body["scale"] = [asdict(point) for point in selectors.advice_at_scale(advice, gpus=run.gpu_count)]
    tier = selectors.run_tier_advice_get(
        run=run,
        delta_s=advice.delta_s,
        mtbf_s=advice.mtbf_s,
        restart_s=advice.restart_s,
        version=version,
        **tier_overrides,
    )
    body["tiers"] = tiers_json(tier) if tier else None
    return Response(body)


def tiers_json(tier) -> dict:
    def plan(p) -> dict:
        return {
            "fast_interval_s": p.fast_interval_s,
            "durable_every": p.every,
            "durable_interval_s": p.durable_interval_s,
            "waste": p.waste if math.isfinite(p.waste) else None,
        }

    inputs = ("fast_s", "durable_s", "survive", "fast_restart_s", "durable_restart_s", "mtbf_s")
    return {
        **{name: getattr(tier, name) for name in inputs},
        "sources": tier.sources,
        "plan": plan(tier.plan),
        "one_tier": plan(tier.one_tier),
    }


def lever_json(lever: levers.Lever) -> dict:
    return {
        "lever": lever.name,
        "label": lever.label,
        "target_s": lever.target_s,
        "affected": lever.affected,
        "goodput": lever.goodput,
        "returned_gpu_hours": lever.returned_gpu_hours,
        "returned_usd": lever.returned_usd,
    }


def levers_json(found: selectors.RunLevers) -> dict:
    report = found.report
    return {
        "since": found.since,
        "until": found.until,
        "goodput": report.goodput,
        "lost_gpu_hours": report.lost_gpu_hours,
        "usd_per_gpu_hour": found.usd_per_gpu_hour,
        "mtbf_s": found.mtbf_s,
        "targets": {name: getattr(found.targets, name) for name in found.sources},
        "sources": found.sources,
        "levers": [lever_json(lever) for lever in report.levers],
        # Every fix but fewer failures at once; the badput it leaves only fewer failures can lower.
        "together": lever_json(report.together) if report.together else None,
        "floor": report.floor,
    }


@extend_schema(parameters=[LeverTargetsQuery], responses=dict, summary="What each fix would give back to the run")
@api_view(["GET"])
def run_levers(request, name):
    run = get_object_or_404(Run, name=name)
    targets = _query(LeverTargetsQuery, request)
    found = selectors.run_levers_get(
        run=run, now=timezone.now(), version=selectors.run_record_version(run=run), **targets
    )
    if found is None:
        return Response({"run": run.name, "detail": "The run has not started: nothing to weigh.", "levers": []})
    return Response({"run": run.name, "gpus": run.gpu_count, **levers_json(found)})
