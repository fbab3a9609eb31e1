"""The incident board: what needs a person first, with live impact, filtered and paged; the nav's count of it."""

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from fleetops import paging
from fleetops.pagecache import page_cached
from fleetops.roles import can_act
from incidents import selectors, services
from incidents.models import Incident
from incidents.pages.polling import polling_partial

BOARD_PAGE = 50  # rows of the board a page: rendering is most of its time (200 rows, ~130 ms)
_LINKS = (("incident-page", 0), ("run-page", "-"), ("node-page", "-"))


OPEN = ""  # the board's default: every open incident, whatever its status
ALL = "all"


class BoardFilterForm(forms.Form):
    status = forms.ChoiceField(
        choices=[(OPEN, "open"), *Incident.Status.choices, (ALL, "all")], required=False, label="Status"
    )
    severity = forms.ChoiceField(choices=[("", "any"), *Incident.Severity.choices], required=False)
    run = forms.CharField(required=False, max_length=200, widget=forms.TextInput(attrs={"placeholder": "run name"}))
    node = forms.CharField(required=False, max_length=200, widget=forms.TextInput(attrs={"placeholder": "hostname"}))

    def selector_kwargs(self) -> dict:
        """incidents_list() arguments; a filter that does not parse is ignored rather than shown as an error."""
        data = self.cleaned_data if self.is_valid() else {}
        status = data.get("status", OPEN)
        return {
            "open_only": status == OPEN,
            "status": "" if status in (OPEN, ALL) else status,
            "severity": data.get("severity", ""),
            "run": data.get("run", "").strip(),
            "node": data.get("node", "").strip(),
        }


@login_required
@vary_on_headers("HX-Request")
@page_cached
def board(request):
    return _board(request)


def _board(request, *, note: str = ""):
    """The board, or (asked by htmx) its list; `note` says what an action just did, above the list."""
    form = BoardFilterForm(request.GET)
    filters = form.selector_kwargs()
    counts = selectors.incident_counts_get(**filters)
    total = sum(count.total for count in counts)
    page = paging.page_get(request, total=total, size=BOARD_PAGE)
    if page is None:
        return HttpResponseBadRequest("page: a whole number of 1 or more", content_type="text/plain")
    now = timezone.now()
    board_page = selectors.incident_board_get(first=page.first, size=page.size, now=now, **filters)
    shown = sum(len(rows) for _, rows, _ in board_page.groups)
    # Live while anything matching the filters is open, on whichever page it is.
    polling = any(count.open for count in counts)
    context = {
        "form": form,
        "groups": board_page.groups,
        "severity_counts": [(count.severity, count.open) for count in counts],
        "polling": polling,
        "query": request.GET.urlencode(),
        "pager": paging.pager(request, "incident-board", page, shown=shown, total=total),
        "now": now,
        "can_act": can_act(request.user),
        "note": note,
        "open_summary": board_page.summary,  # the nav badge's, from the same read (None when filtered: the tag reads)
        # One reverse per kind of link, not three a row: 200 rows made 600 reverse() calls, a tenth of the board.
        "urls": {name.replace("-", "_"): reverse(name, args=[arg])[: -len(str(arg))] for name, arg in _LINKS},
    }
    if request.htmx and not request.htmx.history_restore_request:
        # The poll re-renders this page only (BOARD_PAGE rows at most). Nothing open: the list stops polling; the
        # nav's open count (open_count) still watches and fires incidents-changed, on which the list reloads once.
        return polling_partial(request, "incidents/board.html#incident-list", context, polling=polling)
    return render(request, "incidents/board.html", context)


BULK_LIMIT = 200  # incidents one bulk acknowledge may name: more than the board's page shows


@require_POST
@login_required
def acknowledge(request):
    """Acknowledge the incidents the board names: one (its row's button, or the "a" key: `one`) or those ticked
    (`ids`). Each goes through services.incident_acknowledge, so each gets its own timeline entry; one acknowledged
    (or resolved) meanwhile by someone else is passed over and said so. Then the board's list, as it is now."""
    raw = [request.POST["one"]] if request.POST.get("one") else request.POST.getlist("ids")
    if not raw:
        return HttpResponseBadRequest("ids: tick at least one incident to acknowledge", content_type="text/plain")
    if len(raw) > BULK_LIMIT or not all(value.isascii() and value.isdigit() for value in raw):
        return HttpResponseBadRequest(
            f"ids: up to {BULK_LIMIT} incident numbers, whole numbers only", content_type="text/plain"
        )
    incidents = list(Incident.objects.filter(pk__in={int(value) for value in raw}).order_by("pk"))
    actor = services.Actor.of_user(request.user)
    if not can_act(request.user):
        services.actions_refused(incidents=incidents, actor=actor, action="acknowledge")
        raise PermissionDenied("You may not acknowledge incidents: that needs the oncall role.")
    done, passed = [], []
    for incident in incidents:
        try:
            services.incident_acknowledge(incident=incident, actor=actor)
            done.append(incident.pk)
        except services.IncidentError:
            passed.append(incident.pk)  # acknowledged, resolved or closed since the board showed it
    if not request.htmx:
        return redirect(reverse("incident-board") + (f"?{request.GET.urlencode()}" if request.GET else ""))
    return _board(request, note=_acknowledged_note(done, passed))


def _acknowledged_note(done: list[int], passed: list[int]) -> str:
    said = [f"Acknowledged {', '.join(f'#{pk}' for pk in done)}."] if done else []
    if passed:
        numbers = ", ".join(f"#{pk}" for pk in passed)
        said.append(f"{numbers} already acknowledged or closed by someone else: left as they were.")
    return " ".join(said)


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
