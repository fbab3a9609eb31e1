"""Reads for incidents: live impact, lists, response metrics."""

import functools
import hashlib
import zoneinfo
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from incidents.domain.response import IncidentTimes, response_metrics
from incidents.models import Alert, Delivery, Incident, PlaybookExecution, Preference, TimelineEntry
from runs.domain import goodput, hostlist
from runs.models import Interruption, Node, Run
from runs.selectors import FlaggedNode, run_costs_get, runs_heard_until_get


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


def incidents_list(*, status: str = "", severity: str = "", run: str = "", node: str = "", open_only=False):
    # The alert figures as a subquery a row, not a join grouped by every selected column: at 16,384 alerts on one
    # incident the grouped join was 64 ms of the board's read on SQLite and 29 on PostgreSQL, this 6-7.
    alerts = Alert.objects.filter(incident=OuterRef("pk")).order_by().values("incident")
    incidents = (
        Incident.objects.select_related("run", "commander")
        .annotate(
            alert_count=Subquery(alerts.annotate(n=Sum("count")).values("n")),
            firing_count=Coalesce(Subquery(alerts.filter(status="firing").annotate(n=Count("*")).values("n")), 0),
        )
        # The id last: a page of the board (a slice) must not swap incidents started at the same instant.
        .order_by("severity", "-started_at", "-id")
    )
    return _filtered(incidents, status=status, severity=severity, run=run, node=node, open_only=open_only)


NEEDS_PERSON, OTHER_OPEN, CLOSED = "needs a person", "open", "resolved or closed"


@dataclass(frozen=True)
class BoardPage:
    groups: list[tuple[str, list[Incident], int]]  # (attention, its incidents on this page, how many on all pages)
    total: int
    gpus_idle: int = 0  # by the matching incidents, now (each incident's Impact.gpus_idle, added up)
    # The nav badge's figures, from the same read, when the page holds every open incident (no filter but open_only):
    # the board and the overview then read the open incidents once, not once for the list and again for the badge.
    summary: "OpenSummary | None" = None

    @property
    def cost_per_minute_usd(self) -> float:
        return cost_per_minute_usd(self.gpus_idle)


def gpus_idle_get(*, incidents: list[Incident], burning: set[int]) -> int:
    """GPUs idle now: the GPUs of each open incident's run that burns (incidents_burning_get), added up. The board's,
    the overview's and /metrics' figure."""
    return sum(i.run.gpu_count for i in incidents if i.pk in burning)


def cost_per_minute_usd(gpus_idle: int) -> float:
    """What idle GPUs cost a minute (GPU_HOUR_COST_USD): an incident's burn, and the fleet's on the overview."""
    return gpus_idle / 60 * settings.GPU_HOUR_COST_USD


def needs_a_person(incident: Incident, burning: set[int]) -> bool:
    """docs/DOMAIN.md section 6: an open incident nobody has acknowledged (automation may have mitigated it: a person
    still answers for it), or one whose GPUs are idle now (`burning`: the pks of those). The board's first group,
    the overview's rows and the nav badge all ask this."""
    return not _acknowledged(incident) or incident.pk in burning


def _acknowledged(incident: Incident) -> bool:
    return incident.acknowledged_at is not None or incident.status == Incident.Status.ACKNOWLEDGED


