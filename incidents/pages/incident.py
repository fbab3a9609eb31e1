"""The incident page and the actions on it.

Anyone signed in reads; acting needs the oncall or admin role (fleetops.roles.can_act). A refused action
changes nothing but leaves an audit entry (services.action_refused) and answers 403.
"""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from fleetops.pagecache import page_cached
from fleetops.roles import can_act, is_admin
from incidents import selectors, services
from incidents.domain.playbooks import PLAYBOOKS
from incidents.models import Incident
from incidents.pages.polling import polling_partial

# The incident page polls ?part=impact and ?part=timeline while the incident is open, ?part=playbooks while one runs.
PLAYBOOK_CHOICES = [(name, definition["title"]) for name, definition in PLAYBOOKS.items()]


@login_required
@vary_on_headers("HX-Request")
@page_cached(personal=lambda request, pk: _who(request, pk))
def incident_page(request, pk):
    incident = get_object_or_404(Incident.objects.select_related("run", "commander"), pk=pk)
    part = request.GET.get("part")
    if request.htmx and part in ("impact", "timeline"):  # their own reads only (_part_context)
        context = _part_context(request, incident, part)
        return polling_partial(request, f"incidents/incident.html#incident-{part}", context, polling=incident.is_open)
    context = incident_context(request, incident)
    if request.htmx and part == "playbooks":
        # A playbook moves nodes and mitigates: header, impact, timeline and nodes follow it out of band.
        context["oob"] = True
        template = "incidents/incident.html#incident-playbooks-acted"
        return polling_partial(request, template, context, polling=context["playbooks_active"])
    return render(request, "incidents/incident.html", context)


def _who(request, pk) -> str:
    """What of the person the incident page shows besides their role: to those who can act, "assign to me" unless
    they are assigned and "take command" unless they command it. Everyone else in their place shares the page."""
    if not can_act(request.user):
        return ""
    assigned = Incident.assignees.through.objects.filter(incident_id=OuterRef("pk"), user_id=request.user.pk)
    found = Incident.objects.filter(pk=pk).values_list("commander_id", Exists(assigned)).first()
    commander_id, is_assignee = found or (None, False)
    return f"commands={commander_id == request.user.pk},assigned={is_assignee}"


def _part_context(request, incident: Incident, part: str) -> dict:
    """What the impact and timeline polls render, and nothing else: every open incident's page polls both every
    10 s, and the whole page's reads (16,384 alerts and nodes at the scale of issue 20) are not theirs to pay."""
    now = timezone.now()
    if part == "impact":
        return {"incident": incident, "impact": selectors.incident_impact(incident=incident, now=now), "now": now}
    refusals = selectors.incident_refusals_get(incident=incident) if is_admin(request.user) else []
    return {"incident": incident, "timeline": _timeline(incident), "refusals": refusals, "now": now}


def _timeline(incident: Incident) -> dict:
    entries = selectors.incident_timeline_get(incident=incident)
    return {"entries": entries, "count": sum(getattr(entry, "count", 1) for entry in entries)}


def incident_context(request, incident: Incident, *, error: str = "") -> dict:
    user, assignees, now = request.user, list(incident.assignees.all()), timezone.now()
    playbooks = selectors.incident_playbooks_get(incident=incident)
    affected = selectors.incident_nodes_get(incident=incident)
    alert_groups = selectors.incident_alert_groups_get(incident=incident, hostnames=affected.by_id)
    # The counts the board reads with incidents_list(), here from the groups' own: the annotated read would go over
    # the alerts once more.
    incident.firing_count = sum(group.total for group in alert_groups if group.status == "firing")
    incident.alert_count = sum(group.occurrences for group in alert_groups)
    return {
        "incident": incident,
        "impact": selectors.incident_impact(incident=incident, now=now),
        "alert_groups": alert_groups,
        "alert_total": sum(group.total for group in alert_groups),
        "alerts_shown": selectors.ALERTS_SHOWN,
        "affected": affected,
        "assignees": assignees,
        "timeline": _timeline(incident),
        "refusals": selectors.incident_refusals_get(incident=incident) if is_admin(user) else [],
        "can_act": can_act(user),
        "is_admin": is_admin(user),
        "is_assignee": user in assignees,
        "severities": Incident.Severity.values,
        "escalate_to": _one_up(incident.severity),
        "error": error,
        "playbooks": playbooks,
        "playbooks_active": any(execution.is_active for execution in playbooks),
        "playbook_choices": PLAYBOOK_CHOICES,
        "now": now,
    }


