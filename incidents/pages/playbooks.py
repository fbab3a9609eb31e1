"""Playbooks from the incident page: start one (or a dry run of it), approve a waiting step, refuse it, abort.

Acting needs the oncall or admin role, as every action on the page (incidents.pages.incident.acting_actor: 403 and
an audit entry); approving a step whose approver is "admin" needs an admin. What the engine will not do
(PlaybookError) is shown: in the card's banner for htmx, on the page with 409 otherwise.
"""

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fleetops.roles import ADMIN, can_act, is_admin
from incidents import selectors, services
from incidents.models import Incident, PlaybookExecution, StepExecution
from incidents.pages.incident import acting_actor, incident_context
from incidents.playbooks.engine import PlaybookError, playbook_abort, playbook_approve, playbook_start
from incidents.playbooks.forms import PlaybookStartForm


@require_POST
@login_required
def incident_playbook_start(request, pk):
    incident = get_object_or_404(Incident, pk=pk)
    actor = acting_actor(request, incident, "start playbooks on")
    form = PlaybookStartForm(request.POST, incident=incident)
    if not form.is_valid():
        return _respond(request, incident, error=form.error_text())
    data = form.cleaned_data
    active = None if data["dry_run"] else selectors.playbook_active_get(node=data["node"], run=data["run"])
    if active is not None:
        where = active.node or active.run
        return _respond(request, incident, error=f"{active.playbook} #{active.pk} is already active on {where}.")
    playbook_start(
        playbook=data["playbook"], actor=actor, node=data["node"], run=data["run"], incident=incident,
        dry_run=data["dry_run"], choice=data["choice"],
    )  # fmt: skip
    return _respond(request, incident)


@require_POST
@login_required
def incident_playbook_approve(request, pk, execution_pk):
    incident, execution = _execution(pk, execution_pk)
    actor = acting_actor(request, incident, "approve playbook steps on")
    waiting = execution.steps.filter(status=StepExecution.Status.WAITING).first()
    role_ok = is_admin(request.user) if waiting and waiting.approver_role == ADMIN else can_act(request.user)
    if not role_ok:
        services.action_refused(incident=incident, actor=actor, action="approve admin-only playbook steps on")
    try:
        playbook_approve(execution=execution, actor=actor, role_ok=role_ok)
    except PlaybookError as refused:
        return _respond(request, incident, error=str(refused), status=409 if role_ok else 403)
    return _respond(request, incident)


@require_POST
@login_required
def incident_playbook_abort(request, pk, execution_pk):
    """Abort; with `refuse`, the person refuses the step that waits for approval, and must say why."""
    incident, execution = _execution(pk, execution_pk)
    actor = acting_actor(request, incident, "abort playbooks on")
    reason = request.POST.get("reason", "").strip()
    try:
        if request.POST.get("refuse"):
            reason = _refusal(execution, reason)
        playbook_abort(execution=execution, actor=actor, reason=reason)
    except PlaybookError as refused:
        return _respond(request, incident, error=str(refused))
    return _respond(request, incident)


def _refusal(execution: PlaybookExecution, reason: str) -> str:
    waiting = execution.steps.filter(status=StepExecution.Status.WAITING).first()
    if waiting is None:
        raise PlaybookError("Nothing in this playbook waits for approval.")
    if not reason:
        raise PlaybookError(f"Say why you refuse step {waiting.name}: the timeline keeps it.")
    return f"refused step {waiting.name}: {reason}"


def _execution(pk: int, execution_pk: int) -> tuple[Incident, PlaybookExecution]:
    execution = get_object_or_404(PlaybookExecution.objects.select_related("incident"), pk=execution_pk, incident=pk)
    return execution.incident, execution


def _respond(request, incident: Incident, *, error: str = "", status: int = 409):
    if not request.htmx and not error:
        return redirect(incident.get_absolute_url() + "#incident-playbooks")
    incident = Incident.objects.select_related("run", "commander").get(pk=incident.pk)
    context = {**incident_context(request, incident), "playbook_error": error, "oob": request.htmx}
    if request.htmx:
        # The card is the target; header, impact and timeline come along out of band (a playbook mitigates).
        return render(request, "incidents/incident.html#incident-playbooks-acted", context)
    return render(request, "incidents/incident.html", context, status=status)
