"""The playbook steps' operations: each an idempotent ensure-call through the cluster adapter, returning what it
found or did (the step's output). A step whose worker died is run again as it is: ensure-calls change nothing twice.
"""

import math
import time

from django.utils import timezone

from incidents import services
from incidents.domain.alert_kinds import AlertKind
from incidents.domain.playbooks import OWN_REASON_PREFIX, PlaybookError, StillWaiting
from incidents.models import PlaybookExecution, StepExecution
from incidents.playbooks import breaker, spares
from incidents.playbooks.clusters import adapter_for
from incidents.playbooks.clusters.base import RefusedError, TransientError
from runs.domain import hostlist
from runs.domain.cloudevents import SPECVERSION, format_time, parse_time
from runs.models import Attempt
from runs.services import own_events_ingest

PLAYBOOK_SOURCE = "fleetops/playbook"


def lease_renew(execution: PlaybookExecution) -> None:
    """Renew the lease on the step in hand, from a step that waits on the cluster for a while."""
    PlaybookExecution.objects.filter(pk=execution.pk).update(heartbeat_at=timezone.now())


def cluster_of(execution):
    node, run = execution.node, execution.run
    cluster = (node.cluster if node else None) or (run.cluster if run else None)
    if cluster is None:
        raise PlaybookError("The node and run belong to no known cluster: nothing to act on.")
    return cluster


def reason_of(execution) -> str:
    incident = execution.incident
    prefix = OWN_REASON_PREFIX
    return f"{prefix}#{incident.pk}: {incident.title}"[:200] if incident else f"{prefix}playbook #{execution.pk}"


def job_id_of(execution) -> str:
    attempt = execution.run.attempts.order_by("-number").first() if execution.run else None
    if attempt is None:
        raise PlaybookError("The run has no scheduler job to requeue.")
    return attempt.job_id


def _drain_node(execution, step, spec) -> dict:
    cluster = cluster_of(execution)
    adapter = adapter_for(cluster)
    decided = breaker.check(execution=execution, cluster=cluster, adapter=adapter, step=step)
    outcome = adapter.ensure_drained(execution.node.hostname, reason_of(execution))
    raw = outcome.node.raw_state if outcome.node else ""
    if execution.incident_id and execution.incident.run_id is None:  # a node's incident: out of service stops the harm
        services.incident_mitigate(
            incident=execution.incident, text=f"{execution.node.hostname} out of service: {outcome.summary}"
        )
    return {"summary": outcome.summary, "state": raw, "changed": outcome.changed, "breaker": decided}


NO_SPARE = "no hot spare is free"


def spares_for(execution, adapter) -> list[str]:
    """The spares pick spare chooses from (the first), as the scheduler lists its spare pool: a dry run asks too."""
    return [spare.name for spare in adapter.list_spares() if spare.name != execution.node.hostname]


def _pick_spare(execution, step, spec) -> dict:
    if step.output.get("spare"):
        return step.output
    spares = spares_for(execution, adapter_for(cluster_of(execution)))
    if not spares:
        raise TransientError(f"{NO_SPARE}: waiting for one (shrink-and-continue goes on without it)")
    return {"summary": f"spare {spares[0]}", "spare": spares[0]}


def _spare(execution) -> str:
    return execution.steps.get(name="pick spare").output["spare"]


def _requeue_job(execution, step, spec) -> dict:
    return _requeue(execution, step, onto=[_spare(execution)])


