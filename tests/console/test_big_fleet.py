"""The incident page at 16,384 nodes (issue 20): a fault on every node of a run is a few screens, not 18,518 px of
hostnames, and renders under 300 ms of server time; the overview draws every node (once scrolled to), the board
folds their names, and the page's polls read only what they show."""

import re
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.console.big_fleet import NODES, build_big_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def big_incident():
    return build_big_fleet()


@pytest.fixture
def ana(client, django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("ana")
    user.groups.add(Group.objects.get_or_create(name="oncall")[0])  # the playbook form is for who may act
    client.force_login(user)
    return client


def test_an_incident_on_every_node_of_a_16384_node_run_names_its_hosts_folded(ana, big_incident):
    html = ana.get(big_incident.get_absolute_url()).content.decode()
    assert html.count("gpu-0") < 200  # hostnames: the 16,384 alerts, nodes and the step output are folded
    assert f"{NODES:,} alerts</b> like the latest" in html
    assert "gpu-[00001-16384]" in html  # the alerts' hosts and the affected nodes
    assert "job 4242 running on gpu-[00001-00006,00008-16385]" in html  # the step output, folded at the source
    assert len(re.findall(r'<li id="entry-', html)) == 2  # the opened and the note entries stay in view...
    assert f"<b>{NODES:,} alerts</b> until" in html  # ...the alerts between them are one burst
    assert f"{NODES + 2:,} entries" in html  # and the heading counts them all
    assert 'name="node" id="playbook-node" required value="gpu-00007"' in html  # typed, not 16,384 options
    assert "and 16,382 more, in the host list" in html  # the two draining nodes are named, the rest folded

    board = ana.get("/incidents/").content.decode()
    row = board[board.index(f'id="incident-{big_incident.pk}"') :]
    row = row[: row.index("</tr>")]
    assert 'title="gpu-[00001-16384]"' in row and "(16,384)" in row

    # The impact and timeline polls (every 10 s, every open incident's page) read neither the alerts nor the nodes.
    for part in ("impact", "timeline"):
        with CaptureQueriesContext(connection) as queries:
            response = ana.get(f"{big_incident.get_absolute_url()}?part={part}", HTTP_HX_REQUEST="true")
        assert response.status_code == 200 and f'id="incident-{part}"' in response.content.decode()
        read = " ".join(query["sql"] for query in queries.captured_queries)
        assert "incidents_alert" not in read and "incidents_incident_nodes" not in read, part


def _fastest_ms(client, url: str, times: int = 10, headers=None) -> tuple[float, list[int]]:
    """The fastest of `times` requests after a warm-up: the server's own time, the least disturbed by whatever else
    the machine runs (the issue's bound is on the page's cost, not on the CI machine's other work). Ten, not five: on
    a shared 2-core machine whose speed swings by half for seconds at a time (7-11 ms for one fixed Python loop, run
    to run), five in a row could all land in a slow spell."""
    client.get(url, headers=headers)
    timings = []
    for _ in range(times):
        started = time.perf_counter()
        assert client.get(url, headers=headers).status_code == 200
        timings.append((time.perf_counter() - started) * 1000)
    return min(timings), [round(t) for t in timings]


@pytest.mark.serial  # timed: the pages' server time
def test_the_16384_node_incident_renders_under_300_ms_and_the_overview_draws_every_node(ana, big_incident):
    fastest, timings = _fastest_ms(ana, big_incident.get_absolute_url())
    print(f"\nincident page, {NODES:,} nodes and alerts: {timings} ms")
    assert fastest < 300

    fastest, timings = _fastest_ms(ana, "/")
    print(f"overview, {NODES:,} nodes, its grid to come: {timings} ms")
    assert fastest < 500
    page = ana.get("/").content.decode()
    assert 'class="cell s-' not in page[page.index('id="grid-racks"') :]  # past GRID_INLINE_NODES: it comes later
    fastest, timings = _fastest_ms(ana, "/?part=grid", headers={"HX-Request": "true"})
    print(f"overview's grid, {NODES:,} nodes: {timings} ms")
    assert fastest < 500
    grid = ana.get("/?part=grid", HTTP_HX_REQUEST="true").content.decode()
    assert grid.count('class="cell s-') == NODES and grid.count('class="rack"') == NODES // 32
    assert grid.count('class="cell s-draining hot"') == 2  # in the open incident, and draining
