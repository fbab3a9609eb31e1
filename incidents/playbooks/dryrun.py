"""A dry run: each step of a playbook put to the checks the real run would put it to, and nothing done.

The same reads and the same decisions as the real step (incidents/playbooks/steps.py): the circuit breaker's, from
the scheduler's census (computed, never admitted, nobody paged); the spare pool as the scheduler lists it; the job as
it stands; the approval the step would wait for; and, before the first step, the one-execution-per-node rule. What
the step would change is described (ClusterAdapter.describe_plan), never done. A step the real run would be refused
at raises as the real one would, and the engine ends the dry run there ("would be refused at step N"). What a step
only learns from an earlier step's change (the job after its requeue, a health check's result, a spare back from
repair) is described, not foretold: the plan says what it would wait for.
"""

from incidents.domain.playbooks import approver_for
from incidents.playbooks import breaker, steps
from incidents.playbooks.clusters import adapter_for
from incidents.playbooks.clusters.base import RefusedError, check_requeueable
from incidents.selectors import playbook_active_get
from runs.domain import hostlist


def refusal_at_start(*, node, run) -> str | None:
    """Why the real run would not start (another execution holds the node or run), or None."""
    active = playbook_active_get(node=node, run=run)
    if active is None:
        return None
    return f"{active.playbook} #{active.pk} is already active on {active.node or active.run}"


def evaluate(execution, step, spec: dict) -> dict:
    """The step's output in a dry run: its plan, what the reads found ("finding"), and the role whose approval the
    real run would wait for ("approval"), as approver_for gives it at the incident's severity now."""
    adapter = adapter_for(steps.cluster_of(execution))
    check = CHECKS.get(spec["operation"])
    output = {"plan": PLANS[spec["operation"]](execution, adapter, spec)}
    if check is not None:
        output.update(check(execution, step, adapter, spec))
    severity = execution.incident.severity if execution.incident_id else None
    approver = approver_for(action=spec["action"], severity=severity)
    if approver:
        output["approval"] = approver
    return output


def _drain(execution, step, adapter, spec) -> dict:
    node = adapter.node_status(execution.node.hostname)  # an unknown node: NotFoundError, as the drain's own read
    decided = breaker.check(execution=execution, cluster=steps.cluster_of(execution), adapter=adapter)
    return {"finding": f"{node.name} is {node.state} ({node.raw_state}); {decided}"}


def _spare(execution, step, adapter, spec) -> dict:
    spares = steps.spares_for(execution, adapter)
    if not spares:
        where, retries = steps.cluster_of(execution).name, spec.get("retries", 3)
        raise RefusedError(f"{steps.NO_SPARE} in {where}'s spare pool; the real run looks {retries} times, then stops")
    more = f", {len(spares) - 1} more free" if len(spares) > 1 else ""
    return {"finding": f"spare {spares[0]} is free{more}", "spare": spares[0]}


def _job(execution, step, adapter, spec) -> dict:
    job = check_requeueable(adapter.job_status(steps.job_id_of(execution)))
    return {"finding": f"job {job.job_id} is {job.raw_state} on {hostlist.fold(job.nodes) or 'no node'}"}


def _choose(execution, step, adapter, spec) -> dict:
    """The choice itself only reads (the spare pool, the job, the advisor's pricing): made as the real run makes it."""
    chosen = steps.OPERATIONS["choose_shrink"](execution, step, spec)
    return {"finding": chosen["summary"], "decision": chosen["decision"]}


def _picked(execution) -> str:
    """The spare the dry run's pick spare found, for the requeue's plan."""
    picked = execution.steps.filter(name="pick spare").values_list("output", flat=True).first() or {}
    return picked.get("spare") or "<the spare>"


CHECKS = {
    "drain_node": _drain,
    "pick_spare": _spare,
    "requeue_job": _job,
    "choose_shrink": _choose,
}


def _node(execution) -> str | None:
    return execution.node.hostname if execution.node else None


def _job_id(execution) -> str | None:
    return steps.job_id_of(execution) if execution.run else None


PLANS = {
    "drain_node": lambda ex, adapter, spec: adapter.describe_plan(
        "ensure_drained", name=_node(ex), reason=steps.reason_of(ex)
    ),
    "pick_spare": lambda ex, adapter, spec: adapter.describe_plan("list_spares"),
    "requeue_job": lambda ex, adapter, spec: adapter.describe_plan(
        "requeue_job", job_id=_job_id(ex), exclude=[_node(ex)], onto=[_picked(ex)]
    ),
    "wait_job_running": lambda ex, adapter, spec: (
        f"{adapter.describe_plan('job_status', job_id=_job_id(ex))}, until it runs off {_node(ex)}"
    ),
    "send_to_repair": lambda ex, adapter, spec: adapter.describe_plan("ensure_in_pool", name=_node(ex), pool="repair"),
    "health_check": lambda ex, adapter, spec: (
        f"{adapter.describe_plan('health_check', name=_node(ex), check=spec.get('check'))}; its result decides"
    ),
    "prepare_checks": lambda ex, adapter, spec: adapter.plan_ready_for_checks(_node(ex)),
    "return_to_pool": lambda ex, adapter, spec: adapter.describe_plan("ensure_resumed", name=_node(ex)),
    "choose_shrink": lambda ex, adapter, spec: (
        f"{adapter.describe_plan('list_spares')}; {adapter.describe_plan('job_status', job_id=_job_id(ex))}"
        "; a free spare replaces the node, else shrink or wait by the advisor's pricing"
        + (f" (chosen: {spec['choice']})" if spec.get("choice") else "")
    ),
    "shrink_job": lambda ex, adapter, spec: adapter.describe_plan(
        "requeue_job", job_id=_job_id(ex), exclude=[_node(ex)], nodes="<its nodes less 1>"
    ),
    "wait_spare": lambda ex, adapter, spec: (
        f"{adapter.describe_plan('list_spares')}, every {spec.get('poll_s', 60):g} s until one is ready"
    ),
    "grow_job": lambda ex, adapter, spec: adapter.describe_plan(
        "requeue_job", job_id=_job_id(ex), onto=["<the spare>"], nodes="<its full size>"
    ),
}