def _requeue(execution, step, *, onto: list[str], nodes: int | None = None, grow: bool = False) -> dict:
    """Requeue the run's job off the bad node (onto `onto`, on `nodes` nodes), once, and write back the attempt it
    ended: a fault's (the bad node's), or a planned stop when it grows back onto a spare (which may be the bad node
    itself, repaired and through the gate)."""
    job, adapter = job_id_of(execution), adapter_for(cluster_of(execution))
    seen = step.output.get("seen_restart_count")
    if seen is None:
        # Written down before the requeue: a worker that dies after requeueing leaves this behind, and the
        # retry then finds the job restarted already instead of requeueing it a second time.
        seen = adapter.job_status(job).restart_count
        # And which attempt the requeue will end, if nobody said it failed: its run.failed is written once the
        # requeue is done (a refused requeue ends nothing), also by a retry that finds it done already.
        running = execution.run is not None and execution.run.state == execution.run.State.RUNNING
        attempt = execution.run.attempts.order_by("-number").first() if running else None
        step.output = {
            "seen_restart_count": seen,
            "ends_attempt": attempt.number if attempt else None,
            "requeued_at": format_time(timezone.now(), "microseconds"),  # at the latest: the call comes next
        }
        StepExecution.objects.filter(pk=step.pk).update(output=step.output)
    exclude = [name for name in [execution.node.hostname] if name not in onto]
    outcome = adapter.requeue_job(job, seen_restart_count=seen, exclude=exclude, onto=onto, nodes=nodes)
    if step.output.get("ends_attempt") is not None:
        ended = parse_time(step.output["requeued_at"])
        (_attempt_grown if grow else _attempt_ended)(execution, job, step.output["ends_attempt"], ended)
    return {
        "summary": outcome.summary,
        "job": job,
        "seen_restart_count": seen,
        "ends_attempt": step.output.get("ends_attempt"),
        "requeued_at": step.output.get("requeued_at"),
        "changed": outcome.changed,
    }


def _attempt_ended(execution, job: str, number: int, requeued_at) -> None:
    """The requeue ended attempt `number` of the run, which nobody had said failed: written back as run.failed at the
    fault, detected when FleetOps noticed, so the run's record has the interruption its goodput stages are timed from
    (a report the scheduler or the job sends too is a second report of it: docs/EVENTS.md). Its time lies within the
    attempt: not before it began (a fault of an earlier attempt's incident: then the requeue's moment) and not after
    the requeue (a fault stamped ahead by a fast clock would come after the restart and end the new attempt). The id
    is the execution's, so a retry writes nothing twice."""
    run, incident = execution.run, execution.incident
    attempt = run.attempts.filter(number=number).first()
    fault = min(incident.started_at if incident else requeued_at, requeued_at)
    if attempt is not None and fault <= attempt.started_at:
        fault = requeued_at
    detected = min(max(incident.detected_at if incident else fault, fault), requeued_at)
    data = {
        "run": run.name,
        "reason": f"FleetOps requeues job {job} off {execution.node.hostname}"
        + (f": {incident.title}" if incident else ""),
        "node": execution.node.hostname,
        "detected_at": format_time(detected, "microseconds"),
    }
    alert = (
        incident.alerts.filter(kind=AlertKind.XID, node=execution.node).order_by("first_seen_at").first()
        if incident
        else None
    )
    if alert is not None and alert.gpu is not None:
        data.update(gpu=alert.gpu.index, xid=alert.evidence["xid"])
    own_events_ingest(
        events=[
            {
                "specversion": SPECVERSION,
                "source": PLAYBOOK_SOURCE,
                "id": f"requeue:{execution.pk}:{job}",
                "type": "run.failed",
                "time": format_time(fault, "microseconds"),
                "data": data,
            }
        ]
    )


def _attempt_grown(execution, job: str, number: int, requeued_at) -> None:
    """Growing back ended the shrunk attempt `number` on purpose: a planned stop at the requeue, so the restart's
    downtime is the price of growing back, not a fault's."""
    own_events_ingest(
        events=[
            {
                "specversion": SPECVERSION,
                "source": PLAYBOOK_SOURCE,
                "id": f"grow:{execution.pk}:{job}",
                "type": "run.failed",
                "time": format_time(requeued_at, "microseconds"),
                "data": {
                    "run": execution.run.name,
                    "reason": f"FleetOps grows job {job} back to its size onto {_grown_onto(execution)}",
                    "planned": True,
                    "detected_at": format_time(requeued_at, "microseconds"),
                },
            }
        ]
    )


def _choice(execution) -> dict:
    """What shrink-and-continue's choose step decided; {} in a playbook that chooses nothing (no query then)."""
    if not any(spec["operation"] == "choose_shrink" for spec in execution.definition["steps"]):
        return {}
    return execution.steps.get(name="shrink or wait").output