def incident_board_get(*, first: int, size: int, now: datetime, **filters) -> BoardPage:
    """A page of incidents_list(**filters) in the order the on-call works them: what needs a person first (nobody
    acknowledged it, or it idles GPUs now), unacknowledged before acknowledged, then by what it burns now, then
    severity, newest first; then the other open ones in that order; resolved and closed last, by severity, newest
    first. Each incident on the page carries its .impact; the order is total, so pages never swap rows."""
    rows = incidents_list(**filters)
    # Every open incident is read to order them, but only the page's rows with their alert counts and commander: at
    # hundreds open (517 on the 54-day run) the annotated read and a Run object a row were most of the page's time.
    opened = _with_runs(list(_filtered(Incident.objects.all(), **filters).filter(status__in=Incident.OPEN)))
    live = _live_get(opened, now)
    burning = live.burning

    def burn(incident: Incident) -> int:
        return incident.run.gpu_count if incident.pk in burning else 0

    def needs(incident: Incident) -> bool:
        return needs_a_person(incident, burning)

    def order(i: Incident) -> tuple:
        return (not needs(i), _acknowledged(i), -burn(i), i.severity, -i.started_at.timestamp(), -i.pk)

    opened.sort(key=order)
    # By id alone, not the filters again: one resolved between the two reads is still on this page, as read.
    shown = {i.pk: i for i in incidents_list().filter(pk__in=[i.pk for i in opened[first : first + size]])}
    page = [shown[i.pk] for i in opened[first : first + size] if i.pk in shown]
    impacts = _impacts(page, now, live)
    closed_total = 0 if filters.get("open_only") else rows.exclude(status__in=Incident.OPEN).count()
    if len(page) < size and closed_total:
        skip = max(first - len(opened), 0)
        closed = list(rows.exclude(status__in=Incident.OPEN)[skip : skip + size - len(page)])
        impacts |= incident_impacts_get(incidents=closed, now=now)
        page += closed
    _with_hosts(page)
    for incident in page:
        incident.impact = impacts[incident.pk]
    attention = {i.pk: NEEDS_PERSON if needs(i) else OTHER_OPEN for i in opened}
    needing = sum(needs(i) for i in opened)
    totals = {NEEDS_PERSON: needing, OTHER_OPEN: len(opened) - needing, CLOSED: closed_total}
    groups: dict[str, list[Incident]] = {}
    for incident in page:
        groups.setdefault(attention.get(incident.pk, CLOSED), []).append(incident)
    unfiltered = not any(value for key, value in filters.items() if key != "open_only")
    return BoardPage(
        [(name, shown, totals[name]) for name, shown in groups.items()],
        len(opened) + closed_total,
        gpus_idle=gpus_idle_get(incidents=opened, burning=burning),
        summary=_summary(opened, burning) if unfiltered else None,
    )


@dataclass(frozen=True)
class SeverityCount:
    severity: str
    total: int  # incidents matching the filters
    open: int  # of them, those still open


def incident_counts_get(
    *, status: str = "", severity: str = "", run: str = "", node: str = "", open_only=False
) -> list[SeverityCount]:
    """How many incidents match incidents_list's filters, per severity (every severity, most severe first): one
    query, whatever the number of incidents, so a page of the board can say what the other pages hold."""
    rows = _filtered(Incident.objects.all(), status=status, severity=severity, run=run, node=node, open_only=open_only)
    counted = (
        rows.order_by()
        .values("severity")
        .annotate(total=Count("id", distinct=True), open=Count("id", filter=Q(status__in=Incident.OPEN), distinct=True))
    )
    found = {row["severity"]: (row["total"], row["open"]) for row in counted}
    return [SeverityCount(value, *found.get(value, (0, 0))) for value in Incident.Severity.values]


def _filtered(incidents, *, status: str = "", severity: str = "", run: str = "", node: str = "", open_only=False):
    if open_only:
        incidents = incidents.filter(status__in=Incident.OPEN)
    if status:
        incidents = incidents.filter(status=status)
    if severity:
        incidents = incidents.filter(severity=severity)
    if run:
        incidents = incidents.filter(run__name=run)
    if node:
        incidents = incidents.filter(nodes__hostname=node).distinct()
    return incidents


