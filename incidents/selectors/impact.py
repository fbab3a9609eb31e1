"""What an incident costs from the record: GPUs idled, GPU-hours lost and runs affected, live or as it was."""

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef

from incidents.models import Incident
from runs.domain import goodput
from runs.models import Interruption
from runs.selectors import run_costs_get, runs_heard_until_get


@dataclass(frozen=True)
class Impact:
    gpus_idle: int
    gpu_hours_lost: float  # over the incident's interruptions so far: downtime stages and rewound work
    goodput_lost: float  # the run's goodput those hours cost, in fraction points
    rewound_min: float
    gpu_hours_per_minute: float  # burning now, while GPUs are idle
    cost_per_minute_usd: float
    # The run restarts and has been silent past RUN_SILENT_S since this moment: its loss stopped being counted.
    silent_since: datetime | None = None
    interruptions: int = 0  # of its run's, those it owns
    gpus_idled: int = 0  # the GPUs its faults idled, now or before (its run's, once it owns an interruption)


NO_IMPACT = Impact(0, 0.0, 0.0, 0.0, 0.0, 0.0)


def incident_impact(*, incident: Incident, now: datetime) -> Impact:
    """What the incident costs, computed from the run's record each time it is asked (so it updates live)."""
    return incident_impacts_get(incidents=[incident], now=now)[incident.pk]


def incident_impacts_get(*, incidents: list[Incident], now: datetime) -> dict[int, Impact]:
    """What each incident costs, by incident id, in a fixed number of queries however many (a list page).

    An incident owns its run's interruptions from its start until the next incident of the run began (or it was
    resolved): each interruption is charged to one incident, so a run's incidents together claim its failure badput
    and never more. Its GPUs are idle only while one of its own interruptions has not trained again and the run has not
    ended: an incident mitigated days ago shows nothing burning, whatever its run does now."""
    return _impacts(incidents, now, _live_get(incidents, now))


def _impacts(incidents: list[Incident], now: datetime, live: "_Live") -> dict[int, Impact]:
    """incident_impacts_get with the live state of these incidents (or of a list holding them) already read."""
    # The costs once a run, not once an incident: a 54-day run's hundreds of incidents share its one timeline.
    measured = [i for i in incidents if i.pk in live.spans]
    costs = run_costs_get(runs=list({i.run.pk: i.run for i in measured}.values()), now=now)
    impacts = {i.pk: NO_IMPACT for i in incidents}
    for i in measured:
        silent_since = live.silent.get(i.run_id) if i.pk in live.down else None
        impacts[i.pk] = _impact(
            i,
            now,
            costs[i.run.pk],
            live.spans[i.pk],
            down=i.pk in live.burning,
            silent_since=silent_since,
            heard_until=live.heard.get(i.run_id),
        )
    return impacts


@dataclass(frozen=True)
class _Live:
    measured: list[Incident]  # those with a run that started
    spans: dict[int, tuple[datetime, datetime]]  # the faults each owns (_owned_span)
    heard: dict[int, datetime]  # run id -> where its record ends, of runs restarting (RunTimeline.heard_until)
    silent: dict[int, datetime]  # run id -> silent since, of those silent past RUN_SILENT_S
    down: set[int]  # incidents whose own interruption is still down (_down_incidents)
    burning: set[int]  # of them, those of runs not silent: GPUs idle, counted now


def _live_get(incidents: list[Incident], now: datetime) -> _Live:
    measured = [i for i in incidents if i.run is not None and i.run.started_at is not None]
    runs = list({i.run.pk: i.run for i in measured}.values())
    starts = _incident_starts([run.pk for run in runs])
    spans = {i.pk: _owned_span(i, starts[i.run_id], now) for i in measured}
    # A run silent while restarting burns nothing counted: nobody knows it is still down (RUN_SILENT_S).
    silence = timedelta(seconds=settings.RUN_SILENT_S)
    heard = runs_heard_until_get(runs=runs)
    silent = {pk: until - silence for pk, until in heard.items() if until < now}
    down = _down_incidents([i for i in measured if i.is_open and i.run.ended_at is None], spans)
    burning = {i.pk for i in measured if i.pk in down and i.run_id not in silent}
    return _Live(measured, spans, heard, silent, down, burning)


def incidents_burning_get(*, incidents: list[Incident], now: datetime) -> set[int]:
    """The ids of those incidents idling GPUs now (their own interruption down, their run neither ended nor silent),
    without pricing them: what the nav badge needs, a few queries however many incidents."""
    return _live_get(incidents, now).burning


