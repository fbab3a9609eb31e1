"""The nodes of an incident as its page lists them, its playbooks, and the lemon nodes."""

from collections import Counter
from dataclasses import dataclass

from django.db.models import Q
from django.urls import reverse

from incidents.domain.alert_kinds import AlertKind
from incidents.models import Incident, PlaybookExecution
from runs.domain import hostlist
from runs.models import Node
from runs.selectors import FlaggedNode

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


def incident_playbooks_get(*, incident: Incident, limit: int = 20) -> list[PlaybookExecution]:
    """The incident's playbook executions, newest first, each with its steps in order."""
    executions = incident.playbooks.select_related("node", "run").prefetch_related("steps")
    return list(executions.order_by("-started_at", "-id")[:limit])


def playbook_active_get(*, node, run=None) -> PlaybookExecution | None:
    """The execution (not a dry run) that holds this node or run now, if any: one at a time may."""
    active = PlaybookExecution.objects.filter(status__in=PlaybookExecution.ACTIVE, dry_run=False)
    holds = Q(node=node) | Q(run=run) if run is not None else Q(node=node)
    return active.filter(holds).select_related("node", "run").first()


def lemon_nodes_get(*, limit: int = 20) -> tuple[int, list[FlaggedNode]]:
    """How many nodes have a firing lemon alert (too many interruptions in the window), and some with its summary."""
    lemons = Node.objects.filter(alerts__kind=AlertKind.LEMON, alerts__status="firing")
    rows = lemons.order_by("hostname").values_list("hostname", "state", "rack", "alerts__summary")
    return lemons.count(), [FlaggedNode(*row) for row in rows[:limit]]