def _one_up(severity: str) -> str | None:
    position = Incident.Severity.values.index(severity)
    return Incident.Severity.values[position - 1] if position else None


# --- Actions: each takes (incident, actor, request) and calls one service -------------------------------


def acting_actor(request, incident: Incident, verb: str) -> services.Actor:
    """Who acts, if they may; otherwise the audit entry, then 403. `verb` completes "may not ... incidents"."""
    actor = services.Actor.of_user(request.user)
    if not can_act(request.user):
        services.action_refused(incident=incident, actor=actor, action=verb)
        raise PermissionDenied(f"You may not {verb} incidents: that needs the oncall role.")
    return actor


def _text(request, name: str) -> str:
    return request.POST.get(name, "").strip()


def _acknowledge(incident, actor, request):
    services.incident_acknowledge(incident=incident, actor=actor)


def _assign_to_me(incident, actor, request):
    services.incident_assign(incident=incident, actor=actor, assignee=request.user)


def _take_command(incident, actor, request):
    services.incident_commander_set(incident=incident, actor=actor, commander=request.user)


def _escalate(incident, actor, request):
    services.incident_escalate(incident=incident, actor=actor, reason=_text(request, "reason"))


def _add_note(incident, actor, request):
    services.incident_note_add(incident=incident, actor=actor, text=_text(request, "text"))


def _change_severity(incident, actor, request):
    reason = _text(request, "reason")
    if not reason:
        raise services.IncidentError("Say why the severity changes: impact no longer moves it after this.")
    services.incident_severity_set(incident=incident, actor=actor, severity=_text(request, "severity"), reason=reason)


def _resolve(incident, actor, request):
    services.incident_resolve(incident=incident, actor=actor, override_reason=_text(request, "override_reason"))


def _reopen(incident, actor, request):
    services.incident_reopen(incident=incident, actor=actor, reason=_text(request, "reason"))


def _close(incident, actor, request):
    services.incident_close(incident=incident, actor=actor)


# The name in the URL: (what a refusal's audit entry says was tried, the call).
ACTIONS = {
    "acknowledge": ("acknowledge", _acknowledge),
    "assign": ("assign", _assign_to_me),
    "command": ("take command", _take_command),
    "escalate": ("escalate", _escalate),
    "note": ("add notes to", _add_note),
    "severity": ("change the severity of", _change_severity),
    "resolve": ("resolve", _resolve),
    "reopen": ("reopen", _reopen),
    "close": ("close", _close),
}


@require_POST
@login_required
def incident_act(request, pk, action):
    incident = get_object_or_404(Incident, pk=pk)
    verb, perform = ACTIONS[action]
    actor = acting_actor(request, incident, verb)
    error = ""
    try:
        perform(incident, actor, request)
    except services.IncidentError as refused:
        error = str(refused)
    if not request.htmx and not error:
        return redirect(incident)
    incident = Incident.objects.select_related("run", "commander").get(pk=pk)
    context = {**incident_context(request, incident, error=error), "oob": request.htmx}
    if request.htmx:
        # The actions box is the target; header, impact and timeline come along as out-of-band swaps.
        return render(request, "incidents/incident.html#incident-acted", context)
    return render(request, "incidents/incident.html", context, status=409)
