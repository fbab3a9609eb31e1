"""/search?q=: the results page, and the live panel under the top bar's box (the same view, asked by htmx)."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.vary import vary_on_headers

from fleetops.console.search import selectors
from fleetops.console.search.query import MAX_LENGTH, query_parse

LIVE_LIMIT = 5  # results a kind in the panel under the box; Enter opens the page with up to selectors.LIMIT


@login_required
@vary_on_headers("HX-Request")
def search(request):
    raw = request.GET.get("q", "")
    live = bool(request.htmx) and not request.htmx.history_restore_request
    template = "console/search.html#search-live" if live else "console/search.html"
    if len(raw) > MAX_LENGTH:
        error = f"A search is at most {MAX_LENGTH} characters; this one has {len(raw):,}. Shorten it and try again."
        return render(request, template, {"search_q": raw[:MAX_LENGTH], "error": error}, status=400)
    query = query_parse(raw)
    results = selectors.search_get(query=query, limit=LIVE_LIMIT if live else selectors.LIMIT)
    return render(request, template, {"search_q": query.text, "results": results})
