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
from runs.api import figures
from runs.api.windows import WindowQuery, days_before, window_get
from runs.domain import advisor, checkpoint_io, goodput, levers
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


@extend_schema(
    parameters=[WindowQuery], responses=figures.RunGoodputSerializer, summary="A run's goodput and badput by stage"
)
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


@extend_schema(
    parameters=[WindowQuery], responses=figures.FleetGoodputSerializer, summary="Fleet goodput, weighted by GPU-hours"
)
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


@extend_schema(
    parameters=[CostsQuery],
    responses=figures.AdviceSerializer,
    summary="What-if: Young and Daly intervals, waste, floor",
)
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


@extend_schema(
    parameters=[OverridesQuery],
    responses=figures.RunAdviceSerializer,
    summary="Checkpoint advice from the run's record",
)
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


@extend_schema(
    parameters=[LeverTargetsQuery],
    responses=figures.RunLeversSerializer,
    summary="What each fix would give back to the run",
)
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


# A hop past a petabyte a second, or a state past an exabyte, is a typing error; beyond them the arithmetic overflows.
MAX_GB_S = 1e6
MAX_STATE_BYTES = 1e18


class CheckpointIOQuery(serializers.Serializer):
    state_bytes = serializers.FloatField(
        min_value=1, max_value=MAX_STATE_BYTES, required=False, help_text="Training state, bytes (all ranks)."
    )
    target = serializers.FloatField(
        min_value=1e-6, max_value=1, required=False, help_text="Share of the run's time the writes may cost."
    )
    gpu_host_gb_s = serializers.FloatField(
        min_value=0.001, max_value=MAX_GB_S, required=False, help_text="GPU to pinned host memory, GB/s per GPU."
    )
    nvme_gb_s = serializers.FloatField(
        min_value=0.001, max_value=MAX_GB_S, required=False, help_text="Host to local NVMe, GB/s per node."
    )
    storage_gb_s = serializers.FloatField(
        min_value=0.001, max_value=MAX_GB_S, required=False, help_text="Shared storage, aggregate GB/s."
    )
    peer_gb_s = serializers.FloatField(
        min_value=0.001, max_value=MAX_GB_S, required=False, help_text="Host to a peer's host memory, GB/s per node."
    )


def _note_json(note: checkpoint_io.Note) -> dict:
    return {"code": note.code, "text": note.text, "steps": list(note.steps)}


def checkpoint_io_json(found: selectors.RunCheckpointIO) -> dict:
    """The run's checkpoint I/O as the API writes it (seconds, bytes, GB/s, shares); the weekly report writes its own
    summary of the same RunCheckpointIO (incidents.reports.selectors)."""
    record, pricing = found.record, found.pricing
    body = {
        "since": found.since,
        "until": found.until,
        "as_of": found.as_of,
        "record": {
            "ranks": record.ranks,
            "completed": record.completed,
            "failed": record.failed,
            "lost": record.lost,
            "never_durable": record.never_durable,
            "bytes": record.bytes,
            "bytes_per_rank": record.bytes_per_rank,
            "blocking_s": record.blocking_s,
            "bandwidth_gb_s": record.bandwidth_gb_s,
            "drain_s": record.drain_s,
            "drain_max_s": record.drain_max_s,
            "interval_s": record.interval_s,
            "interval_source": record.interval_source,
            "drains_over_interval": list(record.drains_over_interval),
            "blocking_trend_s": list(record.trend) if record.trend else None,
            "last_durable_step": record.last_durable_step,
            "writes": [
                {
                    "step": w.step,
                    "completed_at": w.at,
                    "tier": w.tier,
                    "blocking_s": w.blocking_s,
                    "bytes": w.bytes,
                    "bytes_per_rank": w.bytes_per_rank,
                    "bandwidth_gb_s": w.bandwidth_gb_s,
                    "drain_s": w.drain_s,
                }
                for w in record.writes
            ],
        },
        "warnings": [_note_json(note) for note in found.warnings],
        "data_quality": [_note_json(note) for note in record.findings],
        "cluster_storage_load_gb_s": found.others_gb_s,
        "sources": found.sources,
        "missing": found.missing,
        "designs": None,
    }
    if pricing is None:
        return body
    body["designs"] = {
        "state_bytes": pricing.state_bytes,
        "ranks": pricing.ranks,
        "gpus_per_node": pricing.gpus_per_node,
        "bytes_per_rank": pricing.bytes_per_rank,
        "hops_gb_s": {hop: value for hop, _label, value, _source in pricing.hops.rows},
        "mtbf_s": pricing.mtbf_s,
        "restart_s": pricing.restart_s,
        "target": pricing.target,
        "chosen": pricing.chosen.name if pricing.chosen else None,
        "best": pricing.best.name,
        "shortfall": pricing.shortfall,
        "limit": pricing.best.limit,
        "designs": [
            {
                "design": d.name,
                "label": d.label,
                "durable": d.durable,
                "blocking_s": d.blocking_s,
                "background_s": d.background_s,
                "interval_s": d.interval_s,
                "overhead": d.overhead,
                "waste": d.waste,
                "storage_gb_s": d.storage_gb_s,
                "limit": d.limit,
                "meets_target": d.meets(pricing.target),
                "target_interval_s": d.target_interval_s,
                "waste_at_target": d.waste_at_target,
            }
            for d in pricing.designs
        ],
        "front": [asdict(point) for point in pricing.front],
        "today": dict(zip(("interval_s", "blocking_s", "waste"), found.today, strict=True)) if found.today else None,
    }
    return body


@extend_schema(
    parameters=[CheckpointIOQuery],
    responses=figures.RunCheckpointIOSerializer,
    summary="The run's checkpoint writes, and the write designs priced",
)
@api_view(["GET"])
def run_checkpoint_io(request, name):
    run = get_object_or_404(Run.objects.select_related("cluster"), name=name)
    query = _query(CheckpointIOQuery, request)
    hops = {hop: query.get(f"{hop}_gb_s") for hop in checkpoint_io.HOP_LABELS}
    found = selectors.run_checkpoint_io_get(
        run=run,
        now=timezone.now(),
        version=selectors.run_record_version(run=run),
        state_bytes=query.get("state_bytes"),
        target=query.get("target"),
        **hops,
    )
    return Response({"run": run.name, "gpus": run.gpu_count, **checkpoint_io_json(found)})
