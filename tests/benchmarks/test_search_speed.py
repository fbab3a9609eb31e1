"""The search box on the loaded 54-day, 16,384-GPU run (issue 20 bound: results in under 200 ms, read as the p95 of
each query's whole request).

GET /search?q= in-process (Django's test client, signed in as a viewer, no socket: the server's own time), each query
CALLS times, for a few representative queries: an incident's number, a hostname typed whole and its start, the run's
name, words in incident titles and postmortems, a word every postmortem holds, a miss. Baseline, timed in the same
run on the same rows: the selector alone, and the plain substring match (what SQLite gets) through it, as many times.

The loaded run holds its incidents (detection runs during the load) but no postmortem: one is drafted when an
incident is resolved, which the load never does. Every incident's postmortem is drafted here from the record by the
real service, inside a transaction rolled back at the end: the database is left as it was loaded.
"""

import time

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from fleetops.console.search.query import query_parse
from fleetops.console.search.selectors import search_get
from fleetops.roles import VIEWER
from incidents.models import Incident, Postmortem
from incidents.postmortems.services import postmortem_draft
from incidents.services import FLEETOPS
from runs.models import Node, Run

from .conftest import median_p95_ms, report, say, timed

BOUND_MS = 200  # p95 of the whole request, each query (issue 20)
CALLS = 30
VIEWER_NAME = "bench-search-viewer"


@pytest.fixture(scope="module")
def drafted(loaded_run):
    """Every incident's postmortem, drafted from the record, rolled back after the module."""
    with transaction.atomic():
        started = time.perf_counter()
        for incident in Incident.objects.order_by("pk"):
            postmortem_draft(incident=incident, actor=FLEETOPS)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE incidents_postmortem")
        count = Postmortem.objects.count()
        say(f"search: {count} postmortems drafted in {time.perf_counter() - started:.1f} s (rolled back afterwards)")
        yield count
        transaction.set_rollback(True)


@pytest.fixture(scope="module")
def viewer(drafted) -> Client:
    user, _ = User.objects.get_or_create(username=VIEWER_NAME)
    user.groups.set([Group.objects.get_or_create(name=VIEWER)[0]])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(scope="module")
def queries(loaded_run, drafted) -> list[tuple[str, str]]:
    """(what it stands for, what is typed), from the loaded run's own names."""
    node = Node.objects.filter(interruptions__isnull=False).order_by("hostname").first()
    incident = Incident.objects.order_by("-started_at").first()
    assert node is not None and incident is not None, "the loaded run has no interrupted node or no incident"
    return [
        ("an incident's number", f"#{incident.pk}"),
        ("a hostname", node.hostname),
        ("a hostname's start", node.hostname[:-2]),
        ("the run's name", Run.objects.get(name=loaded_run.name).name),
        ("words", "ecc errors"),
        ("a phrase", '"recommends node reboot"'),
        ("a word in every postmortem", "gpu"),
        ("a miss", "nothing-matches-this"),
    ]


def _requestmedian_p95_ms(client: Client, params: dict, **headers) -> tuple[float, float]:
    for _ in range(3):  # warm: templates, the URL resolver, the planner's first look at each table
        assert client.get("/search", params, **headers).status_code == 200
    responses = []
    samples = timed(lambda: responses.append(client.get("/search", params, **headers)), CALLS)
    assert all(r.status_code == 200 for r in responses)
    return median_p95_ms(samples)


def test_search_speed(viewer, queries, drafted):
    incidents, nodes = Incident.objects.count(), Node.objects.count()
    say(f"search: {incidents} incidents, {drafted} postmortems, {nodes:,} nodes, {Run.objects.count()} runs")
    # The floor: the page with no query, its hint in the console's frame (the session, the top bar's count of open
    # incidents), which every page pays.
    floor = _requestmedian_p95_ms(viewer, {})
    report("search: no query (the page's frame: the floor), request p50 / p95 ms", f"{floor[0]:.1f} / {floor[1]:.1f}")
    missed = []
    for name, text in queries:
        p50, p95 = _requestmedian_p95_ms(viewer, {"q": text})
        query = query_parse(text)
        full = search_get(query=query)
        assert full.full_text, "the benchmarks run on PostgreSQL: full-text search expected"
        selector = median_p95_ms(timed(lambda query=query: search_get(query=query), CALLS))
        plain = median_p95_ms(timed(lambda query=query: search_get(query=query, full_text=False), CALLS))
        with CaptureQueriesContext(connection) as captured:
            viewer.get("/search", {"q": text})
        counts = ", ".join(f"{g.kind} {g.total}" for g in full.groups)
        report(
            f"search: {name} ({text}), request p50 / p95 ms",
            f"{p50:.1f} / {p95:.1f}",
            f"selector p50 {selector[0]:.1f} ms, plain match {plain[0]:.1f} ms",
            f"{len(captured)} queries; found {counts}",
            bound=f"{BOUND_MS} ms",
        )
        if p95 >= BOUND_MS:
            missed.append(f"{text!r}: p95 {p95:.1f} ms")
    # What typing costs: the live panel under the box (htmx, 5 a kind, no frame) for a hostname's start.
    text = queries[2][1]
    live = _requestmedian_p95_ms(viewer, {"q": text}, HTTP_HX_REQUEST="true")
    report(
        f"search: live panel ({text}), request p50 / p95 ms", f"{live[0]:.1f} / {live[1]:.1f}", bound=f"{BOUND_MS} ms"
    )
    if live[1] >= BOUND_MS:
        missed.append(f"live panel {text!r}: p95 {live[1]:.1f} ms")
    assert not missed, f"over the {BOUND_MS} ms bound: " + "; ".join(missed)