def _choose_shrink(execution, step, spec) -> dict:
    """Replace, shrink or wait: a free hot spare makes it a replacement; else the advisor's pricing of shrinking
    (restart now on the other nodes, train at their share, restart again to grow back) against holding the job
    for a spare (the cluster's repair time), unless the person who started it chose."""
    if step.output.get("decision"):
        return step.output  # decided once: a retry after a crash keeps it
    cluster, bad = cluster_of(execution), execution.node.hostname
    adapter = adapter_for(cluster)
    free = [s.name for s in adapter.list_spares() if s.state == "hot_spare" and s.name != bad]
    job = adapter.job_status(job_id_of(execution))
    nodes = len(job.nodes) or Attempt.sizing_node_count(execution.run)
    if free:
        return {"decision": "replace", "spare": free[0], "nodes": nodes, "by": "free spare",
                "summary": f"spare {free[0]} is free: replace {bad} with it"}  # fmt: skip
    if nodes < 1:
        raise PlaybookError(f"job {job.job_id} runs on no node that FleetOps knows: nothing to shrink or hold")
    quote = spares.shrink_price_get(run=execution.run, cluster=cluster, nodes=nodes, lost=1, now=timezone.now())
    price, chosen = quote.price, spec.get("choice", "")
    decision = chosen or ("shrink" if price.shrink else "wait")
    if decision == "shrink" and nodes < 2:
        raise RefusedError(f"job {job.job_id} runs on {nodes} node: it cannot go on without {bad}")
    by = f"chosen by {execution.started_by}" if chosen else "the advisor's pricing"
    costs = (
        f"shrinking costs {price.shrink_cost / 3600:,.1f} node-hours, waiting {price.wait_cost / 3600:,.1f} "
        f"(a spare in {quote.wait_s / 3600:,.1f} h, {'the cluster' if quote.wait_measured else 'by default'}; "
        f"a restart {quote.restart_s / 60:,.1f} min, {'the run' if quote.restart_measured else 'by default'})"
    )
    what = f"shrink to {nodes - 1} of {nodes} nodes" if decision == "shrink" else f"hold job {job.job_id} for a spare"
    return {
        "decision": decision,
        "nodes": nodes,
        "by": by,
        "wait_s": quote.wait_s,
        "restart_s": quote.restart_s,
        "wait_measured": quote.wait_measured,
        "restart_measured": quote.restart_measured,
        "shrink_cost_node_s": price.shrink_cost if math.isfinite(price.shrink_cost) else None,
        "wait_cost_node_s": price.wait_cost,
        "summary": f"{what} ({by}): {costs}",
    }


def _shrink_job(execution, step, spec) -> dict:
    choice = _choice(execution)
    if choice["decision"] == "replace":
        return _requeue(execution, step, onto=[choice["spare"]])
    if choice["decision"] == "wait":
        job = adapter_for(cluster_of(execution)).job_status(job_id_of(execution))
        if job.state != "running" and step.output.get("seen_restart_count") is None:  # not a retry of the requeue
            return {"summary": f"job {job.job_id} is {job.raw_state}: held so until a spare passes the gate",
                    "held": True}  # fmt: skip
        # Still on the bad node: off it at its full size, to wait in the queue (grow back places it on the spare).
        held = _requeue(execution, step, onto=[])
        return {**held, "summary": f"{held['summary']}; held until a spare passes the gate", "held": True}
    return _requeue(execution, step, onto=[], nodes=choice["nodes"] - 1)


def _wait_job_running(execution, step, spec) -> dict:
    job = job_id_of(execution)
    decision = _choice(execution).get("decision")
    full = _full_size(execution) if spec.get("full") else None
    if full == 0 or (full is None and decision == "wait"):
        return {"summary": "nothing to wait for: " + ("the job kept its size" if full == 0 else "the job is held")}
    deadline = time.monotonic() + 20
    adapter = adapter_for(cluster_of(execution))
    bad = execution.node.hostname
    allowed = {_grown_onto(execution)} if full else set()  # grown back onto the bad node itself, repaired
    while True:
        status = adapter.job_status(job)
        running = status.state.upper() == "RUNNING" and (bad not in status.nodes or bad in allowed)
        if running and (full is None or len(status.nodes) >= full):
            break
        if time.monotonic() > deadline:
            where = hostlist.fold(status.nodes)
            raise TransientError(f"job {job} is {status.state} on {where}: not running elsewhere yet")
        time.sleep(1)
        lease_renew(execution)
    since = execution.started_at
    seconds = (timezone.now() - since).total_seconds()
    hosts = hostlist.fold(status.nodes)  # a 2,048-node job: one line, not 2,048 names
    if execution.incident_id:
        # Not mitigation: the harm stops when the run trains again (its run.restored), which the job being scheduled
        # does not yet say (issue 17: the SEV1 said mitigated while the run was still down).
        services.timeline_add(
            incident=execution.incident,
            kind="playbook",
            text=f"Job {job} running again on {hosts}, {seconds:.0f} s after the playbook started; "
            "mitigated once the run trains again",
        )
    return {
        "summary": f"job {job} running on {hosts}",
        "nodes": status.nodes,
        "seconds_since_start": seconds,
    }


