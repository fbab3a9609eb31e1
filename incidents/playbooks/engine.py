"""The playbook engine: start, advance step by step, approve, abort. Safe to run twice, and across workers.

An execution advances in `playbook_advance` (a Celery task calls it). Each step is claimed under the
execution's row lock, run outside any transaction (cluster calls can be slow), then recorded. Operations are
idempotent ensure-calls, so a step whose worker died is simply run again by whoever resumes the execution.
Every state change writes the incident's timeline.
"""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from fleetops.celery import task_named
from incidents import services
from incidents.domain.playbooks import PLAYBOOKS, approver_for, backoff_s, breaker_open
from incidents.models import Incident, PlaybookExecution, StepExecution
from incidents.playbooks.clusters import adapter_for
from incidents.playbooks.clusters.base import ClusterError, RefusedError, TransientError
from runs.models import Node, Run

log = logging.getLogger(__name__)


class PlaybookError(Exception):
    """What a person asked for cannot be done; the message says why."""


def playbook_start(
    *,
    playbook: str,
    actor: services.Actor,
    node: Node | None = None,
    run: Run | None = None,
    incident: Incident | None = None,
    dry_run: bool = False,
) -> PlaybookExecution:
    """Start (or return the already active) execution for this node and run; queue its first step."""
    definition = PLAYBOOKS.get(playbook)
    if definition is None:
        raise PlaybookError(f"Unknown playbook {playbook!r}; known: {', '.join(PLAYBOOKS)}.")
    severity = incident.severity if incident else None
    try:
        with transaction.atomic():
            execution = PlaybookExecution.objects.create(
                playbook=playbook,
                definition=definition,
                incident=incident,
                run=run,
                node=node,
                dry_run=dry_run,
                started_by=actor.name,
                started_at=timezone.now(),
            )
            StepExecution.objects.bulk_create(
                [
                    StepExecution(
                        execution=execution,
                        index=i,
                        name=step["name"],
                        approver_role="" if dry_run else approver_for(action=step["action"], severity=severity),
                    )
                    for i, step in enumerate(definition["steps"])
                ]
            )
    except IntegrityError:
        # The database allows one active execution per node and per run: this one is already running.
        active = PlaybookExecution.objects.filter(status__in=PlaybookExecution.ACTIVE, dry_run=False)
        return active.filter(node=node).first() if node else active.filter(run=run).first()
    if incident is not None:
        what = "Dry run of" if dry_run else "Started"
        services.timeline_add(
            incident=incident,
            kind="playbook",
            actor=actor,
            text=f"{what} playbook {playbook} on {node or run} (#{execution.pk})",
        )
    _queue(execution.pk)
    return execution


def _queue(execution_id: int, countdown: float = 0) -> None:
    advance = task_named("incidents.tasks.advance_playbook")
    transaction.on_commit(lambda: advance.apply_async((execution_id,), countdown=countdown))


def playbook_advance(*, execution_id: int) -> str:
    """Run steps until the execution finishes, waits for approval, or waits to retry; returns its status."""
    while True:
        with transaction.atomic():
            execution = PlaybookExecution.objects.select_for_update(skip_locked=True).filter(pk=execution_id).first()
            if execution is None:
                return "busy"  # another worker holds it: it will carry on
            if execution.status != PlaybookExecution.Status.RUNNING:
                return execution.status
            step = execution.steps.exclude(status__in=["succeeded", "skipped"]).order_by("index").first()
            if step is None:
                _finish(execution, PlaybookExecution.Status.SUCCEEDED)
                return execution.status
            if step.approver_role and not step.approved_by:
                _wait_for_approval(execution, step)
                return execution.status
            if step.status == StepExecution.Status.RUNNING and _leased(execution):
                return "busy"  # its worker is alive and still on it; a second runner would repeat the step
            step.status, step.attempts = StepExecution.Status.RUNNING, step.attempts + 1
            step.started_at = step.started_at or timezone.now()
            step.save(update_fields=["status", "attempts", "started_at"])
            execution.heartbeat_at = timezone.now()
            execution.save(update_fields=["heartbeat_at"])
        spec = execution.definition["steps"][step.index]
        try:
            output = (
                _describe(execution, spec)
                if execution.dry_run
                else OPERATIONS[spec["operation"]](execution, step, spec)
            )
        except TransientError as error:
            if step.attempts < spec.get("retries", 3):
                _step_retry(execution, step, error, spec)
                return "retrying"
            _step_failed(execution, step, f"gave up after {step.attempts} attempts: {error}")
            return "failed"
        except (ClusterError, PlaybookError) as error:
            _step_failed(execution, step, str(error), refused=isinstance(error, RefusedError))
            return "failed"
        except Exception:
            _release(step)  # an unexpected error (the database gone): let the task's retry claim it at once
            raise
        _step_succeeded(execution, step, output)


