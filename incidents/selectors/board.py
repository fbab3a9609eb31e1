"""The incident board: lists, counts and filters, and the open incidents' figures every page's badge shows."""

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from incidents.models import Alert, Incident
from incidents.selectors.impact import (
    _impacts,
    _live_get,
    cost_per_minute_usd,
    incident_impacts_get,
    incidents_burning_get,
)
from runs.domain import hostlist
from runs.models import Run


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