@dataclass(frozen=True)
class OpenSummary:
    count: int
    worst: str | None  # the most severe open incident's severity ("SEV1" sorts first), None when none is open
    latest_id: int | None
    needs_person: int = 0  # open and unacknowledged, or idling GPUs now (the board's first group)
    needs_worst: str | None = None  # the most severe of those
    needs_digest: str = "0"  # which they are: one acknowledged as another starts burning changes it, not the count

    @property
    def signature(self) -> str:
        """Changes when an incident opens or closes, or starts or stops needing a person: pages compare it to know
        when to reload their list."""
        return f"{self.count}.{self.latest_id or 0}.{self.needs_person}.{self.needs_digest}"


def _with_hosts(incidents: list[Incident]) -> None:
    """Each incident's nodes as .hosts (folded: gpu-[00001-16384]) and .node_count, from one narrow read: a fault
    on 16,384 nodes made 16,384 Node objects for one row of the board (420 ms)."""
    names: dict[int, list[str]] = {incident.pk: [] for incident in incidents}
    links = Incident.nodes.through.objects.filter(incident_id__in=list(names))
    for incident_id, hostname in links.values_list("incident_id", "node__hostname"):
        names[incident_id].append(hostname)
    for incident in incidents:
        incident.node_count, incident.hosts = len(names[incident.pk]), hostlist.fold(names[incident.pk])


def _with_runs(incidents: list[Incident]) -> list[Incident]:
    """The incidents with their runs read once a run, not once a row (a 54-day run's hundreds of incidents)."""
    runs = Run.objects.in_bulk({i.run_id for i in incidents if i.run_id is not None})
    for incident in incidents:
        if incident.run_id is not None:
            incident.run = runs[incident.run_id]
    return incidents


def open_incidents_get() -> list[Incident]:
    """Every open incident, each with its run."""
    return _with_runs(list(Incident.objects.filter(status__in=Incident.OPEN)))


@dataclass(frozen=True)
class OpenFigures:
    by_kind: dict[tuple[str, str], int]  # (severity, status) -> open incidents
    needs_person: int  # the board's first group (needs_a_person)
    gpus_idle: int  # gpus_idle_get


def open_incidents_figures_get(*, now: datetime) -> OpenFigures:
    """/metrics' incident figures by the board's rules, without a whole row of every open incident: counted in the
    database, and read whole only where the incident's run still goes, since only those can idle GPUs (_live_get
    counts no run that ended). Hundreds open on a long run cost a page 25 ms of rows; this, a few ms."""
    opened = Incident.objects.filter(status__in=Incident.OPEN).order_by()
    acknowledged = Q(acknowledged_at__isnull=False) | Q(status=Incident.Status.ACKNOWLEDGED)  # _acknowledged
    counts = Count("id"), Count("id", filter=~acknowledged)
    rows = list(opened.values_list("severity", "status").annotate(n=counts[0], unacknowledged=counts[1]))
    live = list(opened.filter(run__started_at__isnull=False, run__ended_at__isnull=True))
    burning = incidents_burning_get(incidents=_with_runs(live), now=now) if live else set()
    # needs_a_person: nobody acknowledged it, or it burns (and those that burn are among `live`).
    needs = sum(unacknowledged for *_, unacknowledged in rows)
    needs += sum(1 for i in live if i.pk in burning and _acknowledged(i))
    return OpenFigures(
        by_kind={(severity, status): n for severity, status, n, _ in rows},
        needs_person=needs,
        gpus_idle=gpus_idle_get(incidents=live, burning=burning),
    )


def open_incidents_summary(*, now: datetime | None = None) -> OpenSummary:
    """The nav badge's figures: what needs a person, out of what is open (the board's first group, one rule).

    Every page shows them, so this reads what they count: each open incident's id, severity and acknowledgement,
    and whole only those whose run still goes, the only ones that can idle GPUs (_live_get counts no run that ended
    or never started). The 54-day run's 475 open incidents read whole cost every page 22 ms; read so, a few."""
    opened = Incident.objects.filter(status__in=Incident.OPEN).order_by().select_related("run")
    fields = ("id", "severity", "status", "acknowledged_at", "run", "run__started_at", "run__ended_at")
    slim = list(opened.only(*fields))
    live = [i.pk for i in slim if i.run is not None and i.run.started_at is not None and i.run.ended_at is None]
    burning = set()
    if live:  # as many queries as reading them all whole did: these whole, their runs joined
        burning = incidents_burning_get(incidents=list(opened.filter(pk__in=live)), now=now or timezone.now())
    return _summary(slim, burning)


