"""Every figure of the weekly reliability report, read from the record as plain numbers (report_build).

Units are in the key names: _s seconds, _min minutes, _gpu_h GPU-hours; goodput and shares are fractions in [0, 1].
"""

import math
from collections import Counter
from dataclasses import asdict
from datetime import datetime

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db.models import Q

from incidents.domain.alert_kinds import EVIDENCE_KINDS
from incidents.domain.report import cause_shares, is_off_hours, top
from incidents.models import Alert, Incident
from incidents.playbooks.spares import fleet_spares, spare_pools_get
from incidents.selectors import response_metrics_get
from runs.domain import advisor, goodput
from runs.models import Interruption
from runs.selectors import (
    AdviceInputs,
    findings_in,
    fleet_goodput_get,
    run_advice_inputs_get,
    run_checkpoint_io_get,
    run_levers_get,
    run_quality_get,
)


def _finite(value: float) -> float | None:
    """JSON has no infinity: an unbounded MTBF (no failure seen) is stored as None."""
    return value if math.isfinite(value) else None


def report_build(*, since: datetime, until: datetime, now: datetime) -> dict:
    """Every figure of the report for [since, until), as JSON-able numbers and strings."""
    fleet = fleet_goodput_get(since=since, until=until, now=now)
    # Each run's M, R and delta, read once for its row and its checkpoint I/O.
    inputs = {run.pk: run_advice_inputs_get(run=run, now=now) for run, _b in fleet.by_run}
    total = fleet.total  # GPU-seconds
    faults = list(
        Interruption.objects.filter(fault_at__gte=since, fault_at__lt=until)
        .order_by("fault_at")
        .values_list("fault_at", "planned", "cause", "node__hostname", "node__rack")
    )
    unplanned = [row for row in faults if not row[1]]
    wall_gpu_h = total.wall_clock_s / 3600
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "as_of": now.isoformat(),  # the advice and the MTBF behind it: the whole record up to this moment
        "goodput": {
            "fleet": total.goodput,
            "wall_clock_gpu_h": wall_gpu_h,
            "productive_gpu_h": total.productive_s / 3600,
            "lost_gpu_h": total.lost_s / 3600,
        },
        "stages": [
            {
                "stage": stage,
                "gpu_h": total.stages_s[stage] / 3600,
                # Wall-clock minutes summed over runs, not weighted by their size.
                "minutes": sum(b.stages_s[stage] for _run, b in fleet.by_run) / 60,
            }
            for stage in goodput.STAGES
        ],
        "daily": [{"day": day.isoformat(), **asdict(b)} for day, b in fleet.daily],
        "interruptions": {
            "total": len(faults),
            "planned": len(faults) - len(unplanned),
            "unplanned": len(unplanned),
            "off_hours": sum(1 for row in faults if is_off_hours(row[0])),
            "off_hours_unplanned": sum(1 for row in unplanned if is_off_hours(row[0])),
        },
        "causes": cause_shares(row[2] for row in unplanned),
        "mtbf": _mtbf(failures=len(unplanned), gpu_hours=wall_gpu_h),
        "response": {
            **response_metrics_get(since=since, until=until),
            "incidents": Incident.objects.filter(started_at__gte=since, started_at__lt=until).count(),
            "off_hours_incidents": sum(
                1
                for started in Incident.objects.filter(started_at__gte=since, started_at__lt=until).values_list(
                    "started_at", flat=True
                )
                if is_off_hours(started)
            ),
        },
        "top_nodes": [{"node": node, "interruptions": n} for node, n in top(Counter(row[3] for row in unplanned))],
        "top_racks": [{"rack": rack, "interruptions": n} for rack, n in top(Counter(row[4] for row in unplanned))],
        "findings": _findings(since=since, until=until),
        "runs": [_run_row(run, b, inputs[run.pk], since=since, until=until) for run, b in fleet.by_run],
        # What each fix would give back to each run, over its whole record up to `now` (as on its page).
        "levers": [row for run, _b in fleet.by_run if (row := _run_levers(run, now=now)) is not None],
        # What each run's checkpoint writes look like and the design that meets the target (as on its page).
        "checkpoint_io": [_run_checkpoint_io(run, inputs[run.pk], now=now) for run, _b in fleet.by_run],
        # The overview's per-cluster pools over the report's week, added up (one source: incidents.playbooks.spares).
        "spares": fleet_spares(spare_pools_get(now=until, window_days=(until - since).total_seconds() / 86400)),
        "action_items": _open_action_items(),
    }


def _mtbf(*, failures: int, gpu_hours: float) -> dict:
    """Per-GPU MTBF in GPU-hours with its 90% interval (the rate's interval, inverted: upper rate, lower MTBF)."""
    if gpu_hours <= 0:
        return {"failures": failures, "gpu_hours": 0.0, "mtbf_gpu_h": None, "lower_gpu_h": None, "upper_gpu_h": None}
    rate = advisor.failure_rate(failures=failures, gpu_hours=gpu_hours, confidence=0.90)
    return {
        "failures": failures,
        "gpu_hours": gpu_hours,
        "confidence": rate.confidence,
        "rate_per_gpu_h": rate.rate,
        "mtbf_gpu_h": _finite(rate.mtbf_gpu_hours),
        "lower_gpu_h": 1 / rate.upper,
        "upper_gpu_h": None if rate.lower == 0 else 1 / rate.lower,
    }


