"""The circuit breaker in front of every drain: a playbook may not take more than PLAYBOOK_MAX_OUT_SHARE of a cluster's
nodes out of service. Open, it pages a human (the incident's severity one level up) and refuses the step."""

from django.conf import settings

from incidents import services
from incidents.domain.playbooks import breaker_open
from incidents.playbooks.clusters.base import RefusedError
from runs.models import Node

OUT_OF_SERVICE = ["cordoned", "draining", "in_repair"]


def check(*, execution, cluster) -> None:
    """Raise RefusedError when draining the execution's node would open the breaker; a node already out passes."""
    taken_out = Node.objects.filter(cluster=cluster, state__in=OUT_OF_SERVICE).count()
    fleet = Node.objects.filter(cluster=cluster).exclude(state="retired").count()
    if execution.node.state in OUT_OF_SERVICE or not breaker_open(
        taken_out=taken_out, fleet=fleet, max_share=settings.PLAYBOOK_MAX_OUT_SHARE
    ):
        return
    if execution.incident_id:
        services.incident_page_human(
            incident=execution.incident, why=f"circuit breaker: {taken_out} of {fleet} nodes already out of service"
        )
    raise RefusedError(
        f"circuit breaker open: {taken_out} of {fleet} nodes already out of service "
        f"(at most {settings.PLAYBOOK_MAX_OUT_SHARE:.0%}); a human must decide"
    )