def _summary(opened: list[Incident], burning: set[int]) -> OpenSummary:
    needs = [i for i in opened if needs_a_person(i, burning)]
    return OpenSummary(
        count=len(opened),
        worst=min((i.severity for i in opened), default=None),  # "SEV1" sorts first
        latest_id=max((i.pk for i in opened), default=None),
        needs_person=len(needs),
        needs_worst=min((i.severity for i in needs), default=None),
        needs_digest=hashlib.sha256(repr(sorted(i.pk for i in needs)).encode()).hexdigest()[:8] if needs else "0",
    )


def nodes_in_open_incidents() -> set[str]:
    return set(Incident.objects.filter(status__in=Incident.OPEN).values_list("nodes__hostname", flat=True)) - {None}


def incident_timeline_get(*, incident: Incident) -> list["TimelineEntry | AlertBurst"]:
    """The story of the incident, oldest first; refusals are audit entries and left out (see incident_refusals).

    A run of more than BURST alert entries in a row (a fault on 2,048 nodes opens 2,048 alerts at once) is one
    AlertBurst: its first and last entries and how many lie between, so the people's entries stay in view."""
    keys = list(
        incident.timeline.exclude(kind=TimelineEntry.Kind.REFUSED).order_by("at", "id").values_list("id", "kind")
    )
    runs: list[tuple[bool, list[int]]] = []  # (a run of alert entries?, its ids)
    for pk, kind in keys:
        alert = kind == TimelineEntry.Kind.ALERT
        if alert and runs and runs[-1][0]:
            runs[-1][1].append(pk)
        else:
            runs.append((alert, [pk]))

    def burst(alert: bool, ids: list[int]) -> bool:
        return alert and len(ids) > BURST

    shown = [pk for alert, ids in runs for pk in ((ids[0], ids[-1]) if burst(alert, ids) else ids)]
    entries = TimelineEntry.objects.in_bulk(shown)
    story: list[TimelineEntry | AlertBurst] = []
    for alert, ids in runs:
        if burst(alert, ids):
            story.append(AlertBurst(first=entries[ids[0]], last=entries[ids[-1]], count=len(ids)))
        else:
            story.extend(entries[pk] for pk in ids)
    return story


BURST = 5  # alert entries in a row shown one by one; more become one AlertBurst


@dataclass(frozen=True)
class AlertBurst:
    first: TimelineEntry
    last: TimelineEntry
    count: int  # alert entries in the burst, first and last included
    kind = "alert-burst"

    @property
    def between(self) -> int:
        return self.count - 2


ALERTS_SHOWN = 5  # alerts of one kind shown one by one; more are one row with their hosts folded


@dataclass
class AlertGroup:
    """The incident's alerts of one status, kind and severity: a fault on 2,048 nodes is one row, not 2,048."""

    status: str
    kind: str
    severity: str
    total: int = 0
    occurrences: int = 0
    hostnames: list[str] = field(default_factory=list)  # one an alert: a node with two GPUs' alerts twice
    latest: list[Alert] = field(default_factory=list)  # newest first, ALERTS_SHOWN at most
    first_seen_at: datetime | None = None
    last_seen_at: datetime | None = None


