"""The incident page at 16,384 nodes (issue 20): a fault on every node of a run is a few screens, not 18,518 px of
hostnames, and renders under 300 ms of server time."""

import re
import statistics
import time

import pytest

from tests.console.big_fleet import NODES, build_big_fleet

pytestmark = pytest.mark.django_db

SERVER_MS = 300


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


def test_an_incident_on_every_node_of_a_16384_node_run_folds_its_hosts(ana, big_incident):
    html = ana.get(big_incident.get_absolute_url()).content.decode()
    assert html.count("gpu-0") < 200  # hostnames: the 16,384 alerts, nodes and the step output are folded
    assert f"{NODES:,} alerts</b> like the latest" in html
    assert "gpu-[00001-16384]" in html  # the alerts' hosts and the affected nodes
    assert "job 4242 running on gpu-[00001-00006,00008-16385]" in html  # the step output, folded at the source
    assert len(re.findall(r'<li id="entry-', html)) == 2  # the opened and the note entries stay in view...
    assert f"<b>{NODES:,} alerts</b> until" in html  # ...the alerts between them are one burst
    assert 'name="node" id="playbook-node" required value="gpu-00007"' in html  # typed, not 16,384 options
    assert "and 16,382 more, in the host list" in html  # the two draining nodes are named, the rest folded


def test_the_16384_node_incident_page_renders_under_300_ms(ana, big_incident):
    url = big_incident.get_absolute_url()
    ana.get(url)  # warm: templates compiled, the session read once
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        response = ana.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    median = statistics.median(timings)
    print(f"\nincident page, {NODES:,} nodes and alerts: median {median:.0f} ms of {[round(t) for t in timings]}")
    assert median < SERVER_MS


def test_the_overview_draws_every_one_of_16384_nodes_by_rack_under_500_ms(ana, big_incident):
    ana.get("/")
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        html = ana.get("/").content.decode()
        timings.append((time.perf_counter() - started) * 1000)
    grid = html[html.index('id="grid-racks"') :]
    assert grid.count('class="cell s-') == NODES and grid.count('class="rack"') == NODES // 32
    assert grid.count('class="cell s-draining hot"') == 2  # in the open incident, and draining
    median = statistics.median(timings)
    print(f"\noverview, {NODES:,} nodes: median {median:.0f} ms of {[round(t) for t in timings]}")
    assert median < 500


def test_the_board_names_a_16384_node_incidents_hosts_folded(ana, big_incident):
    row = ana.get("/incidents/").content.decode()
    row = row[row.index(f'id="incident-{big_incident.pk}"') :]
    row = row[: row.index("</tr>")]
    assert 'title="gpu-[00001-16384]"' in row and "(16,384)" in row
