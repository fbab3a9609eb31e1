"""The playbook engine: start, advance step by step, approve, abort. Safe to run twice, and across workers.

An execution advances in `playbook_advance` (a Celery task calls it). Each step is claimed under the
execution's row lock, run outside any transaction (cluster calls can be slow), then recorded. Operations are
idempotent ensure-calls, so a step whose worker died is simply run again by whoever resumes the execution.
Every state change writes the incident's timeline.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from fleetops.celery import task_named
from incidents import services
from incidents.domain.playbooks import PLAYBOOKS, PlaybookError, StillWaiting, approver_for, backoff_s, with_choice
from incidents.models import Incident, PlaybookExecution, StepExecution
from incidents.playbooks import dryrun, steps
from incidents.playbooks.clusters.base import ClusterError, RefusedError, TransientError
from runs.models import Node, Run

log = logging.getLogger(__name__)


def playbook_start(
    *,
    playbook: str,
    actor: services.Actor,
    node: Node | None = None,
    run: Run | None = None,
    incident: Incident | None = None,
    dry_run: bool = False,
    choice: str = "",
) -> PlaybookExecution:
    """Start (or return the already active) execution for this node and run; queue its first step.

    `choice`: a person's "shrink" or "wait" over the advisor's pricing, for a playbook that chooses
    (shrink-and-continue)."""
    definition = PLAYBOOKS.get(playbook)
    if definition is None:
        raise PlaybookError(f"Unknown playbook {playbook!r}; known: {', '.join(PLAYBOOKS)}.")
    if choice:
        definition = with_choice(definition, choice)
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
    what = "Dry run of" if dry_run else "Started"
    _timeline(execution, f"{what} playbook {playbook} on {node or run} (#{execution.pk})", actor=actor)
    busy = dryrun.refusal_at_start(node=node, run=run) if dry_run else None
    if busy:  # the real run would not start: the database holds one active execution per node and per run
        _finish(execution, PlaybookExecution.Status.FAILED, error=f"would be refused at the start: {busy}")
        return execution
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
                dryrun.evaluate(execution, step, spec)
                if execution.dry_run
                else steps.OPERATIONS[spec["operation"]](execution, step, spec)
            )
        except StillWaiting as waiting:
            waited = (timezone.now() - step.started_at).total_seconds()
            if waited > spec.get("wait_s", 86400):
                _step_failed(execution, step, f"gave up after waiting {waited / 3600:,.1f} h: {waiting}")
                return "failed"
            _step_poll(execution, step, waiting, spec)
            return "waiting"
        except TransientError as error:
            if execution.dry_run:  # not an answer the real run would get either: it would try again later
                _step_failed(execution, step, f"the cluster did not answer: {error}", verb="could not tell")
                return "failed"
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


def _release(step: StepExecution) -> None:
    try:
        StepExecution.objects.filter(pk=step.pk, status=StepExecution.Status.RUNNING).update(
            status=StepExecution.Status.PENDING
        )
    except DatabaseError:
        log.warning("playbook step %s: could not release it; the lease runs out instead", step.pk)


def _step_succeeded(execution, step, output: dict) -> None:
    with transaction.atomic():
        step.status, step.output, step.error, step.finished_at = (
            StepExecution.Status.SUCCEEDED,
            output,
            "",
            timezone.now(),
        )
        step.save(update_fields=["status", "output", "error", "finished_at"])
        if execution.dry_run:
            approval = f" after approval by {output['approval']}" if output.get("approval") else ""
            found = f"{output['finding']}; " if output.get("finding") else ""
            text = f"step {step.index + 1} ({step.name}) would go ahead{approval}: {found}plan: {output['plan']}"
        else:
            seconds = f" in {step.seconds:.1f} s" if step.seconds is not None else ""
            text = f"Step {step.name} done{seconds}: {output.get('summary') or ''}"
        _timeline(execution, text, data={"step": step.name, "seconds": step.seconds, "output": output})


def _step_retry(execution, step, error, spec) -> None:
    delay = backoff_s(step.attempts)
    StepExecution.objects.filter(pk=step.pk).update(status=StepExecution.Status.PENDING, error=str(error))
    log.info("playbook %s step %s: transient error, retry in %ss: %s", execution.pk, step.name, delay, error)
    with transaction.atomic():
        _queue(execution.pk, countdown=delay)


def _step_poll(execution, step, waiting: StillWaiting, spec) -> None:
    """A polled step found nothing yet: it stays pending and looks again in poll_s. With a broker that is a
    countdown; in-process (the embedded default, where a countdown would run at once) the periodic resume-playbooks
    picks the execution up once its lease runs out."""
    with transaction.atomic():
        StepExecution.objects.filter(pk=step.pk).update(
            status=StepExecution.Status.PENDING, error="", output={"summary": f"waiting: {waiting}"}
        )
        if step.attempts == 1:
            _timeline(execution, f"Step {step.name} waits: {waiting}; looking again every {spec['poll_s']:g} s")
        if not task_named("incidents.tasks.advance_playbook").app.conf.task_always_eager:
            _queue(execution.pk, countdown=spec["poll_s"])


def _step_failed(execution, step, reason: str, *, refused: bool = False, verb: str = "") -> None:
    """The step and its execution end; a dry run says what the real run would meet at this step, and where."""
    with transaction.atomic():
        StepExecution.objects.filter(pk=step.pk).update(
            status=StepExecution.Status.FAILED, error=reason, finished_at=timezone.now()
        )
        if execution.dry_run:
            verb = verb or ("would be refused" if refused else "would fail")
            error = f"{verb} at step {step.index + 1} ({step.name}): {reason}"
        else:
            error = f"{step.name} {'refused' if refused else 'failed'}: {reason}"
        _finish(execution, PlaybookExecution.Status.FAILED, error=error)


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
    _timeline(execution, _finish_text(execution), actor=actor)


def _finish_text(execution) -> str:
    """The timeline's last word on an execution; a dry run's says what the real run would do, never "succeeded"."""
    if not execution.dry_run:
        error = f": {execution.error}" if execution.error else ""
        return f"Playbook {execution.playbook} #{execution.pk} {execution.status}{error}"
    head = f"Dry run of playbook {execution.playbook} #{execution.pk}"
    if execution.status != PlaybookExecution.Status.SUCCEEDED:
        return f"{head}: {execution.error or execution.status}"
    waits = [
        f"{name} ({output['approval']})"
        for name, output in execution.steps.order_by("index").values_list("name", "output")
        if output.get("approval")
    ]
    approvals = f", waiting for approval at {', '.join(waits)}" if waits else ""
    return f"{head}: the real run would go through every step{approvals}; nothing was done"


def _timeline(execution, text: str, *, data: dict | None = None, actor: services.Actor = services.FLEETOPS) -> None:
    """Every entry names its execution and whether it was a dry run (the API's `data`); a dry run's text starts so
    (its steps' entries name it: "Dry run #7: step 2 ...")."""
    if execution.dry_run and not text.startswith("Dry run"):
        text = f"Dry run #{execution.pk}: {text}"
    if execution.incident_id:
        services.timeline_add(
            incident=execution.incident,
            kind="playbook",
            actor=actor,
            text=text,
            data={"execution": execution.pk, "dry_run": execution.dry_run, **(data or {})},
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
