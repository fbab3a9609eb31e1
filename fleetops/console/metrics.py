"""GET /metrics: the fleet's figures in Prometheus' text format, for Grafana beside the fleet's other dashboards.

Each figure comes from the function the pages use for it (one figure, one source): goodput and badput over the last
24 h from the overview's fleet_goodput_get, GPUs idle from the board's rule, job MTBF from the advisor's M. Read with
a token of the metrics:read scope (Prometheus' `authorization: {credentials: ...}`).

A scrape must be cheap: the whole answer is kept METRICS_CACHE_S, and the 24 h goodput of every run, the one costly
figure, METRICS_GOODPUT_CACHE_S; the events accepted are counted on from the last count, not over the whole log.
fleetops_metrics_computed_timestamp_seconds says how old each part is. The cache is the process's own (locmem), so
each web worker keeps its own copy.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from rest_framework import exceptions

from fleetops.celery import queue_depths
from incidents import selectors as incident_selectors
from incidents.models import Delivery, Incident, PlaybookExecution
from runs import selectors
from runs.api.auth import BearerTokenAuthentication
from runs.domain.goodput import STAGES, Breakdown
from runs.models import ApiToken, Run

WINDOW = timedelta(hours=24)
WINDOW_LABEL = "24h"
IN_WINDOW = f"over the last {WINDOW_LABEL} (window label)"
TEXT_KEY = "metrics:text"
GOODPUT_KEY = "metrics:goodput"
EVENTS_KEY = "metrics:events-accepted"
# The runs beyond METRICS_MAX_RUNS, together: no run has this name (a run's name starts with a letter or digit,
# runs.domain.cloudevents), so it never adds a real run's figures to theirs.
FOLDED = "(other)"


@require_GET
def metrics(request):
    refusal = _refused(request)
    if refusal is not None:
        return refusal
    body = cache.get(TEXT_KEY)
    if body is None:
        body = generate_latest(_Collector(timezone.now()))
        cache.set(TEXT_KEY, body, settings.METRICS_CACHE_S)
    return HttpResponse(body, content_type=CONTENT_TYPE_PLAIN_0_0_4)


def _refused(request) -> HttpResponse | None:
    """401 without a live token, 403 for one without metrics:read: the API's bearer tokens and error shape."""
    try:
        found = BearerTokenAuthentication().authenticate(request)
    except exceptions.AuthenticationFailed as refusal:
        found, reason = None, str(refusal.detail)
    else:
        reason = f"A token with the '{ApiToken.Scope.METRICS_READ}' scope is required: 'Bearer <token>'."
    if found is None:
        response = JsonResponse({"detail": reason}, status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    if not found[1].has_scope(ApiToken.Scope.METRICS_READ):
        return JsonResponse({"detail": f"This token lacks the '{ApiToken.Scope.METRICS_READ}' scope."}, status=403)
    return None


class _Collector:
    """Every family, gathered when generate_latest asks (prometheus_client's custom-collector protocol)."""

    def __init__(self, now: datetime):
        self.now = now

    def collect(self):
        figures = _goodput(self.now)
        yield from _run_families(figures)
        yield from _fleet_families(figures)
        yield from _incident_families(self.now)
        yield from _event_families(self.now)
        yield from _queue_families()
        yield from _playbook_families()
        yield from _delivery_families()
        computed = GaugeMetricFamily(
            "fleetops_metrics_computed_timestamp_seconds",
            "When each part of this answer was computed (Unix time): 'goodput' is kept longer than the rest.",
            labels=["part"],
        )
        computed.add_metric(["goodput"], figures.computed_at.timestamp())
        computed.add_metric(["all"], self.now.timestamp())
        yield computed


# --- Goodput, badput and MTBF ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RunFigures:
    name: str
    cluster: str
    own: Breakdown  # in the run's own seconds: the run page's figures
    gpu: Breakdown  # in GPU-seconds: what adds up to the fleet's
    mtbf_s: float | None  # runs not ended only


@dataclass(frozen=True)
class _Goodput:
    computed_at: datetime
    fleet: Breakdown  # GPU-seconds
    failures_per_gpu_hour: float | None
    runs: list[_RunFigures]  # the runs shown, at most METRICS_MAX_RUNS
    folded: Breakdown  # the other runs together, GPU-seconds
    folded_count: int


def _goodput(now: datetime) -> _Goodput:
    figures = cache.get(GOODPUT_KEY)
    if figures is None:
        figures = _goodput_compute(now)
        cache.set(GOODPUT_KEY, figures, settings.METRICS_GOODPUT_CACHE_S)
    return figures


def _runs_shown(by_run: list[tuple[Run, Breakdown]], *, limit: int) -> tuple[list, list]:
    """(shown, folded): the `limit` runs an on-call needs by name, and the rest, of the runs with time in the window.

    Live runs first (their MTBF, their goodput now, the runs someone can still act on), then by GPU-seconds in the
    window: a run's weight in every fleet figure, so the shown runs hold the most of the fleet's goodput and the
    folded the least; it grows steadily for a live run, so the choice does not flap between scrapes the way a rank by
    badput would (a series that comes and goes breaks a Grafana line), and a flood of runs on few GPUs ranks last.
    Ties by name, for the same choice on every web worker.
    """
    timed = [(run, breakdown) for run, breakdown in by_run if breakdown.wall_clock_s > 0]
    timed.sort(key=lambda pair: (pair[0].ended_at is not None, -pair[1].wall_clock_s * pair[0].gpu_count, pair[0].name))
    return timed[:limit], timed[limit:]


def _goodput_compute(now: datetime) -> _Goodput:
    report = selectors.fleet_goodput_get(since=now - WINDOW, until=now, now=now)
    rate = selectors.fleet_failure_rate_get(now=now)
    shown, folded = _runs_shown(report.by_run, limit=settings.METRICS_MAX_RUNS)
    clusters = dict(Run.objects.filter(pk__in=[run.pk for run, _ in shown]).values_list("pk", "cluster__name"))
    runs = [
        _RunFigures(
            name=run.name,
            cluster=clusters.get(run.pk) or "",
            own=breakdown,
            gpu=breakdown.weighted(run.gpu_count),
            mtbf_s=selectors.run_mtbf_s(run=run, rate=rate) if run.ended_at is None else None,
        )
        for run, breakdown in shown
    ]
    return _Goodput(
        computed_at=now,
        fleet=report.total,
        failures_per_gpu_hour=rate.rate if rate is not None else None,
        runs=runs,
        folded=sum((breakdown.weighted(run.gpu_count) for run, breakdown in folded), Breakdown()),
        folded_count=len(folded),
    )


def _run_families(figures: "_Goodput") -> list[Metric]:
    window = IN_WINDOW
    shown = f"at most METRICS_MAX_RUNS ({settings.METRICS_MAX_RUNS}) runs, live ones first, then by GPU-seconds"
    folded = f'the runs beyond them together as run="{FOLDED}"'
    run_goodput = GaugeMetricFamily(
        "fleetops_run_goodput_ratio",
        f"Each run's goodput {window}: productive time / wall-clock time, the run page's figure; {shown}, and "
        f"{folded}, GPU-hour weighted.",
        labels=["run", "cluster", "window"],
    )
    run_badput = GaugeMetricFamily(
        "fleetops_run_badput_seconds",
        f"Each run's wall-clock seconds lost {window}, by stage (the goodput engine's stages); {shown}. The others "
        f'are in fleetops_run_badput_gpu_seconds{{run="{FOLDED}"}}.',
        labels=["run", "cluster", "stage", "window"],
    )
    run_gpu = GaugeMetricFamily(
        "fleetops_run_gpu_seconds",
        f"Each run's GPU-seconds {window}; {shown}, and {folded}: they add up to fleetops_fleet_gpu_seconds.",
        labels=["run", "cluster", "window"],
    )
    run_badput_gpu = GaugeMetricFamily(
        "fleetops_run_badput_gpu_seconds",
        f"Each run's GPU-seconds lost {window}, by stage; {shown}, and {folded}: they add up to "
        "fleetops_fleet_badput_gpu_seconds.",
        labels=["run", "cluster", "stage", "window"],
    )
    mtbf = GaugeMetricFamily(
        "fleetops_job_mtbf_seconds",
        "Each live run's job MTBF M: the fleet's failures per GPU-hour over its whole record, scaled to the run's "
        f"GPUs (the advisor's M); {shown}.",
        labels=["run", "cluster"],
    )
    for run in figures.runs:
        run_goodput.add_metric([run.name, run.cluster, WINDOW_LABEL], run.own.goodput)
        run_gpu.add_metric([run.name, run.cluster, WINDOW_LABEL], run.gpu.wall_clock_s)
        for stage in STAGES:
            run_badput.add_metric([run.name, run.cluster, stage, WINDOW_LABEL], run.own.stages_s[stage])
            run_badput_gpu.add_metric([run.name, run.cluster, stage, WINDOW_LABEL], run.gpu.stages_s[stage])
        if run.mtbf_s is not None:
            mtbf.add_metric([run.name, run.cluster], run.mtbf_s)
    # The folded runs' own seconds would add an hour of a 1-GPU run to an hour of a 16,384-GPU one, a figure FleetOps
    # shows nowhere, and a job MTBF is one job's: they have no FOLDED series. Their goodput is a ratio of sums (their
    # productive GPU-seconds over their GPU-seconds), never a mean of ratios; absent where they hold no GPU-time.
    if figures.folded_count:
        run_gpu.add_metric([FOLDED, "", WINDOW_LABEL], figures.folded.wall_clock_s)
        for stage in STAGES:
            run_badput_gpu.add_metric([FOLDED, "", stage, WINDOW_LABEL], figures.folded.stages_s[stage])
        if figures.folded.wall_clock_s > 0:
            run_goodput.add_metric([FOLDED, "", WINDOW_LABEL], figures.folded.goodput)
    runs_folded = GaugeMetricFamily(
        "fleetops_runs_folded",
        f"Runs with time {window} beyond METRICS_MAX_RUNS ({settings.METRICS_MAX_RUNS}), shown together as "
        f'run="{FOLDED}".',
        labels=["window"],
    )
    runs_folded.add_metric([WINDOW_LABEL], figures.folded_count)
    return [run_goodput, run_badput, run_gpu, run_badput_gpu, mtbf, runs_folded]


def _fleet_families(figures: "_Goodput") -> list[Metric]:
    window = IN_WINDOW
    fleet_goodput = GaugeMetricFamily(
        "fleetops_fleet_goodput_ratio",
        f"The fleet's goodput {window}, GPU-hour weighted: the overview's figure. Absent with no GPU-time.",
        labels=["window"],
    )
    if figures.fleet.wall_clock_s > 0:
        fleet_goodput.add_metric([WINDOW_LABEL], figures.fleet.goodput)
    fleet_gpu = GaugeMetricFamily(
        "fleetops_fleet_gpu_seconds", f"GPU-seconds of every run {window}.", labels=["window"]
    )
    fleet_gpu.add_metric([WINDOW_LABEL], figures.fleet.wall_clock_s)
    fleet_badput = GaugeMetricFamily(
        "fleetops_fleet_badput_gpu_seconds", f"GPU-seconds lost {window}, by stage.", labels=["stage", "window"]
    )
    for stage in STAGES:
        fleet_badput.add_metric([stage, WINDOW_LABEL], figures.fleet.stages_s[stage])
    rate = GaugeMetricFamily(
        "fleetops_fleet_failures_per_gpu_hour",
        "Unexpected interruptions per GPU-hour over the whole record: the rate every job MTBF is scaled from.",
    )
    if figures.failures_per_gpu_hour is not None:
        rate.add_metric([], figures.failures_per_gpu_hour)
    return [fleet_goodput, fleet_gpu, fleet_badput, rate]


# --- Incidents and what they burn -----------------------------------------------------------------------------------


def _incident_families(now: datetime) -> list[Metric]:
    figures = incident_selectors.open_incidents_figures_get(now=now)
    idle = GaugeMetricFamily(
        "fleetops_gpus_idle", "GPUs idle now behind open incidents (the board's and the overview's figure)."
    )
    idle.add_metric([], figures.gpus_idle)
    burn = GaugeMetricFamily(
        "fleetops_idle_cost_usd_per_minute",
        f"What those idle GPUs cost a minute at GPU_HOUR_COST_USD ({settings.GPU_HOUR_COST_USD:g} $ a GPU-hour).",
    )
    burn.add_metric([], incident_selectors.cost_per_minute_usd(figures.gpus_idle))
    open_ = GaugeMetricFamily(
        "fleetops_incidents_open", "Open incidents by severity and state.", labels=["severity", "state"]
    )
    for severity in Incident.Severity.values:
        for status in Incident.OPEN:
            open_.add_metric([severity, status], figures.by_kind.get((severity, status), 0))
    needs = GaugeMetricFamily(
        "fleetops_incidents_needing_a_person",
        "Open incidents nobody has acknowledged, or that idle GPUs now: the board's first group.",
    )
    needs.add_metric([], figures.needs_person)
    return [idle, burn, open_, needs]


# --- Events ---------------------------------------------------------------------------------------------------------


def _event_families(now: datetime) -> list[Metric]:
    accepted = selectors.events_accepted_get(
        since=cache.get(EVENTS_KEY), settle_s=settings.METRICS_EVENTS_SETTLE_S, now=now
    )
    cache.set(EVENTS_KEY, accepted, None)
    unapplied = selectors.events_unapplied_get(through=accepted.through)
    settled = f"counted up to events received {settings.METRICS_EVENTS_SETTLE_S:g} s ago"
    accepted_family = CounterMetricFamily(
        "fleetops_events_accepted", f"Events the intake accepted, by type ({settled}).", labels=["type"]
    )
    applied_family = CounterMetricFamily(
        "fleetops_events_applied", f"Of those, events applied to the record, by type ({settled}).", labels=["type"]
    )
    for type_, count in sorted(accepted.by_type.items()):
        accepted_family.add_metric([type_], count)
        out = unapplied.settled_waiting.get(type_, 0) + unapplied.settled_quarantined.get(type_, 0)
        applied_family.add_metric([type_], max(count - out, 0))
    waiting = GaugeMetricFamily("fleetops_events_waiting", "Events accepted and not applied yet.", labels=["type"])
    for type_, count in sorted(unapplied.waiting.items()):
        waiting.add_metric([type_], count)
    quarantined = GaugeMetricFamily(
        "fleetops_events_quarantined",
        "Events that failed to apply and are out of the record until replayed (the quarantine page).",
        labels=["type"],
    )
    for type_, count in sorted(unapplied.quarantined.items()):
        quarantined.add_metric([type_], count)
    lag = GaugeMetricFamily(
        "fleetops_apply_lag_seconds", "How long the oldest event not applied yet has waited; 0 when none waits."
    )
    oldest = unapplied.oldest_waiting_at
    lag.add_metric([], max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0)
    return [accepted_family, applied_family, waiting, quarantined, lag]


def _queue_families() -> list[Metric]:
    depths = queue_depths(settings.FLEETOPS_QUEUES)
    up = GaugeMetricFamily("fleetops_broker_up", "1 when the task broker answered this scrape, else 0.")
    up.add_metric([], 0 if depths is None else 1)
    depth = GaugeMetricFamily("fleetops_queue_depth", "Tasks waiting in each queue of the broker.", labels=["queue"])
    for queue, count in (depths or {}).items():
        depth.add_metric([queue], count)
    return [up, depth]


# --- Playbooks and webhooks -----------------------------------------------------------------------------------------


def _playbook_families() -> list[Metric]:
    outcomes = CounterMetricFamily(
        "fleetops_playbook_outcomes",
        "Playbook executions that ended, by playbook, outcome and dry run. A dry run's outcome is the real run's, "
        "foretold: succeeded, every step would go ahead; failed, one would be refused or fail.",
        labels=["playbook", "outcome", "dry_run"],
    )
    active = GaugeMetricFamily(
        "fleetops_playbooks_active",
        "Playbook executions running or waiting for approval.",
        labels=["playbook", "state"],
    )
    for playbook, status, dry_run, count in incident_selectors.playbook_counts_get():
        if status in PlaybookExecution.ACTIVE:
            active.add_metric([playbook, status], count)
        else:
            outcomes.add_metric([playbook, status, str(dry_run).lower()], count)
    return [outcomes, active]


def _delivery_families() -> list[Metric]:
    failures = CounterMetricFamily(
        "fleetops_webhook_delivery_failures",
        "Notifications given up on after every retry, by endpoint.",
        labels=["endpoint"],
    )
    pending = GaugeMetricFamily(
        "fleetops_webhook_deliveries_pending",
        "Notifications not delivered yet (retrying ones among them), by endpoint.",
        labels=["endpoint"],
    )
    for endpoint, status, count in incident_selectors.delivery_counts_get():
        if status == Delivery.Status.FAILED:
            failures.add_metric([endpoint], count)
        elif status == Delivery.Status.PENDING:
            pending.add_metric([endpoint], count)
    return [failures, pending]
