"""Reads of the fleet record for pages and the API."""

from dataclasses import dataclass

from django.db.models import Count, Q

from .models import Cluster, Event, Interruption, Node, Run


@dataclass(frozen=True)
class ClusterSummary:
    cluster: Cluster | None
    nodes: int
    by_state: dict[str, int]


def node_states_by_cluster() -> list[ClusterSummary]:
    """Per cluster (and the nodes no cluster claims yet), how many nodes are in each state."""
    counts: dict[int | None, dict[str, int]] = {}
    for cluster_id, state, n in Node.objects.values_list("cluster_id", "state").annotate(n=Count("id")):
        counts.setdefault(cluster_id, {})[state] = n
    clusters = {c.pk: c for c in Cluster.objects.all()}
    summaries = [
        ClusterSummary(cluster, sum(counts.get(pk, {}).values()), counts.get(pk, {}))
        for pk, cluster in clusters.items()
    ]
    if None in counts:
        summaries.append(ClusterSummary(None, sum(counts[None].values()), counts[None]))
    return summaries


def runs_list(*, state: str = "") -> list[Run]:
    runs = Run.objects.select_related("cluster").annotate(
        attempt_count=Count("attempts", distinct=True),
        interruption_count=Count("interruptions", distinct=True),
        unplanned_count=Count("interruptions", filter=Q(interruptions__planned=False), distinct=True),
    )
    if state:
        runs = runs.filter(state=state)
    return list(runs.order_by("-started_at", "name"))


def events_pending_count() -> int:
    return Event.objects.filter(applied_at__isnull=True).count()


def node_recent_events(*, node: Node, limit: int = 50) -> list[Event]:
    return list(Event.objects.filter(node_name=node.hostname).order_by("-time", "-id")[:limit])


def interruptions_recent(*, limit: int = 10) -> list[Interruption]:
    return list(Interruption.objects.select_related("run", "node", "gpu").order_by("-fault_at")[:limit])
