"""An incident's recommended action with its automation read (incidents/domain/advice.py): the one the incident page,
the board, the API and the CLI show."""

from incidents.domain import advice as rules
from incidents.models import Incident, PlaybookExecution


def incidents_advice_get(*, incidents: list[Incident]) -> dict[int, rules.Advice]:
    """Each incident's advice, by incident id, in two queries however many (the board's rows, the API's list)."""
    executions: dict[int, list[PlaybookExecution]] = {incident.pk: [] for incident in incidents}
    rows = (
        PlaybookExecution.objects.filter(incident__in=list(executions), dry_run=False)
        .select_related("node")
        .prefetch_related("steps")
        .order_by("-started_at", "-pk")
    )
    for row in rows:
        executions[row.incident_id].append(row)
    return {incident.pk: advice_of(incident=incident, executions=executions[incident.pk]) for incident in incidents}


def incident_advice_get(*, incident: Incident) -> rules.Advice:
    return incidents_advice_get(incidents=[incident])[incident.pk]


def advice_of(*, incident: Incident, executions: list[PlaybookExecution]) -> rules.Advice:
    """The advice from executions already read (the incident page's playbooks, newest first, steps prefetched); its
    dry runs are left out: they did nothing."""
    read = [_execution(row) for row in executions if not row.dry_run]
    return rules.advise(alerts=incident.recommended_action, executions=read, open_=incident.is_open)


def _execution(row: PlaybookExecution) -> rules.Execution:
    specs = row.definition.get("steps", [])
    steps = tuple(
        rules.Step(
            name=step.name,
            operation=specs[step.index]["operation"] if step.index < len(specs) else "",
            status=step.status,
            output=step.output or {},
            error=step.error,
            approver_role=step.approver_role,
        )
        for step in sorted(row.steps.all(), key=lambda s: s.index)
    )
    node = row.node.hostname if row.node else ""
    return rules.Execution(pk=row.pk, playbook=row.playbook, status=row.status, node=node, steps=steps, error=row.error)
