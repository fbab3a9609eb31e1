"""The checkpoint advisor's inputs (delta, M, R) from the record, its two-tier plan and projection to other
sizes, and what each lever would give back."""

import dataclasses
import math
import statistics
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.cache import cache

from runs.domain import advisor, goodput, levers, tiers
from runs.models import Interruption, Run
from runs.selectors.timeline import RECORD_CACHE_S, run_record_cached, run_timeline_get


def fleet_failure_rate_get(*, now: datetime, confidence: float = 0.90) -> advisor.RateEstimate | None:
    """Per-GPU failure rate from the whole record up to `now`: unexpected interruptions before it / GPU-hours run
    before it (None if no time). Both sides end at `now`: a report built as of a past moment counts neither the
    failures nor the hours after it."""
    gpu_hours = 0.0
    for gpus, started_at, ended_at in Run.objects.filter(started_at__lt=now).values_list(
        "gpu_count", "started_at", "ended_at"
    ):
        gpu_hours += gpus * (min(ended_at or now, now) - started_at).total_seconds() / 3600
    if gpu_hours <= 0:
        return None
    failures = Interruption.objects.filter(planned=False, fault_at__lt=now).count()
    return advisor.failure_rate(failures=failures, gpu_hours=gpu_hours, confidence=confidence)


@dataclass(frozen=True)
class AdviceInputs:
    """delta, M and R for one run, each with where it came from ('record', 'override' or None if unknown)."""

    delta_s: float | None
    mtbf_s: float | None
    restart_s: float | None
    current_s: float | None
    sources: dict[str, str | None]
    rate: advisor.RateEstimate | None
    mtbf_range_s: tuple[float, float] | None
    as_of: datetime | None = None  # M is the fleet's record up to this moment

    @property
    def missing(self) -> list[str]:
        return [name for name in ("delta_s", "mtbf_s", "restart_s") if getattr(self, name) is None]


def run_advice_inputs_get(
    *,
    run: Run,
    now: datetime,
    delta_s: float | None = None,
    mtbf_s: float | None = None,
    restart_s: float | None = None,
    version: str | None = None,
) -> AdviceInputs:
    """delta = the run's median blocking write; R = its median fault-to-training-again time; M = the fleet's
    per-GPU failure rate scaled to the run's GPUs. Any of them can be overridden.

    With the run's record `version` (run_record_version) the two medians come from the cache while it holds;
    M is the whole fleet's, up to `now`, and is computed each time (two small queries)."""
    measured = run_record_cached(run=run, version=version, part="advice", compute=lambda: _run_measured_costs(run))
    rate = fleet_failure_rate_get(now=now)
    measured_mtbf, mtbf_range = run_mtbf_s(run=run, rate=rate), None
    if measured_mtbf is not None:
        mtbf_range = advisor.job_mtbf_range_s(estimate=rate, gpus=run.gpu_count)
    values = {
        "delta_s": delta_s if delta_s is not None else measured[0],
        "mtbf_s": mtbf_s if mtbf_s is not None else measured_mtbf,
        "restart_s": restart_s if restart_s is not None else measured[1],
    }
    overrides = {"delta_s": delta_s, "mtbf_s": mtbf_s, "restart_s": restart_s}
    sources = {
        name: ("override" if overrides[name] is not None else "record" if value is not None else None)
        for name, value in values.items()
    }
    return AdviceInputs(
        **values,
        current_s=run.checkpoint_interval_s,
        sources=sources,
        rate=rate,
        mtbf_range_s=mtbf_range,
        as_of=now,
    )


def tier_measure(timeline: goodput.RunTimeline) -> tuple[tiers.TierRecord, float | None]:
    """What the two-tier plan reads of a run's record: its tiers, and its median reload (a restart to training)."""
    reloads = levers.reload_times(timeline)
    return tiers.measured(timeline), (statistics.median(reloads) if reloads else None)


def run_tier_advice_get(
    *, run: Run, delta_s: float, mtbf_s: float, restart_s: float, version: str | None = None,
    measured: tuple[tiers.TierRecord, float | None] | None = None, **overrides,
) -> tiers.TierAdvice | None:  # fmt: skip
    """The two-tier plan for the run: its record's tiers (`measured`, tier_measure of a timeline in hand, else kept
    under its record version) with the advice's delta, M and R where the record has none of its own. One source for
    the run page and the advice API; None without M."""
    if not mtbf_s or not math.isfinite(mtbf_s) or not delta_s:
        return None
    if measured is None:
        measured = run_record_cached(
            run=run, version=version, part="tiers", compute=lambda: tier_measure(run_timeline_get(run=run))
        )
    record, reload_s = measured
    return tiers.advise(
        record, delta_s=delta_s, restart_s=restart_s or 0.0, reload_s=reload_s, mtbf_s=mtbf_s, **overrides
    )


