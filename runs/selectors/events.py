"""Reads of the event log: what was accepted, what waits or is quarantined, a node's events and its
rolled-up samples, and the clusters events name."""

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db.models import Count, Max, Min, Q, Sum

from runs.domain import trust
from runs.domain.cloudevents import CloudEvent
from runs.models import ApiToken, Event, EventRollup, Node, Run, TokenSource


def node_xid_events(*, node: Node, limit: int = 5000) -> list[tuple[datetime, dict]]:
    """The node's latest gpu.xid events as (time, data), newest first: enough to fold recent storms whole."""
    rows = Event.objects.filter(node_name=node.hostname, type="gpu.xid").order_by("-time", "-id")
    return list(rows.values_list("time", "data")[:limit])


def events_pending_count() -> int:
    return Event.objects.filter(applied_at__isnull=True).count()


def events_quarantined_count() -> int:
    """Events that failed to apply on their own and are out of the record until replayed (the quarantine page)."""
    return Event.objects.filter(quarantined_at__isnull=False).count()


@dataclass(frozen=True)
class EventsAccepted:
    """Events accepted by type, counted up to event id `through` (retention's pruned ones in their rollups)."""

    through: int
    by_type: dict[str, int]


def events_accepted_get(*, since: EventsAccepted | None, settle_s: float, now: datetime) -> EventsAccepted:
    """Every event accepted, by type: `since`'s counts plus the events stored after its id that were received more
    than `settle_s` ago, or, without `since`, the whole log plus the rollups of what retention pruned.

    Counting on from the last count keeps each read to the newest events (a count of the whole log is seconds at
    millions of rows). Ids are taken in insert order but committed in any order, so the count stops short of the
    last `settle_s`: an intake transaction still open that long after its insert would be missed (one holds a batch
    for well under a second); none is counted twice."""
    cutoff = now - timedelta(seconds=settle_s)
    events = Event.objects.order_by()
    if since is None:
        through = events.filter(received_at__lte=cutoff).aggregate(last=Max("id"))["last"] or 0
        counts = dict(events.filter(id__lte=through).values_list("type").annotate(n=Count("id")))
        for type_, n in EventRollup.objects.order_by().values_list("type").annotate(n=Sum("count")):
            counts[type_] = counts.get(type_, 0) + n
        return EventsAccepted(through, counts)
    newer = events.filter(id__gt=since.through)
    through = newer.filter(received_at__lte=cutoff).aggregate(last=Max("id"))["last"] or since.through
    if through == since.through:
        return since
    counts = dict(since.by_type)
    for type_, n in newer.filter(id__lte=through).values_list("type").annotate(n=Count("id")):
        counts[type_] = counts.get(type_, 0) + n
    return EventsAccepted(through, counts)


@dataclass(frozen=True)
class EventsUnapplied:
    waiting: dict[str, int]  # by type: accepted, not applied yet
    quarantined: dict[str, int]  # by type: failed to apply, out of the record until replayed
    settled_waiting: dict[str, int]  # of the waiting, those with an id up to `through`
    settled_quarantined: dict[str, int]
    oldest_waiting_at: datetime | None  # when the oldest waiting one was received: the apply lag's start


def events_unapplied_get(*, through: int) -> EventsUnapplied:
    """The events not (yet) in the record, from the partial indexes that hold only them (a quarantined event is
    marked applied); the `settled_` counts are those with an id up to `through` (events_accepted_get's), so that
    accepted minus them is what was applied."""
    waiting, quarantined, settled = Q(applied_at__isnull=True), Q(quarantined_at__isnull=False), Q(id__lte=through)
    rows = (
        Event.objects.order_by()
        .filter(waiting | quarantined)
        .values_list("type")
        .annotate(
            waiting=Count("id", filter=waiting),
            quarantined=Count("id", filter=quarantined),
            settled_waiting=Count("id", filter=waiting & settled),
            settled_quarantined=Count("id", filter=quarantined & settled),
            oldest=Min("received_at", filter=waiting),
        )
    )
    by_type = {type_: counts for type_, *counts in rows}

    def column(index: int) -> dict[str, int]:
        return {type_: counts[index] for type_, counts in by_type.items() if counts[index]}

    oldest = min((counts[4] for counts in by_type.values() if counts[4] is not None), default=None)
    return EventsUnapplied(
        waiting=column(0),
        quarantined=column(1),
        settled_waiting=column(2),
        settled_quarantined=column(3),
        oldest_waiting_at=oldest,
    )


def node_recent_events(*, node: Node, limit: int = 50) -> list[Event]:
    return list(Event.objects.filter(node_name=node.hostname).order_by("-time", "-id")[:limit])


@dataclass(frozen=True)
class DailySamples:
    """A node's raw samples of one type on one UTC day, summed by retention (runs.retention) before deletion."""

    day: date
    type: str
    count: int
    value_min: float | None
    value_mean: float | None
    value_max: float | None


def node_rollups_get(*, node: Node, days: int = 30) -> list[DailySamples]:
    """The node's rolled-up samples of its latest `days` rolled days, newest first, its GPUs and ranks together."""
    rows = (
        EventRollup.objects.filter(node_name=node.hostname)
        .values_list("day", "type")
        .annotate(Sum("count"), Min("value_min"), Sum("value_sum"), Max("value_max"))
        .order_by("-day", "type")
    )
    kept = sorted({row[0] for row in rows}, reverse=True)[:days]
    return [
        DailySamples(day, type_, n, low, total / n if low is not None and n else None, high)
        for day, type_, n, low, total, high in rows
        if day in kept
    ]


def event_clusters(events: list[CloudEvent]) -> tuple[dict[str, str], dict[str, str]]:
    """The cluster of each node and run the events name: the record's where it knows one, else the events' own
    data.cluster (runs.domain.trust.out_of_bounds reads these)."""
    nodes, runs = trust.clusters_named(events)
    hostnames = {node for e in events for _field, node in trust.named_nodes(e)}
    run_names = {e.data["run"] for e in events if isinstance(e.data.get("run"), str)}
    known_nodes, known_runs = record_clusters(hostnames=hostnames, run_names=run_names)
    return nodes | known_nodes, runs | known_runs


def record_clusters(*, hostnames, run_names) -> tuple[dict[str, str], dict[str, str]]:
    """The cluster the record gives each of these nodes and runs (those it places in none left out): two queries."""
    nodes = Node.objects.filter(hostname__in=hostnames, cluster__isnull=False).values_list("hostname", "cluster__name")
    runs = Run.objects.filter(name__in=run_names, cluster__isnull=False).values_list("name", "cluster__name")
    return dict(nodes), dict(runs)


def sources_owned_elsewhere(*, sources: set[str], token: ApiToken, now) -> set[str]:
    """Those of `sources` that a live token other than `token` is bound to (one indexed query over TokenSource)."""
    keys_of = {source: trust.source_keys(source) for source in sources}
    owners = TokenSource.objects.filter(key__in=set().union(*keys_of.values()), token__revoked_at__isnull=True)
    owners = owners.exclude(token=token).filter(Q(token__expires_at__isnull=True) | Q(token__expires_at__gt=now))
    owned_keys = set(owners.values_list("key", flat=True))
    return {source for source, keys in keys_of.items() if keys & owned_keys}
