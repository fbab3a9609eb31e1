"""On-call pages: the incident board, the incident page and the actions on it.

Anyone signed in reads; acting needs the oncall or admin role (fleetops.roles.can_act). A refused action
changes nothing but leaves an audit entry (services.action_refused) and answers 403.
"""

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling, trigger_client_event

from fleetops import paging
from fleetops.roles import can_act, is_admin
from incidents import selectors, services
from incidents.domain.playbooks import PLAYBOOKS
from incidents.forms import BoardFilterForm
from incidents.models import Incident

BOARD_PAGE = 50  # rows of the board a page: rendering is most of its time (200 rows, ~130 ms)
_LINKS = (("incident-page", 0), ("run-page", "-"), ("node-page", "-"))
# What the incident page polls for: impact and timeline while the incident is open, playbooks while one is active.
PARTS = ("impact", "timeline", "playbooks")
PLAYBOOK_CHOICES = [(name, definition["title"]) for name, definition in PLAYBOOKS.items()]


def _partial(request, template: str, context: dict, *, polling: bool) -> HttpResponse:
    html = render_to_string(template, context, request=request)
    # Status 286 tells htmx to stop polling: nothing on it changes by itself any more.
    return HttpResponse(html) if polling else HttpResponseStopPolling(html)


@login_required
@vary_on_headers("HX-Request")
def board(request):
    form = BoardFilterForm(request.GET)
    filters = form.selector_kwargs()
    counts = selectors.incident_counts_get(**filters)
    total = sum(count.total for count in counts)
    page = paging.page_get(request, total=total, size=BOARD_PAGE)
    if page is None:
        return HttpResponseBadRequest("page: a whole number of 1 or more", content_type="text/plain")
    rows = selectors.incidents_list(**filters).prefetch_related("nodes")[page.first : page.first + page.size]
    incidents, now = list(rows), timezone.now()
    impacts = selectors.incident_impacts_get(incidents=incidents, now=now)
    for incident in incidents:
        incident.impact = impacts[incident.pk]
    # Live while anything matching the filters is open, on whichever page it is.
    polling = any(count.open for count in counts)
    context = {
        "form": form,
        "groups": _severity_groups(incidents, counts),
        "severity_counts": [(count.severity, count.open) for count in counts],
        "polling": polling,
        "query": request.GET.urlencode(),
        "pager": paging.pager(request, "incident-board", page, shown=len(incidents), total=total),
        "now": now,
        # One reverse per kind of link, not three a row: 200 rows made 600 reverse() calls, a tenth of the board.
        "urls": {name.replace("-", "_"): reverse(name, args=[arg])[: -len(str(arg))] for name, arg in _LINKS},
    }
    if request.htmx and not request.htmx.history_restore_request:
        # The poll re-renders this page only (BOARD_PAGE rows at most). Nothing open: the list stops polling; the
        # nav's open count (open_count) still watches and fires incidents-changed, on which the list reloads once.
        return _partial(request, "incidents/board.html#incident-list", context, polling=polling)
    return render(request, "incidents/board.html", context)


def _severity_groups(incidents: list[Incident], counts: list[selectors.SeverityCount]) -> list[tuple]:
    """(severity, its incidents on this page, how many match on all pages), for the severities on this page."""
    totals = {count.severity: count.total for count in counts}
    groups: dict[str, list[Incident]] = {}
    for incident in incidents:  # in severity order already
        groups.setdefault(incident.severity, []).append(incident)
    return [(severity, rows, totals.get(severity, len(rows))) for severity, rows in groups.items()]


def open_count(request):
    """The nav's open-incident badge; tells the page (incidents-changed) when what is open changed since `seen`."""
    if not request.user.is_authenticated:
        if request.htmx:
            # The session ended under a page left open all day: send the whole page to the login form (every page
            # polls this badge), rather than swap the form into the badge.
            return HttpResponseClientRedirect(redirect_to_login(request.htmx.current_url_abs_path or "/").url)
        return redirect_to_login(request.get_full_path())
    summary = selectors.open_incidents_summary()
    response = render(request, "base.html#open-incidents", {"nav_open": summary})
    if request.GET.get("seen") != summary.signature:
        trigger_client_event(response, "incidents-changed")
    return response


@login_required
@vary_on_headers("HX-Request")
def incident_page(request, pk):
    incident = get_object_or_404(selectors.incidents_list(), pk=pk)
    context = incident_context(request, incident)
    part = request.GET.get("part")
    if request.htmx and part == "playbooks":
        # A playbook moves nodes and mitigates: header, impact, timeline and nodes follow it out of band.
        context["oob"] = True
        template = "incidents/incident.html#incident-playbooks-acted"
        return _partial(request, template, context, polling=context["playbooks_active"])
    if request.htmx and part in PARTS:
        return _partial(request, f"incidents/incident.html#incident-{part}", context, polling=incident.is_open)
    return render(request, "incidents/incident.html", context)


def incident_context(request, incident: Incident, *, error: str = "") -> dict:
    user, assignees, now = request.user, list(incident.assignees.all()), timezone.now()
    playbooks = selectors.incident_playbooks_get(incident=incident)
    return {
        "incident": incident,
        "impact": selectors.incident_impact(incident=incident, now=now),
        "alerts": list(incident.alerts.select_related("node", "gpu").order_by("status", "-last_seen_at")),
        "nodes": list(incident.nodes.all()),
        "assignees": assignees,
        "timeline": selectors.incident_timeline_get(incident=incident),
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
    context = {**incident_context(request, selectors.incidents_list().get(pk=pk), error=error), "oob": request.htmx}
    if request.htmx:
        # The actions box is the target; header, impact and timeline come along as out-of-band swaps.
        return render(request, "incidents/incident.html#incident-acted", context)
    return render(request, "incidents/incident.html", context, status=409)
