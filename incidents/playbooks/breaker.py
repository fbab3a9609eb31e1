"""The circuit breaker in front of every drain (incidents/domain/playbooks.py: breaker_reason). Open, it pages a human
(the incident's severity one level up) and refuses the step.

What counts as out of service is not the reported state alone, which a scheduler's or agent's token could rewrite:
it is the union of three views. The record's reported states; the nodes FleetOps drained and has not returned
through the gate since (their return-to-service playbook succeeded), whatever is reported; and the scheduler's own
view, read from the cluster at the moment of the drain (ClusterAdapter.out_of_service), which no event can rewrite.
The drains FleetOps made in the last hour are counted apart, whatever the nodes' state says now.
"""

from datetime import timedelta

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from incidents import services
from incidents.domain.playbooks import breaker_reason
from incidents.models import StepExecution
from incidents.playbooks.clusters.base import OUT_OF_SERVICE, ClusterAdapter, RefusedError
from runs.models import Node

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


def check(*, execution, cluster, adapter: ClusterAdapter) -> None:
    """Raise RefusedError when draining the execution's node would open the breaker; a node already out passes.

    A scheduler that cannot be read raises its TransientError: the step waits rather than drain blind."""
    reported = set(Node.objects.filter(cluster=cluster, state__in=OUT_OF_SERVICE).values_list("hostname", flat=True))
    out = reported | drained_by_fleetops(cluster=cluster) | adapter.out_of_service()
    if execution.node.hostname in out:
        return
    fleet = Node.objects.filter(cluster=cluster).exclude(state="retired").count()
    drains = StepExecution.objects.filter(
        name=DRAIN_STEP,
        status=StepExecution.Status.SUCCEEDED,
        execution__dry_run=False,
        execution__node__cluster=cluster,
        finished_at__gte=timezone.now() - DRAIN_WINDOW,
    ).count()
    why = breaker_reason(
        taken_out=len(out),
        fleet=fleet,
        max_share=settings.PLAYBOOK_MAX_OUT_SHARE if cluster.max_out_share is None else cluster.max_out_share,
        max_nodes=settings.PLAYBOOK_MAX_OUT_NODES,
        drains_in_window=drains,
        max_drains=settings.PLAYBOOK_MAX_DRAINS_PER_HOUR,
    )
    if why is None:
        return
    if execution.incident_id:
        services.incident_page_human(incident=execution.incident, why=f"circuit breaker: {why}")
    raise RefusedError(f"circuit breaker open: {why}; a human must decide")