def _full_size(execution, choice: dict | None = None) -> int:
    """The node count the job grows back to; 0 when it never changed size (a spare replaced the node)."""
    choice = choice if choice is not None else _choice(execution)
    return 0 if choice["decision"] == "replace" else choice["nodes"]


def _wait_spare(execution, step, spec) -> dict:
    """A hot spare that passed the gate (the drained node itself, repaired, or another); polled, not retried."""
    if _full_size(execution) == 0:
        return {"summary": "nothing to wait for: a spare replaced the node"}
    bad = execution.node.hostname
    free = [s.name for s in adapter_for(cluster_of(execution)).list_spares() if s.state == "hot_spare"]
    free = [name for name in free if name != bad] or free  # the repaired node itself, if it is the only one back
    if not free:
        raise StillWaiting("no hot spare has passed the gate yet")
    waited = (timezone.now() - step.started_at).total_seconds() if step.started_at else 0.0
    return {"summary": f"spare {free[0]} ready after {waited / 3600:,.1f} h", "spare": free[0], "waited_s": waited}


def _grown_onto(execution) -> str:
    return execution.steps.get(name="wait for spare").output.get("spare", "a spare")


def _grow_job(execution, step, spec) -> dict:
    choice = _choice(execution)
    full = _full_size(execution, choice)
    if full == 0:
        return {"summary": "nothing to grow back: a spare replaced the node"}
    # A held job never shrank: the attempt growing back ends is the bad node's, a fault's, not a planned stop.
    return _requeue(execution, step, onto=[_grown_onto(execution)], nodes=full, grow=choice["decision"] != "wait")


def _send_to_repair(execution, step, spec) -> dict:
    adapter_for(cluster_of(execution)).ensure_in_pool(execution.node.hostname, "repair")
    return {"summary": f"{execution.node.hostname} sent to repair"}


def _health_check(execution, step, spec) -> dict:
    adapter, node, check = adapter_for(cluster_of(execution)), execution.node.hostname, spec["check"]
    result = adapter.health_check(node, check)  # starts one, or returns the run still in flight
    deadline = time.monotonic() + 20
    while not result.done and time.monotonic() < deadline:
        time.sleep(1)
        lease_renew(execution)
        result = adapter.health_check_result(node, check)
    if not result.done:
        raise TransientError(f"{check} on {node} is still {result.state}")
    if not result.passed:
        raise RefusedError(f"{check} failed on {node}: {result.details}")
    return {"summary": f"{check} passed on {node}", "details": result.details}


def _prepare_checks(execution, step, spec) -> dict:
    outcome = adapter_for(cluster_of(execution)).ensure_ready_for_checks(execution.node.hostname)
    return {"summary": outcome.summary, "changed": outcome.changed}


def _return_to_pool(execution, step, spec) -> dict:
    adapter = adapter_for(cluster_of(execution))
    adapter.ensure_resumed(execution.node.hostname)
    adapter.ensure_in_pool(execution.node.hostname, "spare")
    return {"summary": f"{execution.node.hostname} back in the spare pool"}


OPERATIONS = {
    "drain_node": _drain_node,
    "pick_spare": _pick_spare,
    "requeue_job": _requeue_job,
    "wait_job_running": _wait_job_running,
    "choose_shrink": _choose_shrink,
    "shrink_job": _shrink_job,
    "wait_spare": _wait_spare,
    "grow_job": _grow_job,
    "send_to_repair": _send_to_repair,
    "health_check": _health_check,
    "prepare_checks": _prepare_checks,
    "return_to_pool": _return_to_pool,
}