# The sizes the advisor projects a job to: up to Meta's 131,072-GPU projection (16,384 nodes of 8).
SCALE_GPUS = (1024, 4096, 16_384, 32_768, 65_536, 131_072)


def advice_at_scale(advice: advisor.Advice, *, gpus: int) -> list[advisor.ScalePoint]:
    """The advised job at other sizes (SCALE_GPUS and its own), at the per-GPU failure rate its M implies and its own
    blocking write and restart cost: the run page's and the advice API's projection."""
    if not gpus or not math.isfinite(advice.mtbf_s):
        return []
    rate_per_gpu_hour = 3600 / (advice.mtbf_s * gpus)
    sizes = sorted({*SCALE_GPUS, gpus})
    return advisor.at_scale(
        gpus=sizes,
        failures_per_node_day=advisor.per_node_day(rate_per_gpu_hour),
        delta_s=advice.delta_s,
        restart_s=advice.restart_s,
    )


def run_mtbf_s(*, run: Run, rate: advisor.RateEstimate | None) -> float | None:
    """The run's job MTBF M: the fleet's per-GPU failure rate (fleet_failure_rate_get) scaled to its GPUs; None before
    the fleet has failed once. The advisor's M and /metrics' fleetops_job_mtbf_seconds."""
    if rate is None or not rate.failures or not run.gpu_count:
        return None
    # At least the advisor's resolution: 2^31 - 1 GPUs at a high fleet rate would fail more often than that.
    return max(advisor.job_mtbf_s(rate_per_gpu_hour=rate.rate, gpus=run.gpu_count), advisor.MIN_COST_S)


@dataclass(frozen=True)
class RunLevers:
    """The run's levers (runs.domain.levers) over its whole record up to `until`, with the targets they were taken at
    and where each target came from ('record', 'setting' or 'override')."""

    report: levers.LeverReport
    targets: levers.Targets
    sources: dict[str, str]
    since: datetime
    until: datetime
    mtbf_s: float | None
    usd_per_gpu_hour: float


def run_levers_get(*, run: Run, now: datetime, version: str | None = None, **overrides) -> RunLevers | None:
    """What each fix would give back to the run: one source for the run page, the API and the weekly report. None for
    a run that never started. `overrides`: any of levers.Targets' fields. M (for the advised interval) is the
    advisor's (run_mtbf_s). An ended run's answer is kept under its record version and M while no target is
    overridden; a running run's grows with `now` and is computed each time."""
    if run.started_at is None:
        return None
    mtbf_s = run_mtbf_s(run=run, rate=fleet_failure_rate_get(now=now))
    usd = settings.GPU_HOUR_COST_USD

    def compute() -> RunLevers:
        timeline = run_timeline_get(run=run)
        found = levers.default_targets(
            timeline,
            detection_s=settings.LEVER_DETECTION_TARGET_S,
            async_blocking_s=settings.LEVER_ASYNC_BLOCKING_S,
            mtbf_s=mtbf_s,
        )
        given = {name: value for name, value in overrides.items() if value is not None}
        targets = dataclasses.replace(found, **given)
        setting = {"detection_s", "blocking_s"}
        sources = {
            f.name: "override" if f.name in given else "setting" if f.name in setting else "record"
            for f in dataclasses.fields(targets)
        }
        report = levers.levers(timeline, now=now, targets=targets, mtbf_s=mtbf_s, usd_per_gpu_hour=usd)
        return RunLevers(report, targets, sources, run.started_at, timeline.end(now), mtbf_s, usd)

    if version is None or run.ended_at is None or any(value is not None for value in overrides.values()):
        return compute()
    key = f"fleetops:run:levers:{version}:{mtbf_s and round(mtbf_s, 1)}:{usd}"
    return cache.get_or_set(key, compute, RECORD_CACHE_S)


def run_restart_s_get(*, run: Run) -> float | None:
    """The run's median fault-to-training-again time in seconds, the advisor's R (None before any restart)."""
    return _run_measured_costs(run)[1]


def _run_measured_costs(run: Run) -> tuple[float | None, float | None]:
    """The run's median blocking write and median fault-to-training-again time, in seconds (None if unmeasured)."""
    # Unordered: medians need no order, and the models' default ordering joins the run to sort by it.
    blocking = run.checkpoints.filter(blocking_s__isnull=False).order_by().values_list("blocking_s", flat=True)
    restarts = [
        (resumed - fault).total_seconds()
        for fault, resumed in run.interruptions.filter(planned=False, resumed_at__isnull=False)
        .order_by()
        .values_list("fault_at", "resumed_at")
    ]
    return advisor.write_cost_s(blocking), advisor.restart_cost_s(restarts)
