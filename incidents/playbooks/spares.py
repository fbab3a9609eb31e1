"""Spare pool sufficiency per cluster (docs/DOMAIN.md section 5): hot spares now against the smallest pool that covers
the nodes in repair, from the cluster's observed failure rate and repair time (Poisson)."""

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Min

from incidents.domain.playbooks import spares_needed
from runs import selectors
from runs.domain import advisor
from runs.models import Cluster, Event, Interruption, Node, Run


@dataclass(frozen=True)
class SparePool:
    cluster_id: int
    spares: int  # hot spares now
    needed: int  # the smallest pool with P(more failures in a repair window than spares) < target
    failures_per_hour: float
    repair_hours: float
    repair_measured: bool  # from the cluster's own repairs, or the default
    target: float
    window_days: float  # the failures counted: those of the last window_days before `now`
    failures: int = 0  # of them
    hours: float = 0.0  # what they are spread over: the window, or the cluster's record when that is shorter
    nodes: int = 0  # the cluster's nodes (not retired): no pool of it holds more
    needed_uncapped: int = 0  # what the rate alone calls for, which may be more than the cluster holds
    min_hours: float = 0.0  # the least record a rate is taken from (SPARE_MIN_RECORD_HOURS)

    @property
    def short_record(self) -> bool:
        """The cluster has run for less than the window: the rate comes from a shorter record (and says so)."""
        return self.hours < self.window_days * 24

    @property
    def enough_record(self) -> bool:
        """Record enough to size the pool: a rate from an hour of a new cluster (two failures: 2 an hour) would ask
        for more spares than most clusters have nodes."""
        return self.hours >= self.min_hours

    @property
    def capped(self) -> bool:
        """The rate calls for more spares than the cluster has nodes: needed is all of them, and no pool suffices."""
        return self.needed_uncapped > self.needed

    @property
    def short(self) -> bool:
        return self.enough_record and self.spares < self.needed


def fleet_spares(pools: dict[int, SparePool]) -> dict:
    """The fleet's line of the clusters' pools (spares serve their own cluster, so the needs add up): the weekly
    report's figure, from the same pools the overview shows a cluster at a time."""
    values = list(pools.values())
    sized = [p for p in values if p.enough_record]
    needed, hot = sum(p.needed for p in sized), sum(p.spares for p in values)
    return {
        "failures_per_hour": sum(p.failures_per_hour for p in values),
        "repair_hours": max((p.repair_hours for p in values), default=settings.REPAIR_HOURS_DEFAULT),
        "repair_measured": bool(values) and all(p.repair_measured for p in values),
        "target": values[0].target if values else SPARE_TARGET,
        "window_days": values[0].window_days if values else 0,
        "needed": needed,
        "hot_spares": hot,
        "sufficient": hot >= needed,
        "unsized": len(values) - len(sized),  # clusters with too little record to size: in no sum above
        "min_hours": settings.SPARE_MIN_RECORD_HOURS,
    }


SPARE_TARGET = 0.01  # P(more failures within a repair window than spares) a pool must stay under


def spare_pools_get(*, now: datetime, window_days: float = 30, target: float = SPARE_TARGET) -> dict[int, SparePool]:
    """Per cluster: hot spares now against what its failure rate (over the window) and repair time call for.

    The same few queries however many clusters. The repair times, read from every node's node.state history, are
    kept in the cache for SPARE_REPAIR_CACHE_S: a median of repairs that take days moves by hours, not seconds,
    and the overview asks for it on every load.
    """
    since = now - timedelta(days=window_days)
    # Both ends of the window: a report made as of a past week counts neither the failures nor the runs after it.
    failures = _per_cluster(
        Interruption.objects.filter(planned=False, fault_at__gte=since, fault_at__lt=now),
        "run__cluster_id",
        n=Count("id"),
    )
    first_start = _per_cluster(Run.objects.filter(started_at__lt=now), "cluster_id", n=Min("started_at"))
    spares = _per_cluster(Node.objects.filter(state="hot_spare"), "cluster_id", n=Count("id"))
    nodes = _per_cluster(Node.objects.exclude(state="retired"), "cluster_id", n=Count("id"))
    repairs = cache.get_or_set("spare-pools:repair-hours", _repair_hours, settings.SPARE_REPAIR_CACHE_S)
    pools = {}
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        first = first_start.get(cluster_id)
        hours = max(((now - max(first, since)).total_seconds() / 3600) if first else 0.0, 1.0)
        measured = repairs.get(cluster_id, [])
        repair_hours = statistics.median(measured) if measured else settings.REPAIR_HOURS_DEFAULT
        rate = failures.get(cluster_id, 0) / hours
        needed = spares_needed(failures_per_hour=rate, repair_hours=repair_hours, target=target)
        size = nodes.get(cluster_id, 0)
        pools[cluster_id] = SparePool(
            cluster_id,
            spares.get(cluster_id, 0),
            min(needed, size),
            rate,
            repair_hours,
            bool(measured),
            target,
            window_days,
            failures.get(cluster_id, 0),
            hours,
            size,
            needed,
            settings.SPARE_MIN_RECORD_HOURS,
        )
    return pools


def _per_cluster(rows, cluster_field: str, **aggregate) -> dict:
    """{cluster id: the one aggregate} over `rows`, grouped by `cluster_field`: one query for every cluster."""
    ((name, _),) = aggregate.items()
    grouped = rows.filter(**{f"{cluster_field}__isnull": False}).values(cluster_field).annotate(**aggregate)
    return dict(grouped.order_by().values_list(cluster_field, name))


def _repair_hours() -> dict[int, list[float]]:
    """Per cluster, how long its nodes stayed in repair: in_repair to the next hot_spare or in_service."""
    cluster_of = dict(Node.objects.filter(cluster__isnull=False).values_list("hostname", "cluster_id"))
    entered: dict[str, datetime] = {}
    durations: dict[int, list[float]] = {}
    # Only the state, not the whole data document, and only the three states that matter: a long run's cluster has
    # thousands of node.state events.
    rows = Event.objects.filter(
        type="node.state",
        node_name__in=Node.objects.filter(cluster__isnull=False).values("hostname"),
        data__state__in=("in_repair", "hot_spare", "in_service"),
    ).order_by("time", "id")
    for hostname, time, state in rows.values_list("node_name", "time", "data__state"):
        if state == "in_repair":
            entered.setdefault(hostname, time)
        elif hostname in entered and hostname in cluster_of:
            hours = (time - entered.pop(hostname)).total_seconds() / 3600
            durations.setdefault(cluster_of[hostname], []).append(hours)
    return durations


@dataclass(frozen=True)
class ShrinkPrice:
    """advisor.shrink_or_wait for one job, with what it read: the wait is the cluster's repair time (how long until
    the drained node, or another, passes the gate again), the restart the run's own median (or the default)."""

    price: advisor.ShrinkOrWait
    wait_s: float
    restart_s: float
    wait_measured: bool
    restart_measured: bool


def shrink_price_get(*, run: Run, cluster: Cluster, nodes: int, lost: int, now: datetime) -> ShrinkPrice:
    pool = spare_pools_get(now=now).get(cluster.pk)
    wait_s = (pool.repair_hours if pool else settings.REPAIR_HOURS_DEFAULT) * 3600
    measured = selectors.run_restart_s_get(run=run)
    restart_s = measured if measured is not None else settings.RESTART_S_DEFAULT
    price = advisor.shrink_or_wait(nodes=nodes, lost=lost, wait_s=wait_s, restart_s=restart_s)
    return ShrinkPrice(price, wait_s, restart_s, bool(pool and pool.repair_measured), measured is not None)