def _findings(*, since: datetime, until: datetime) -> list[dict]:
    """Lemon, straggler and SDC alerts seen during the window (first seen before its end, last seen in or after it)."""
    rows = (
        Alert.objects.filter(kind__in=EVIDENCE_KINDS, first_seen_at__lt=until, last_seen_at__gte=since)
        .order_by("kind", "node__hostname", "first_seen_at")
        .values_list("kind", "node__hostname", "run__name", "status", "summary", "count", "first_seen_at")
    )
    return [
        {
            "kind": kind,
            "node": node or "",
            "run": run or "",
            "status": status,
            "summary": summary,
            "count": count,
            "first_seen_at": first.isoformat(),
        }
        for kind, node, run, status, summary, count, first in rows
    ]


def _run_row(run, b: goodput.Breakdown, inputs: AdviceInputs, *, since: datetime, until: datetime) -> dict:
    """The run's goodput in the window and its checkpoint interval against Daly's, with what Daly would save.

    saved = goodput_at_interval(Daly) - goodput_at_interval(current) under the first-order waste model
    (docs/DOMAIN.md section 3), applied to the run's GPU-hours in the window; None where an input is unknown.
    """
    row = {
        "run": run.name,
        "gpus": run.gpu_count,
        "goodput": b.goodput,
        "interruptions": b.interruptions,
        "wall_clock_gpu_h": b.wall_clock_s * run.gpu_count / 3600,
        # The run's data-quality findings of the week (runs.selectors.run_quality_get, as on its page).
        "data_quality": len(findings_in(run_quality_get(run=run), since=since, until=until)),
        "interval_s": run.checkpoint_interval_s,
        "advised_s": None,
        "goodput_at_current": None,
        "goodput_at_advised": None,
        "saved_goodput": None,
        "saved_gpu_h": None,
    }
    if inputs.missing or not inputs.current_s:
        return row
    costs = {"delta_s": inputs.delta_s, "mtbf_s": inputs.mtbf_s, "restart_s": inputs.restart_s}
    advised = advisor.daly(delta_s=inputs.delta_s, mtbf_s=inputs.mtbf_s)
    at_current = advisor.goodput_at_interval(inputs.current_s, **costs)
    at_advised = advisor.goodput_at_interval(advised, **costs)
    row.update(
        advised_s=advised,
        goodput_at_current=at_current,
        goodput_at_advised=at_advised,
        saved_goodput=at_advised - at_current,
        saved_gpu_h=(at_advised - at_current) * row["wall_clock_gpu_h"],
    )
    return row


def _run_levers(run, *, now: datetime) -> dict | None:
    """The run's levers (runs.selectors.run_levers_get, the run page's and the API's source) as JSON-able figures."""
    found = run_levers_get(run=run, now=now)
    if found is None:
        return None
    report = found.report

    def figures(lever) -> dict:
        return {
            "lever": lever.name,
            "label": lever.label,
            "target_s": lever.target_s,
            "goodput": lever.goodput,
            "returned_gpu_h": lever.returned_gpu_hours,
            "returned_usd": lever.returned_usd,
        }

    return {
        "run": run.name,
        "since": found.since.isoformat(),
        "until": found.until.isoformat(),
        "goodput": report.goodput,
        "lost_gpu_h": report.lost_gpu_hours,
        "levers": [figures(lever) for lever in report.levers],
        "together": figures(report.together) if report.together else None,
        "floor": report.floor,
    }


def _run_checkpoint_io(run, inputs: AdviceInputs, *, now: datetime) -> dict:
    """The run's checkpoint I/O (runs.selectors.run_checkpoint_io_get, the run page's and the API's source) over its
    whole record up to `now`: its writes' medians and counts, what it warns of, and the design that meets the target
    or the best one's shortfall and limiting hop."""
    found = run_checkpoint_io_get(run=run, now=now, inputs=inputs)
    record, pricing = found.record, found.pricing
    design = pricing and (pricing.chosen or pricing.best)
    return {
        "run": run.name,
        "since": found.since and found.since.isoformat(),
        "until": found.until and found.until.isoformat(),
        "completed": record.completed,
        "failed": record.failed,
        "lost": record.lost,
        "never_durable": record.never_durable,
        "bytes_per_rank": record.bytes_per_rank,
        "blocking_s": record.blocking_s,
        "bandwidth_gb_s": record.bandwidth_gb_s,
        "drain_s": record.drain_s,
        "interval_s": record.interval_s,
        "warnings": [note.text for note in found.warnings],
        "data_quality": [note.text for note in record.findings],
        "target": pricing and pricing.target,
        "design": design and design.label,
        "meets_target": pricing is not None and pricing.chosen is not None,
        "overhead": design and design.overhead,
        "shortfall": pricing and pricing.shortfall,
        "limit": design and design.limit_label,
        "missing": found.missing,
    }


def _open_action_items() -> list[dict] | None:
    """Open postmortem action items, or None while the project has no such model."""
    try:
        model = apps.get_model("incidents", "ActionItem")
    except LookupError:
        return None
    items = model.objects.all()
    for field, done in (("done_at", Q(done_at__isnull=False)), ("done", Q(done=True))):
        try:
            model._meta.get_field(field)
        except FieldDoesNotExist:
            continue
        items = items.exclude(done)
        break
    else:
        try:
            model._meta.get_field("status")
            items = items.exclude(status__in=("done", "closed", "cancelled"))
        except FieldDoesNotExist:
            pass
    rows = []
    for item in items.order_by("pk")[:50]:
        due = getattr(item, "due_on", None)
        rows.append({"id": item.pk, "text": str(item), "due_on": due.isoformat() if due else None})
    return rows