def incident_alert_groups_get(*, incident: Incident, hostnames: dict[int, str] | None = None) -> list[AlertGroup]:
    """Firing before resolved, then the group seen last first. Counted and timed in the database, each alert's id and
    node id read narrow (no datetimes to convert: 16,384 alerts' times cost 130 ms on SQLite; no join to the nodes),
    and each group's newest ALERTS_SHOWN read in full. `hostnames`: node id -> hostname of the incident's nodes when
    the caller has read them (incident_nodes_get: an alert's node is one of its incident's); others are read here."""
    totals = (
        incident.alerts.values("status", "kind", "severity")
        .annotate(total=Count("id"), occurrences=Sum("count"), first=Min("first_seen_at"), last=Max("last_seen_at"))
        .order_by("status", "-last", "kind", "severity")
    )
    groups = {
        (row["status"], row["kind"], row["severity"]): AlertGroup(
            row["status"], row["kind"], row["severity"], total=row["total"], occurrences=row["occurrences"],
            first_seen_at=row["first"], last_seen_at=row["last"],
        )
        for row in totals
    }  # fmt: skip
    # Each group's nodes as ids, not names: no join, and a page that has read the incident's nodes (hostnames) names
    # them without reading them again. One narrow column when the incident has one group, as a fault on every node does.
    alerts = incident.alerts.filter(node__isnull=False).order_by()
    nodes: dict[tuple[str, str, str], list[int]] = {key: [] for key in groups}
    if len(groups) == 1:
        ((key, _),) = groups.items()
        nodes[key] = list(alerts.filter(status=key[0], kind=key[1], severity=key[2]).values_list("node", flat=True))
    else:
        for status, kind, severity, node in alerts.values_list("status", "kind", "severity", "node"):
            if (ids := nodes.get((status, kind, severity))) is not None:  # else resolved, or new, since the count
                ids.append(node)
    # Newest first, sorted by the database: each group's first ALERTS_SHOWN ids are its newest; read until every group
    # has them (a few rows, not the 16,384 of a fault on every node).
    wanted = {key: min(group.total, ALERTS_SHOWN) for key, group in groups.items()}
    newest_first = incident.alerts.order_by("-last_seen_at", "-pk").values_list("pk", "status", "kind", "severity")
    for pk, *key in newest_first.iterator(chunk_size=200):
        group = groups.get(tuple(key))
        if group is not None and len(group.latest) < ALERTS_SHOWN:
            group.latest.append(pk)
        if all(len(groups[k].latest) >= n for k, n in wanted.items()):
            break
    hostnames = dict(hostnames or {})
    missing = {node for ids in nodes.values() for node in ids} - hostnames.keys()
    if missing:
        hostnames |= dict(Node.objects.filter(pk__in=missing).values_list("pk", "hostname"))
    for key, ids in nodes.items():
        groups[key].hostnames = [hostnames[node] for node in ids]
    newest = [pk for group in groups.values() for pk in group.latest]
    alerts = Alert.objects.select_related("node", "gpu").in_bulk(newest)
    for group in groups.values():
        group.latest = [alerts[pk] for pk in group.latest if pk in alerts]
    return list(groups.values())


AFFECTED_LISTED = 10  # nodes named one by one on the incident page, out of service first; all in the host list
NODE_CHOICES = 200  # nodes offered in the playbook form's list; more are typed (the field checks the name)


@dataclass(frozen=True)
class ListedNode:
    hostname: str
    state: str
    rack: str

    def get_absolute_url(self) -> str:
        return reverse("node-page", args=[self.hostname])

    def get_state_display(self) -> str:
        return dict(Node.STATES).get(self.state, self.state)


@dataclass(frozen=True)
class AffectedNodes:
    total: int
    hostnames: list[str]  # every node's
    by_id: dict[int, str]  # node id -> hostname, of every node
    by_state: list[tuple[str, str, int]]  # (state, label, nodes) for the states present
    listed: list[ListedNode]  # all when AFFECTED_LISTED or fewer; else those out of service, AFFECTED_LISTED at most
    choices: list[str] | None  # every hostname, in order, when there are NODE_CHOICES or fewer

    @property
    def unlisted(self) -> int:
        return self.total - len(self.listed)


