"""What a token may speak for: its role, its clusters, its node, its sources (docs/EVENTS.md, "Token bounds").

Pure: no Django import. The intake asks `out_of_bounds` after the events parsed and before anything is stored; a
batch with one event outside the token's bounds is refused whole (403), each such event named with the bound it
crosses. The record supplies what the events alone cannot say: the cluster a known node or run belongs to. The
record's word wins over the event's, so a token for cluster A cannot move a node of cluster B by naming A.
"""

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from runs.domain.cloudevents import CloudEvent, Problem

SCHEDULER, AGENT, TRAINER = "scheduler", "agent", "trainer"
ROLES = (SCHEDULER, AGENT, TRAINER)
# The event types each role may send. A scheduler speaks for runs and nodes of its clusters; a node agent for its own
# node and GPUs; a training job for its runs. Node and GPU state (node.state, gpu.*) never come from a training job:
# the circuit breaker and the detectors read them.
_NODE_TYPES = ("node.", "gpu.", "healthcheck.")
_RUN_TYPES = ("run.", "checkpoint.", "rank.")
ROLE_TYPES = {SCHEDULER: _NODE_TYPES + _RUN_TYPES, AGENT: _NODE_TYPES, TRAINER: _RUN_TYPES}


@dataclass(frozen=True)
class Bounds:
    role: str
    clusters: frozenset[str] = frozenset()  # empty: every cluster
    node: str = ""  # a node agent's own node; empty: any node
    sources: tuple[str, ...] = ()  # the CloudEvents sources it may use, each with what lies under it; empty: any

    def describe(self) -> str:
        parts = [f"role {self.role}"]
        if self.clusters:
            parts.append("cluster " + ", ".join(sorted(self.clusters)))
        if self.node:
            parts.append(f"node {self.node}")
        if self.sources:
            parts.append("source " + ", ".join(self.sources))
        return "; ".join(parts)


def source_allowed(source: str, allowed: Iterable[str]) -> bool:
    """`source` is one of `allowed` or lies under one: "/slurm/a" allows "/slurm/a" and "/slurm/a/prolog"."""
    return any(source == bound or source.startswith(bound.rstrip("/") + "/") for bound in allowed)


def source_key(bound: str) -> str:
    """How a source bound is kept to be found again: without trailing slashes ("/slurm/a/" covers what "/slurm/a"
    does)."""
    return bound.rstrip("/")


def source_keys(source: str) -> set[str]:
    """The keys (source_key) of every bound that covers `source`: the source itself and each part of it that ends
    before a slash. One indexed lookup of these finds who owns a source, however many tokens there are."""
    return {source} | {source[:i] for i, char in enumerate(source) if char == "/"}


def clusters_named(events: Iterable[CloudEvent]) -> tuple[dict[str, str], dict[str, str]]:
    """The cluster each node and run is given in the events themselves (data.cluster), first mention kept."""
    nodes: dict[str, str] = {}
    runs: dict[str, str] = {}
    for event in events:
        cluster = event.data.get("cluster")
        if not cluster:
            continue
        if event.type.startswith(_RUN_TYPES) and event.data.get("run"):
            runs.setdefault(event.data["run"], cluster)
        elif event.data.get("node"):
            nodes.setdefault(event.data["node"], cluster)
    return nodes, runs


def out_of_bounds(
    events: list[CloudEvent],
    bounds: Bounds,
    *,
    node_clusters: Mapping[str, str],
    run_clusters: Mapping[str, str],
    owned_sources: Collection[str] = (),
) -> list[Problem]:
    """Every event of the batch outside `bounds`, one problem each: the first bound it crosses.

    node_clusters and run_clusters: the cluster of each node and run the events name, from the record where it
    knows them, else from the events (clusters_named); a name missing from both has no known cluster.
    owned_sources: the events' sources that another token is bound to. A token bound to no source may not use them:
    (source, id) is the dedupe key, so an event posted first under another sender's source and predictable id would
    make the rightful event a duplicate that never arrives.
    """
    problems = []
    for index, event in enumerate(events):
        reason = _crossed(event, bounds, node_clusters, run_clusters, owned_sources)
        if reason is not None:
            problems.append(Problem(index, reason[0], f"{reason[1]} (this token: {bounds.describe()})"))
    return problems


