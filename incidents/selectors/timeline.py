"""An incident's timeline as shown (a burst of alert entries folded into one) and its alerts grouped by kind."""

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max, Min, Sum

from incidents.models import Alert, Incident, TimelineEntry
from runs.models import Node


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


def incident_refusals_get(*, incident: Incident) -> list[TimelineEntry]:
    return list(incident.timeline.filter(kind=TimelineEntry.Kind.REFUSED).order_by("-at", "-id")[:50])
