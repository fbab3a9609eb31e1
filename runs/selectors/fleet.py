"""Reads of the fleet: clusters, racks, nodes and runs, as lists and counts."""

from dataclasses import dataclass

from django.db.models import Count, F, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce

from runs.domain import hostlist
from runs.models import Attempt, Cluster, Interruption, Node, Run


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


@dataclass(frozen=True)
class RackRow:
    cluster: str  # "" for nodes no cluster claims yet
    rack: str  # "" for the nodes of the cluster without a rack
    nodes: list[tuple[str, str]]  # (hostname, state), in natural hostname order


def node_grid_get() -> list[RackRow]:
    """Every node's state, one row per rack (clusters in name order, unracked nodes last): one query, no model rows.

    Kept to a single values_list so the overview stays light at thousands of nodes.
    """
    racks: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for hostname, state, rack, cluster in Node.objects.values_list("hostname", "state", "rack", "cluster__name"):
        racks.setdefault((cluster or "", rack), []).append((hostname, state))
    natural = hostlist.natural
    order = sorted(racks, key=lambda key: (key[0] == "", natural(key[0]), key[1] == "", natural(key[1])))
    return [RackRow(c, r, sorted(racks[c, r], key=lambda node: natural(node[0]))) for c, r in order]


@dataclass(frozen=True)
class FlaggedNode:
    hostname: str
    state: str
    rack: str
    reason: str

    @property
    def state_label(self) -> str:
        return self.state.replace("_", " ")


def suspect_nodes_get(*, limit: int = 20) -> tuple[int, list[FlaggedNode]]:
    """How many nodes are suspect, and the latest flagged of them with the reason they were flagged."""
    suspects = Node.objects.filter(state="suspect")
    rows = suspects.order_by("-state_changed_at", "hostname").values_list("hostname", "state", "rack", "state_reason")
    return suspects.count(), [FlaggedNode(*row) for row in rows[:limit]]


def _count_per_run(rows) -> Coalesce:
    """COUNT(*) of `rows` (a queryset with a `run` foreign key) for the outer query's run, as a subquery."""
    counted = rows.filter(run_id=OuterRef("pk")).order_by().values("run_id").annotate(n=Count("*")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def runs_list(*, state: str = "", first: int = 0, limit: int | None = None) -> list[Run]:
    """Runs newest first (not started yet at the top), rows [first, first + limit), each with its counts."""
    # Subqueries, not joins: joining attempts and interruptions together multiplies them (478 x 477 rows for a
    # 54-day run) before COUNT(DISTINCT) undoes it, ~0.6 s. The counts are computed for the rows of the page only.
    runs = Run.objects.select_related("cluster").annotate(
        attempt_count=_count_per_run(Attempt.objects.all()),
        interruption_count=_count_per_run(Interruption.objects.all()),
        unplanned_count=_count_per_run(Interruption.objects.filter(planned=False)),
    )
    if state:
        runs = runs.filter(state=state)
    # The id last: a page (a slice) must not swap runs started at the same instant.
    runs = runs.order_by(F("started_at").desc(nulls_first=True), "name", "id")
    return list(runs[first : None if limit is None else first + limit])


def runs_count(*, state: str = "") -> int:
    runs = Run.objects.all()
    return (runs.filter(state=state) if state else runs).count()


def attempts_latest(*, run: Run, limit: int = 20) -> list[Attempt]:
    """The run's latest attempts, each with node_count. The count is a subquery a row: a join and GROUP BY would
    count the nodes of every attempt before the limit (a 54-day run: 478 attempts of 2,048 nodes, ~1 s)."""
    nodes = Attempt.nodes.through.objects.filter(attempt_id=OuterRef("pk")).order_by().values("attempt_id")
    count = Subquery(nodes.annotate(n=Count("*")).values("n"), output_field=IntegerField())
    return list(run.attempts.annotate(node_count=Coalesce(count, 0)).order_by("-number")[:limit])


def interruptions_recent(*, limit: int = 10) -> list[Interruption]:
    return list(Interruption.objects.select_related("run", "node", "gpu").order_by("-fault_at")[:limit])


def runs_gpus_capped(runs) -> list[Run]:
    """The runs that claim more GPUs than their nodes hold, each counted at what its nodes hold (the fleet's note)."""
    return [run for run in runs if run.gpus_claimed is not None and run.gpus_claimed > run.gpu_count]
