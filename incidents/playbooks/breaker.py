"""The circuit breaker in front of every drain (incidents/domain/playbooks.py: BreakerFigures). Open, it pages a human
(the incident's severity one level up) and refuses the step.

What counts as out of service is not the reported state alone, which a scheduler's or agent's token could rewrite:
it is the union of three views. The record's reported states; the nodes FleetOps drained and has not returned
through the gate since (their return-to-service playbook succeeded), whatever is reported; and the scheduler's own
view, read from the cluster at the moment of the drain (ClusterAdapter.census), which no event can rewrite. The
fleet the share is taken of is the scheduler's own node list from the same read, not the record's node rows, which
events add to. The drains FleetOps made in the last hour are counted apart, whatever the nodes' state says now.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from incidents import services
from incidents.domain.playbooks import BreakerFigures
from incidents.models import StepExecution
from incidents.playbooks.clusters.base import OUT_OF_SERVICE, ClusterAdapter, RefusedError
from runs.models import Cluster, Node

DRAIN_STEP, RETURN_STEP = "drain", "return to spares"  # the drain-and-replace and return-to-service steps
DRAIN_WINDOW = timedelta(hours=1)


def drained_by_fleetops(*, cluster) -> set[str]:
    """Nodes of the cluster FleetOps drained and has not returned through the gate since: their last drain step is
    later than their last return-to-service step."""
    latest = (
        StepExecution.objects.filter(
            status=StepExecution.Status.SUCCEEDED,
            execution__dry_run=False,
            execution__node__cluster=cluster,
            name__in=[DRAIN_STEP, RETURN_STEP],
            finished_at__isnull=False,
        )
        .order_by()
        .values("execution__node__hostname", "name")
        .annotate(at=Max("finished_at"))
        .values_list("execution__node__hostname", "name", "at")
    )
    last = {(hostname, name): at for hostname, name, at in latest}
    return {
        host
        for host, name in last
        if name == DRAIN_STEP and ((host, RETURN_STEP) not in last or last[(host, RETURN_STEP)] < last[(host, name)])
    }


def check(*, execution, cluster, adapter: ClusterAdapter, step=None) -> str:
    """Raise RefusedError when draining the execution's node would open the breaker; a node already out passes.
    Returns what it decided on, in words (BreakerFigures.numbers), for the step's output and a dry run.

    One decision at a time per cluster (its row locked): a drain let through is admitted (its running `step` marked)
    before the lock is let go, and the next decision counts it out of service though the scheduler may not have
    drained it yet; so drains decided at once, when many faults come together, are held to the limit as one after
    another would be. A dry run gets the same decision from the same reads, and leaves no trace: nothing admitted,
    nobody paged. A scheduler that cannot be read raises its TransientError: the step waits rather than drain blind."""
    with transaction.atomic():
        list(Cluster.objects.select_for_update().filter(pk=cluster.pk).values_list("pk"))
        admitted = set(
            StepExecution.objects.filter(
                name=DRAIN_STEP,
                status=StepExecution.Status.RUNNING,
                output__admitted=True,
                execution__dry_run=False,
                execution__node__cluster=cluster,
            )
            .exclude(execution__node=execution.node)  # its own drain, run again after a worker died
            .values_list("execution__node__hostname", flat=True)
        )
        reported = set(
            Node.objects.filter(cluster=cluster, state__in=OUT_OF_SERVICE).values_list("hostname", flat=True)
        )
        census = adapter.census()
        # The fleet is the scheduler's node list, never the record's rows, which any run event naming a new host
        # adds to; of what the record says is out, only the scheduler's nodes count (a name it does not know is no
        # node of this cluster, and would only stop the drains it makes up the count for).
        out = ((reported | drained_by_fleetops(cluster=cluster) | admitted) & census.nodes) | census.out
        if execution.node.hostname in out:
            return f"{execution.node.hostname} is out of service already: the drain takes nothing more out"
        drains = StepExecution.objects.filter(
            name=DRAIN_STEP,
            status=StepExecution.Status.SUCCEEDED,
            execution__dry_run=False,
            execution__node__cluster=cluster,
            finished_at__gte=timezone.now() - DRAIN_WINDOW,
        ).count()
        figures = BreakerFigures(
            taken_out=len(out),
            fleet=len(census.nodes),
            max_share=settings.PLAYBOOK_MAX_OUT_SHARE if cluster.max_out_share is None else cluster.max_out_share,
            max_nodes=settings.PLAYBOOK_MAX_OUT_NODES,
            drains_in_window=drains + len(admitted - reported),
            max_drains=settings.PLAYBOOK_MAX_DRAINS_PER_HOUR,
        )
        why = figures.reason()
        if why is None:
            if step is not None and not execution.dry_run:
                StepExecution.objects.filter(pk=step.pk).update(output={"admitted": True})
            return f"circuit breaker closed ({figures.numbers()})"
    if execution.incident_id and not execution.dry_run:
        services.incident_page_human(incident=execution.incident, why=f"circuit breaker: {why}")
    raise RefusedError(f"circuit breaker open: {why}; a human must decide")