def _leased(execution: PlaybookExecution) -> bool:
    """The worker running the current step renewed the heartbeat within PLAYBOOK_STEP_LEASE_S seconds."""
    lease = timedelta(seconds=settings.PLAYBOOK_STEP_LEASE_S)
    return execution.heartbeat_at is not None and execution.heartbeat_at > timezone.now() - lease


def _beat(execution: PlaybookExecution) -> None:
    """Renew the lease on the step in hand, from a step that waits on the cluster for a while."""
    PlaybookExecution.objects.filter(pk=execution.pk).update(heartbeat_at=timezone.now())


def _release(step: StepExecution) -> None:
    try:
        StepExecution.objects.filter(pk=step.pk, status=StepExecution.Status.RUNNING).update(
            status=StepExecution.Status.PENDING
        )
    except DatabaseError:
        log.warning("playbook step %s: could not release it; the lease runs out instead", step.pk)


def _describe(execution: PlaybookExecution, spec: dict) -> dict:
    """Dry run: the calls the step would make, without touching the cluster."""
    node = execution.node.hostname if execution.node else None
    job = _job_id(execution) if execution.run else None
    adapter = adapter_for(_cluster(execution))
    plans = {
        "drain_node": lambda: adapter.describe_plan("ensure_drained", name=node, reason=_reason(execution)),
        "pick_spare": lambda: adapter.describe_plan("list_spares"),
        "requeue_job": lambda: adapter.describe_plan("requeue_job", job_id=job),
        "wait_job_running": lambda: adapter.describe_plan("job_status", job_id=job),
        "send_to_repair": lambda: adapter.describe_plan("ensure_in_pool", name=node, pool="repair"),
        "health_check": lambda: adapter.describe_plan("health_check", name=node, check=spec.get("check")),
        "prepare_checks": lambda: adapter.plan_ready_for_checks(node),
        "return_to_pool": lambda: adapter.describe_plan("ensure_resumed", name=node),
    }
    return {"plan": plans[spec["operation"]]()}


def _step_succeeded(execution, step, output: dict) -> None:
    with transaction.atomic():
        step.status, step.output, step.error, step.finished_at = (
            StepExecution.Status.SUCCEEDED,
            output,
            "",
            timezone.now(),
        )
        step.save(update_fields=["status", "output", "error", "finished_at"])
        seconds = f" in {step.seconds:.1f} s" if step.seconds is not None else ""
        detail = output.get("plan") or output.get("summary") or ""
        _timeline(
            execution,
            f"Step {step.name} {'planned' if execution.dry_run else 'done'}{seconds}: {detail}",
            data={"step": step.name, "seconds": step.seconds, "output": output},
        )


def _step_retry(execution, step, error, spec) -> None:
    delay = backoff_s(step.attempts)
    StepExecution.objects.filter(pk=step.pk).update(status=StepExecution.Status.PENDING, error=str(error))
    log.info("playbook %s step %s: transient error, retry in %ss: %s", execution.pk, step.name, delay, error)
    with transaction.atomic():
        _queue(execution.pk, countdown=delay)


def _step_failed(execution, step, reason: str, *, refused: bool = False) -> None:
    with transaction.atomic():
        StepExecution.objects.filter(pk=step.pk).update(
            status=StepExecution.Status.FAILED, error=reason, finished_at=timezone.now()
        )
        verb = "refused" if refused else "failed"
        _finish(execution, PlaybookExecution.Status.FAILED, error=f"{step.name} {verb}: {reason}")


def _wait_for_approval(execution, step) -> None:
    step.status = StepExecution.Status.WAITING
    step.save(update_fields=["status"])
    execution.status = PlaybookExecution.Status.WAITING
    execution.save(update_fields=["status"])
    _timeline(execution, f"Step {step.name} waits for approval by {step.approver_role}")