def named_nodes(event: CloudEvent) -> list[tuple[str, str]]:
    """(field, hostname) of every node the event names: its data.node, and each of a start's data.nodes."""
    named = [("data.node", event.data["node"])] if isinstance(event.data.get("node"), str) else []
    nodes = event.data.get("nodes")
    if isinstance(nodes, list):
        named += [(f"data.nodes[{i}]", node) for i, node in enumerate(nodes) if isinstance(node, str)]
    return named


def _crossed(event, bounds, node_clusters, run_clusters, owned_sources) -> tuple[str, str] | None:
    if bounds.sources and not source_allowed(event.source, bounds.sources):
        return "source", f"this token may not send from source {event.source!r}"
    if not bounds.sources and event.source in owned_sources:
        return "source", f"source {event.source!r} belongs to another token: only a token bound to it sends from it"
    if not event.type.startswith(ROLE_TYPES[bounds.role]):
        return "type", f"a token of role {bounds.role} may not send {event.type}"
    run, nodes = event.data.get("run"), named_nodes(event)
    if bounds.node:
        for field, node in nodes or [("data.node", None)]:
            if node != bounds.node:
                return field, f"a node agent speaks for its own node only, not {node!r}"
    is_run = event.type.startswith(_RUN_TYPES)
    # A run event's nodes join its run's cluster when the record has none for them (a start's nodes, new ones).
    run_cluster = run_clusters.get(run) if is_run else None
    if bounds.role == TRAINER and run_cluster is not None:
        # A training job speaks for its run, and through it for the nodes its run is on: never another cluster's
        # (its run.failed naming one would have a playbook drain that node through its own cluster).
        for field, node in nodes:
            if node_clusters.get(node, run_cluster) != run_cluster:
                return field, (
                    f"node {node} is in cluster {node_clusters[node]}, not in run {run}'s cluster {run_cluster}: "
                    "a training job names the nodes of its own run's cluster only"
                )
    if not bounds.clusters:
        return None
    subjects = [("data.run", f"run {run}", run_cluster)] if is_run else []
    subjects += [(field, f"node {node}", node_clusters.get(node, run_cluster)) for field, node in nodes]
    return _outside_clusters(subjects, bounds, unknown="; name it in data.cluster")


def _outside_clusters(subjects, bounds: Bounds, *, unknown: str) -> tuple[str, str] | None:
    """The first of (field, name, cluster or None) whose cluster is unknown or not one of the token's clusters."""
    for field, name, cluster in subjects:
        if cluster is None:
            return field, f"the cluster of {name} is not known{unknown}"
        if cluster not in bounds.clusters:
            return field, f"{name} is in cluster {cluster}, which this token does not speak for"
    return None


def subjects_crossed(
    bounds: Bounds,
    *,
    node: str | None,
    run: str | None,
    node_clusters: Mapping[str, str],
    run_clusters: Mapping[str, str],
) -> tuple[str, str] | None:
    """An alert from another system (Alertmanager, PagerDuty) about `node` and `run`, held to the bounds an event
    about them would be: ("node" or "run", why) for the first bound it crosses, else None. An alert about a node is a
    node's state, which a training job never reports; the record alone says a node's or run's cluster."""
    if node is not None and not any(prefix.startswith("node.") for prefix in ROLE_TYPES[bounds.role]):
        return "node", f"a token of role {bounds.role} may not report alerts about a node ({node})"
    if node is None and run is not None and not any(prefix.startswith("run.") for prefix in ROLE_TYPES[bounds.role]):
        return "run", f"a token of role {bounds.role} may not report alerts about a run ({run})"
    if bounds.node and node != bounds.node:
        return "node", f"a node agent speaks for its own node only, not {node!r}"
    if not bounds.clusters:
        return None
    if node is None and run is None:
        return "node", "the alert names no node or run, and this token speaks only for its clusters' nodes and runs"
    subjects = [(field, f"{field} {name}", clusters.get(name)) for field, name, clusters in (
        ("node", node, node_clusters), ("run", run, run_clusters)) if name is not None]  # fmt: skip
    return _outside_clusters(subjects, bounds, unknown=" to FleetOps")
