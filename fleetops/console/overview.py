"""The fleet overview: goodput of the last 24 h, open incidents, suspect and lemon nodes, the node grid, the runs.

It shows the record (runs) and the response (incidents) side by side, so it lives here, above both apps."""

import functools
from collections import Counter
from datetime import timedelta
from html import escape
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.vary import vary_on_headers

from fleetops import paging
from fleetops.pagecache import page_cached
from incidents import selectors as incident_selectors
from incidents.playbooks import spares
from runs import selectors
from runs.models import Node, Run

LIVE_S = 10  # the overview's figures refresh this often, like the board
# Above this many nodes the grid comes with the page only when asked (?part=grid): console.js asks when it scrolls
# into view, a browser without scripts by the grid's link. 16,384 cells are 1.5 MB of HTML, which a phone with its CPU
# slowed 4x took 4.5-5.8 s to parse and lay out before the page's scripts ran (docs/PERFORMANCE.md); 2,048 nodes (the
# Llama 3 fleet) are an eighth of that, and come with the page.
GRID_INLINE_NODES = 2_048
RUNS_PAGE = 25  # rows of the overview's run table a page: a fleet's months of runs are ?page=2 and on


@login_required
@vary_on_headers("HX-Request")
@page_cached
def overview(request):
    if request.htmx and not request.htmx.history_restore_request and request.GET.get("part") == "live":
        # The figures' 10 s refresh: not the run table's reads, which refresh on their own poll.
        return render(
            request,
            "console/overview.html#fleet-live",
            _live_context(timezone.now(), selectors.node_states_by_cluster()),
        )
    part = request.GET.get("part")
    if request.htmx and not request.htmx.history_restore_request and part == "grid":
        return render(request, "console/overview.html#grid-racks", _grid_context())
    state = request.GET.get("state", "")
    if state not in Run.State.values:
        state = ""
    total = selectors.runs_count(state=state)
    page = paging.page_get(request, total=total, size=RUNS_PAGE)
    if page is None:
        return HttpResponseBadRequest("page: a whole number of 1 or more", content_type="text/plain")
    runs = selectors.runs_list(state=state, first=page.first, limit=page.size)
    context = {
        "runs": runs,
        "run_states": Run.State.values,
        "state": state,
        "pager": paging.pager(request, "overview", page, shown=len(runs), total=total),
        # What the table's poll asks for: this page, with its filter.
        "table_url": reverse("overview") + (f"?{request.GET.urlencode()}" if request.GET else ""),
        "pending_events": selectors.events_pending_count(),
    }
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, "console/overview.html#run-table", context)
    now, clusters = timezone.now(), selectors.node_states_by_cluster()
    context |= {
        "clusters": clusters,
        "spare_pools": spares.spare_pools_get(now=now),
        "node_states": Node.STATES,
        "interruptions": selectors.interruptions_recent(),
        "quarantined_events": selectors.events_quarantined_count(),
        **_live_context(now, clusters),
    }
    # A large fleet's grid waits until it is wanted; the page asked with ?part=grid (the link for a browser without
    # scripts) draws it in place.
    context["grid_later"] = context["node_total"] > GRID_INLINE_NODES and part != "grid"
    if not context["grid_later"]:
        context |= _grid_context()
    return render(request, "console/overview.html", context)


def _grid_context() -> dict:
    """Every node's cell, by cluster and rack: drawn with the page, not refreshed (16,384 cells)."""
    grid = selectors.node_grid_get()
    in_incident = incident_selectors.nodes_in_open_incidents()
    node_url = reverse("node-page", args=["-"])[:-1]  # one reverse a page, not one a rack (512 racks) or a cell
    return {
        "grid": [(row, _grid_cells(row, in_incident, node_url)) for row in grid],
        "grid_width": max((len(row.nodes) for row in grid), default=0),
    }


def _live_context(now, clusters: list[selectors.ClusterSummary]) -> dict:
    """What the on-call looks at first, refreshed every LIVE_S: goodput now, what is open and what it burns, which
    nodes are bad, how many nodes are in each state."""
    goodput_24h = selectors.fleet_goodput_get(since=now - timedelta(hours=24), until=now, now=now).total
    suspect_count, suspects = selectors.suspect_nodes_get(limit=8)
    lemon_count, lemons = incident_selectors.lemon_nodes_get(limit=8)
    state_counts = Counter()
    for summary in clusters:
        state_counts.update(summary.by_state)
    open_board = incident_selectors.incident_board_get(first=0, size=8, now=now, open_only=True)
    return {
        "now": now,
        "live_s": LIVE_S,
        "grid_legend": [(value, label, state_counts[value]) for value, label in Node.STATES],
        "node_total": sum(state_counts.values()),
        "goodput_24h": goodput_24h if goodput_24h.wall_clock_s > 0 else None,
        # The board's first rows, in its order: what needs a person first, then by what it burns now.
        "open_board": open_board,
        "open_summary": open_board.summary,  # the nav badge's too, from the board's one read of what is open
        "suspect_count": suspect_count,
        "suspects": suspects,
        "lemon_count": lemon_count,
        "lemons": lemons,
    }


def _grid_cells(row: selectors.RackRow, in_incident: set[str], node_url: str) -> str:
    """A rack's cells as HTML. Built here, not by a template loop: a loop costs ~0.3 ms a cell, ~0.6 s at 2,000
    nodes; a cell here is a dictionary lookup once its node and state have been seen."""
    cells = (_grid_cell(node_url, hostname, state, hostname in in_incident) for hostname, state in row.nodes)
    return mark_safe("".join(cells))  # noqa: S308 -- escaped in _grid_cell


@functools.lru_cache(maxsize=65_536)
def _grid_cell(node_url: str, hostname: str, state: str, hot: bool) -> str:
    """One node's cell. Hostnames and states come from events: escaped as autoescape would."""
    url, host, state = escape(node_url + quote(hostname)), escape(hostname), escape(state)
    return f'<a href="{url}" class="cell s-{state}{" hot" if hot else ""}" title="{host} · {state}"></a>'
