"""The incident board: what needs a person first, with live impact, filtered and paged; the nav's count of it."""

from django import forms
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from fleetops import paging
from incidents import selectors
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
def board(request):
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
        "open_summary": board_page.summary,  # the nav badge's, from the same read (None when filtered: the tag reads)
        # One reverse per kind of link, not three a row: 200 rows made 600 reverse() calls, a tenth of the board.
        "urls": {name.replace("-", "_"): reverse(name, args=[arg])[: -len(str(arg))] for name, arg in _LINKS},
    }
    if request.htmx and not request.htmx.history_restore_request:
        # The poll re-renders this page only (BOARD_PAGE rows at most). Nothing open: the list stops polling; the
        # nav's open count (open_count) still watches and fires incidents-changed, on which the list reloads once.
        return polling_partial(request, "incidents/board.html#incident-list", context, polling=polling)
    return render(request, "incidents/board.html", context)


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