def incident_nodes_get(*, incident: Incident) -> AffectedNodes:
    with_ids = list(incident.nodes.values_list("pk", "hostname", "state", "rack"))
    rows = [row[1:] for row in with_ids]
    names = [hostname for hostname, _, _ in rows]
    counts = Counter(state for _, state, _ in rows)
    listed = sorted(row for row in rows if row[1] != "in_service") if len(rows) > AFFECTED_LISTED else sorted(rows)
    return AffectedNodes(
        total=len(rows),
        hostnames=names,
        by_id={pk: hostname for pk, hostname, _, _ in with_ids},
        by_state=[(value, label, counts[value]) for value, label in Node.STATES if counts[value]],
        listed=[ListedNode(*row) for row in listed[:AFFECTED_LISTED]],
        choices=sorted(names, key=hostlist.natural) if len(names) <= NODE_CHOICES else None,
    )


def incident_refusals_get(*, incident: Incident) -> list[TimelineEntry]:
    return list(incident.timeline.filter(kind=TimelineEntry.Kind.REFUSED).order_by("-at", "-id")[:50])


def incident_playbooks_get(*, incident: Incident, limit: int = 20) -> list[PlaybookExecution]:
    """The incident's playbook executions, newest first, each with its steps in order."""
    executions = incident.playbooks.select_related("node", "run").prefetch_related("steps")
    return list(executions.order_by("-started_at", "-id")[:limit])


def playbook_active_get(*, node, run=None) -> PlaybookExecution | None:
    """The execution (not a dry run) that holds this node or run now, if any: one at a time may."""
    active = PlaybookExecution.objects.filter(status__in=PlaybookExecution.ACTIVE, dry_run=False)
    holds = Q(node=node) | Q(run=run) if run is not None else Q(node=node)
    return active.filter(holds).select_related("node", "run").first()


def response_metrics_get(*, since: datetime, until: datetime) -> dict:
    times = [
        IncidentTimes(*row)
        for row in Incident.objects.filter(started_at__gte=since, started_at__lt=until).values_list(
            "started_at", "detected_at", "acknowledged_at", "mitigated_at", "resolved_at"
        )
    ]
    return response_metrics(times, since=since, until=until)


def playbook_counts_get() -> list[tuple[str, str, bool, int]]:
    """(playbook, status, dry_run, how many executions): /metrics' playbook outcomes."""
    rows = PlaybookExecution.objects.order_by().values_list("playbook", "status", "dry_run")
    return [tuple(row) for row in rows.annotate(n=Count("id")).order_by("playbook", "status", "dry_run")]


def delivery_counts_get() -> list[tuple[str, str, int]]:
    """(endpoint name, status, how many deliveries): /metrics' webhook delivery figures."""
    rows = Delivery.objects.order_by().values_list("endpoint__name", "status").annotate(n=Count("id"))
    return [tuple(row) for row in rows.order_by("endpoint__name", "status")]


def lemon_nodes_get(*, limit: int = 20) -> tuple[int, list[FlaggedNode]]:
    """How many nodes have a firing lemon alert (too many interruptions in the window), and some with its summary."""
    lemons = Node.objects.filter(alerts__kind="lemon", alerts__status="firing")
    rows = lemons.order_by("hostname").values_list("hostname", "state", "rack", "alerts__summary")
    return lemons.count(), [FlaggedNode(*row) for row in rows[:limit]]


def time_zone_get(*, user) -> str:
    """The zone the person chose for the console's times; UTC unless they chose one, or if what is stored is no
    zone this machine knows (the form would otherwise preselect another)."""
    zone = Preference.objects.filter(user=user).values_list("time_zone", flat=True).first()
    return zone if zone in zone_names() else "UTC"


@functools.cache
def zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() - {"localtime", "Factory"})