def _finish(execution, status, *, error: str = "", actor: services.Actor = services.FLEETOPS) -> None:
    execution.status, execution.finished_at, execution.error = status, timezone.now(), error
    execution.save(update_fields=["status", "finished_at", "error"])
    if status != PlaybookExecution.Status.SUCCEEDED:
        execution.steps.filter(status__in=["pending", "waiting_approval"]).update(status=StepExecution.Status.SKIPPED)
    text = f"Playbook {execution.playbook} #{execution.pk} {status}" + (f": {error}" if error else "")
    _timeline(execution, text, actor=actor)


def _timeline(execution, text: str, *, data: dict | None = None, actor: services.Actor = services.FLEETOPS) -> None:
    if execution.incident_id:
        services.timeline_add(
            incident=execution.incident,
            kind="playbook",
            actor=actor,
            text=text,
            data={"execution": execution.pk, **(data or {})},
        )


# --- People -----------------------------------------------------------------------------------------------


@transaction.atomic
def playbook_approve(*, execution: PlaybookExecution, actor: services.Actor, role_ok: bool) -> PlaybookExecution:
    execution = PlaybookExecution.objects.select_for_update().get(pk=execution.pk)
    step = execution.steps.filter(status=StepExecution.Status.WAITING).first()
    if execution.status != PlaybookExecution.Status.WAITING or step is None:
        raise PlaybookError("Nothing in this playbook waits for approval.")
    if not role_ok:
        raise PlaybookError(f"Step {step.name} needs approval by {step.approver_role}.")
    step.status, step.approved_by = StepExecution.Status.PENDING, actor.name
    step.save(update_fields=["status", "approved_by"])
    execution.status = PlaybookExecution.Status.RUNNING
    execution.save(update_fields=["status"])
    _timeline(execution, f"{actor.name} approved step {step.name}", actor=actor)
    _queue(execution.pk)
    return execution


@transaction.atomic
def playbook_abort(*, execution: PlaybookExecution, actor: services.Actor, reason: str = "") -> PlaybookExecution:
    """Stop after the step in flight (a cluster call is not interrupted half-way); refusing an approval aborts."""
    execution = PlaybookExecution.objects.select_for_update().get(pk=execution.pk)
    if execution.status not in PlaybookExecution.ACTIVE:
        raise PlaybookError(f"This playbook is {execution.status} already.")
    _finish(
        execution,
        PlaybookExecution.Status.ABORTED,
        error=f"aborted by {actor.name}" + (f": {reason}" if reason else ""),
        actor=actor,
    )
    return execution


def playbooks_resume_stale(*, older_than: timedelta | None = None) -> int:
    """Executions whose worker stopped renewing the heartbeat (killed mid-step): queue them again.

    `older_than` defaults to the step lease (PLAYBOOK_STEP_LEASE_S): a younger heartbeat is a live worker's.
    """
    cutoff = timezone.now() - (
        older_than if older_than is not None else timedelta(seconds=settings.PLAYBOOK_STEP_LEASE_S)
    )
    stale = list(
        PlaybookExecution.objects.filter(status=PlaybookExecution.Status.RUNNING, heartbeat_at__lt=cutoff).values_list(
            "pk", flat=True
        )
    )
    for pk in stale:
        with transaction.atomic():
            _queue(pk)
    return len(stale)


# --- Operations: each an idempotent ensure-call; returns what it found or did --------------------------


def _cluster(execution):
    node, run = execution.node, execution.run
    cluster = (node.cluster if node else None) or (run.cluster if run else None)
    if cluster is None:
        raise PlaybookError("The node and run belong to no known cluster: nothing to act on.")
    return cluster


def _reason(execution) -> str:
    incident = execution.incident
    return f"fleetops #{incident.pk}: {incident.title}"[:200] if incident else f"fleetops playbook #{execution.pk}"


def _job_id(execution) -> str:
    attempt = execution.run.attempts.order_by("-number").first() if execution.run else None
    if attempt is None:
        raise PlaybookError("The run has no scheduler job to requeue.")
    return attempt.job_id


def _drain_node(execution, step, spec) -> dict:
    cluster = _cluster(execution)
    taken_out = Node.objects.filter(cluster=cluster, state__in=["cordoned", "draining", "in_repair"]).count()
    fleet = Node.objects.filter(cluster=cluster).exclude(state="retired").count()
    if execution.node.state not in ("cordoned", "draining", "in_repair") and breaker_open(
        taken_out=taken_out, fleet=fleet, max_share=settings.PLAYBOOK_MAX_OUT_SHARE
    ):
        if execution.incident_id:
            services.incident_page_human(
                incident=execution.incident, why=f"circuit breaker: {taken_out} of {fleet} nodes already out of service"
            )
        raise RefusedError(
            f"circuit breaker open: {taken_out} of {fleet} nodes already out of service "
            f"(at most {settings.PLAYBOOK_MAX_OUT_SHARE:.0%}); a human must decide"
        )
    outcome = adapter_for(cluster).ensure_drained(execution.node.hostname, _reason(execution))
    raw = outcome.node.raw_state if outcome.node else ""
    return {"summary": outcome.summary, "state": raw, "changed": outcome.changed}


