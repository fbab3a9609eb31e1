"""The postmortem page: read, edit in Markdown with a live preview, versions, review, action items, export.

Anyone signed in reads; editing, reviewing and action items need the oncall or admin role: a refusal leaves an
audit entry and answers 403 (incidents.pages.incident.acting_actor).
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.dateparse import parse_date
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from fleetops.roles import can_act
from incidents import services
from incidents.domain.postmortem import to_html
from incidents.models import ActionItem, Incident, Postmortem
from incidents.pages.incident import acting_actor
from incidents.postmortems import services as postmortems

EDIT = "edit the postmortems of"
ACTIONS = ("draft", "save", "review", "close", "item", "done")


def _page(request, incident: Incident, *, error: str = "", markdown: str | None = None, status: int = 200):
    postmortem = Postmortem.objects.filter(incident=incident).first()
    text = markdown if markdown is not None else (postmortem.markdown if postmortem else "")
    context = {
        "incident": incident,
        "postmortem": postmortem,
        "markdown": text,
        "html": mark_safe(to_html(text)),  # to_html sanitizes with nh3
        "versions": list(postmortem.versions.all()[:50]) if postmortem else [],
        "items": list(postmortems.action_items_list(incident=incident)),
        "users": list(get_user_model().objects.filter(is_active=True).order_by("username")),
        "can_act": can_act(request.user),
        "needs_review": incident.severity != Incident.Severity.SEV4,
        "error": error,
    }
    return render(request, "incidents/postmortem.html", context, status=status)


@login_required
def postmortem_page(request, pk):
    return _page(request, get_object_or_404(Incident, pk=pk))


@login_required
def postmortem_markdown(request, pk):
    postmortem = get_object_or_404(Postmortem, incident_id=pk)
    response = HttpResponse(postmortems.postmortem_export(postmortem=postmortem), content_type="text/markdown")
    response["Content-Disposition"] = f'attachment; filename="incident-{pk}-postmortem.md"'
    return response


@require_POST
@login_required
def postmortem_preview(request, pk):
    """The live preview: the textarea's Markdown as sanitized HTML (writes nothing)."""
    get_object_or_404(Incident, pk=pk)
    return render(request, "incidents/postmortem.html#postmortem-preview", {"html": mark_safe(to_html(_md(request)))})


def _md(request) -> str:
    return request.POST.get("markdown", "")


@require_POST
@login_required
def postmortem_act(request, pk, action):
    """draft, save, review, close, item (add), done (complete an item): each one service call."""
    incident = get_object_or_404(Incident, pk=pk)
    actor = acting_actor(request, incident, "close" if action == "close" else EDIT)
    postmortem = Postmortem.objects.filter(incident=incident).first()
    try:
        if action == "draft":
            postmortems.postmortem_draft(incident=incident, actor=actor)
        elif postmortem is None and action in ("save", "review"):
            raise postmortems.PostmortemError("There is no postmortem yet: draft one first.")
        elif action == "save":
            postmortems.postmortem_save(postmortem=postmortem, actor=actor, markdown=_md(request))
        elif action == "review":
            postmortems.postmortem_review(postmortem=postmortem, actor=actor)
        elif action == "close":
            services.incident_close(incident=incident, actor=actor)
        elif action == "item":
            _item_add(request, incident, actor)
        elif action == "done":
            item = get_object_or_404(ActionItem, pk=_id(request, "item"), incident=incident)
            postmortems.action_item_complete(item=item, actor=actor)
    except BadInput as wrong:
        return _page(request, incident, error=str(wrong), markdown=_md(request) or None, status=400)
    except (postmortems.PostmortemError, services.IncidentError) as refused:
        incident.refresh_from_db()
        return _page(request, incident, error=str(refused), markdown=_md(request) or None, status=409)
    return redirect("incident-postmortem", pk=pk)


class BadInput(ValueError):
    """A field of the form that is not what it must be: the page again, 400, saying which and why."""


def _id(request, field: str) -> int | None:
    """The form's `field` as a row id: None when empty, BadInput when it is not a whole number (the database would
    refuse it with an error, a 500)."""
    value = request.POST.get(field, "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise BadInput(f"{field}: must be the number of one, not {value[:40]!r}")
    return int(value)


def _item_add(request, incident, actor):
    owner_id = _id(request, "owner")
    owner = get_object_or_404(get_user_model(), pk=owner_id) if owner_id else None
    due = request.POST.get("due_on", "").strip()
    try:
        due_on = parse_date(due) if due else None
    except ValueError:
        due_on = None
    if due and due_on is None:
        raise postmortems.PostmortemError("The due date must be YYYY-MM-DD.")
    postmortems.action_item_add(
        incident=incident, actor=actor, text=request.POST.get("text", ""), owner=owner, due_on=due_on
    )


@login_required
def action_items(request):
    show_all = request.GET.get("all") == "1"
    items = postmortems.action_items_list(open_only=not show_all)[:500]
    return render(request, "incidents/action_items.html", {"items": items, "show_all": show_all})