# A run.failed stamped just before the incident's first alert (the scheduler's report of an Xid the agent sent first)
# is still the incident's own fault.
_LEAD = timedelta(seconds=1)


def incident_faults_span_get(*, incident: Incident, now: datetime) -> tuple[datetime, datetime] | None:
    """[from, until) of the faults of its run the incident owns (its impact's, its postmortem's); None without a run."""
    if incident.run_id is None:
        return None
    return _owned_span(incident, _incident_starts([incident.run_id])[incident.run_id], now)


def _incident_starts(run_ids: list[int]) -> dict[int, list[tuple[datetime, int]]]:
    """(start, id) of every incident of these runs, in order, by run id (one query)."""
    starts: dict[int, list[tuple[datetime, int]]] = {pk: [] for pk in run_ids}
    rows = Incident.objects.filter(run_id__in=run_ids).order_by("started_at", "pk")
    for run_id, started_at, pk in rows.values_list("run_id", "started_at", "pk"):
        starts[run_id].append((started_at, pk))
    return starts


def _owned_span(incident: Incident, starts: list[tuple[datetime, int]], now: datetime) -> tuple[datetime, datetime]:
    """The faults the incident owns, [from, until): from a second before its start to a second before the next
    incident of its run began (so each fault is one incident's), or to its resolution, or now."""
    later = starts[bisect_right(starts, (incident.started_at, incident.pk)) :]
    until = min([incident.resolved_at or now, *(start - _LEAD for start, _ in later[:1])])
    return incident.started_at - _LEAD, max(until, incident.started_at - _LEAD)


def _down_incidents(incidents: list[Incident], spans: dict[int, tuple[datetime, datetime]]) -> set[int]:
    """The ids of those incidents (open, of runs still going) that own their run's latest interruption, not resumed
    yet: an earlier one never resumed was cut short by a later fault (a failure during reload), and the later one's
    resume ends the outage for both."""
    if not incidents:
        return set()
    later = Interruption.objects.filter(run_id=OuterRef("run_id"), fault_at__gt=OuterRef("fault_at"))
    faults = (
        Interruption.objects.filter(run_id__in={i.run_id for i in incidents}, resumed_at__isnull=True, planned=False)
        .filter(~Exists(later))
        .values_list("run_id", "fault_at")
    )
    by_run: dict[int, list[datetime]] = {}
    for run_id, fault_at in faults:
        by_run.setdefault(run_id, []).append(fault_at)
    return {
        i.pk
        for i in incidents
        if any(spans[i.pk][0] <= fault_at < spans[i.pk][1] for fault_at in by_run.get(i.run_id, ()))
    }


def _impact(
    incident: Incident,
    now: datetime,
    run_costs: list[goodput.InterruptionCost],
    span: tuple[datetime, datetime],
    *,
    down: bool,
    silent_since: datetime | None = None,
    heard_until: datetime | None = None,
) -> Impact:
    """`run_costs`: goodput.interruption_costs of the incident's run, at `now`; `span`: the faults it owns."""
    run = incident.run
    # run_costs are in fault order: the incident's slice is found by bisection, not a scan a row of the board.
    first = bisect_left(run_costs, span[0], key=_fault_at)
    # A planned stop is no incident's: the run's maintenance costs its goodput, not a failure's response.
    costs = [c for c in run_costs[first : bisect_left(run_costs, span[1], key=_fault_at)] if not c.planned]
    lost = sum(c.gpu_hours for c in costs)
    # Over the run's record, as its page counts it: to its end, or now, or where a silent restart stopped counting.
    end = run.ended_at or (now if heard_until is None else min(now, heard_until))
    run_hours = (end - run.started_at).total_seconds() / 3600 * run.gpu_count
    gpus_idle = run.gpu_count if down else 0
    return Impact(
        gpus_idle=gpus_idle,
        gpu_hours_lost=lost,
        goodput_lost=lost / run_hours if run_hours else 0.0,
        rewound_min=sum(c.rewound_min for c in costs),
        gpu_hours_per_minute=gpus_idle / 60,
        cost_per_minute_usd=cost_per_minute_usd(gpus_idle),
        silent_since=silent_since,
        interruptions=len(costs),
        gpus_idled=run.gpu_count if costs else 0,
    )


def _fault_at(cost: goodput.InterruptionCost) -> datetime:
    return cost.fault_at


def cost_per_minute_usd(gpus_idle: int) -> float:
    """What idle GPUs cost a minute (GPU_HOUR_COST_USD): an incident's burn, and the fleet's on the overview."""
    return gpus_idle / 60 * settings.GPU_HOUR_COST_USD