def _pick_spare(execution, step, spec) -> dict:
    if step.output.get("spare"):
        return step.output
    spares = [s for s in adapter_for(_cluster(execution)).list_spares() if s.name != execution.node.hostname]
    if not spares:
        raise TransientError("no hot spare is free: waiting for one")
    return {"summary": f"spare {spares[0].name}", "spare": spares[0].name}


def _spare(execution) -> str:
    return execution.steps.get(name="pick spare").output["spare"]


def _requeue_job(execution, step, spec) -> dict:
    job, adapter = _job_id(execution), adapter_for(_cluster(execution))
    seen = step.output.get("seen_restart_count")
    if seen is None:
        # Written down before the requeue: a worker that dies after requeueing leaves this behind, and the
        # retry then finds the job restarted already instead of requeueing it a second time.
        seen = adapter.job_status(job).restart_count
        step.output = {"seen_restart_count": seen}
        StepExecution.objects.filter(pk=step.pk).update(output=step.output)
    outcome = adapter.requeue_job(
        job, seen_restart_count=seen, exclude=[execution.node.hostname], onto=_spare(execution)
    )
    return {"summary": outcome.summary, "job": job, "seen_restart_count": seen, "changed": outcome.changed}


def _wait_job_running(execution, step, spec) -> dict:
    job = _job_id(execution)
    deadline = time.monotonic() + 20
    adapter = adapter_for(_cluster(execution))
    while True:
        status = adapter.job_status(job)
        if status.state.upper() == "RUNNING" and execution.node.hostname not in status.nodes:
            break
        if time.monotonic() > deadline:
            raise TransientError(f"job {job} is {status.state} on {status.nodes}: not running elsewhere yet")
        time.sleep(1)
        _beat(execution)
    since = execution.started_at
    seconds = (timezone.now() - since).total_seconds()
    if execution.incident_id:
        services.incident_mitigate(
            incident=execution.incident,
            text=f"Job {job} running again on {', '.join(status.nodes)}, {seconds:.0f} s after the playbook started",
        )
    return {
        "summary": f"job {job} running on {', '.join(status.nodes)}",
        "nodes": status.nodes,
        "seconds_since_start": seconds,
    }


def _send_to_repair(execution, step, spec) -> dict:
    adapter_for(_cluster(execution)).ensure_in_pool(execution.node.hostname, "repair")
    return {"summary": f"{execution.node.hostname} sent to repair"}


def _health_check(execution, step, spec) -> dict:
    adapter, node, check = adapter_for(_cluster(execution)), execution.node.hostname, spec["check"]
    result = adapter.health_check(node, check)  # starts one, or returns the run still in flight
    deadline = time.monotonic() + 20
    while not result.done and time.monotonic() < deadline:
        time.sleep(1)
        _beat(execution)
        result = adapter.health_check_result(node, check)
    if not result.done:
        raise TransientError(f"{check} on {node} is still {result.state}")
    if not result.passed:
        raise RefusedError(f"{check} failed on {node}: {result.details}")
    return {"summary": f"{check} passed on {node}", "details": result.details}


def _prepare_checks(execution, step, spec) -> dict:
    outcome = adapter_for(_cluster(execution)).ensure_ready_for_checks(execution.node.hostname)
    return {"summary": outcome.summary, "changed": outcome.changed}


def _return_to_pool(execution, step, spec) -> dict:
    adapter = adapter_for(_cluster(execution))
    adapter.ensure_resumed(execution.node.hostname)
    adapter.ensure_in_pool(execution.node.hostname, "spare")
    return {"summary": f"{execution.node.hostname} back in the spare pool"}


OPERATIONS = {
    "drain_node": _drain_node,
    "pick_spare": _pick_spare,
    "requeue_job": _requeue_job,
    "wait_job_running": _wait_job_running,
    "send_to_repair": _send_to_repair,
    "health_check": _health_check,
    "prepare_checks": _prepare_checks,
    "return_to_pool": _return_to_pool,
}
