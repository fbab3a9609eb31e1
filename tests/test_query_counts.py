"""Queries per page are bounded: no page's or API list's query count grows with the number of nodes, runs, events.

Each test builds a small fleet, counts the queries of every page, grows the same fleet (more clusters, runs, nodes,
interruptions, Xid events, alerts, incidents, action items, deliveries), counts again and requires the same
count, and each count under the page's recorded cap (pytest-django's django_assert_max_num_queries).
"""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.utils import timezone

from incidents import services
from incidents.models import Alert, Delivery, Incident, WebhookEndpoint
from incidents.postmortems import services as postmortems
from incidents.reports import services as reports
from runs.models import GPU
from tests.stories import event

BATCH = "application/cloudevents-batch+json"
BASE = (timezone.now() - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)

# The most queries each page may make at any size: the count measured when this was written (in the comment), plus a
# little room. A page over its cap, or one whose count moves with the fleet's size, has a new per-row query.
PAGE_CAPS = {  # every page 3 for the nav's count of what needs a person, 1 for the person's time zone
    "overview": 37,  # 35: the spare pools 6 of them, however many clusters; the board's first rows 4; shrunk attempts 2
    "fleet": 12,  # 11: the runs' shrunk attempts 1
    "run": 32,  # 29, 31 on PostgreSQL (6 of them its data-quality findings; its shrunk attempts 1; its checkpoint
    # I/O 3: its writes, its nodes, the cluster's storage load)
    "node": 15,  # 13, 14 on PostgreSQL
    "board": 15,  # 14: the page's rows; the counts of all pages; the runs' shrunk attempts 1
    "incident": 25,  # 24: alerts in 3 (counts, hosts, each kind's newest), the timeline in 2 (ids, entries shown)
    "postmortem": 14,  # 12, 13 on PostgreSQL
    "reports": 8,  # 7
    "report": 8,  # 7
    "action-items": 8,  # 7
    "deliveries": 9,  # 8
}
API_CAPS = {
    "runs": 5,  # 4
    "run": 4,  # 3
    "run-attempts": 7,  # 6
    "run-interruptions": 6,  # 5
    "run-checkpoints": 6,  # 5
    "nodes": 5,  # 4
    "node": 6,  # 5
    "incidents": 12,  # 10
    "incident": 12,  # 10
    "run-goodput": 15,  # 12, 14 on PostgreSQL: 6, and 6 for its data-quality findings (starts, restores, failures,
    # checkpoints)
    "run-advice": 12,  # 10, 11 on PostgreSQL: the record version and its two-tier measure (its interruptions,
    # checkpoints and shrunk attempts)
    "fleet-goodput": 6,  # 5
    "run-checkpoint-io": 12,  # 10, 11 on PostgreSQL: the run and its cluster, the record version, its writes, its
    # nodes (GPUs a node), the cluster's storage load, and the advice inputs' M and R
}


def at(minutes: float) -> object:
    return BASE + timedelta(minutes=minutes)


def run_story(run: int, failures: range, *, nodes: int) -> list[dict]:
    """Run r{run} on `nodes` nodes of cluster c{run}: started once, then a failure and restart an hour for each of
    `failures`.

    Every failure is an Xid storm on the run's first node, the scheduler's cordon and a restart: a new incident.
    """
    name, offset = f"r{run}", run * 7
    hosts = [f"{name}-n{j}" for j in range(nodes)]
    e = []

    def add(type_, minutes, key, **data):
        e.append(event(type_, at(offset + minutes), f"{name}-{key}", **data))

    if failures.start == 0:
        add("run.started", 0, "start", run=name, cluster=f"c{run}", gpus=8 * nodes, nodes=hosts, job_id=f"{run}00")
    for k in failures:
        t = 60 * k
        add("run.step", t + 10, f"{k}-step", run=name, step=2 * k + 1)
        add("checkpoint.started", t + 20, f"{k}-ckpt", run=name, step=2 * k + 1)
        add(
            "checkpoint.completed",
            t + 20.5,
            f"{k}-ckpt-done",
            run=name,
            step=2 * k + 1,
            blocking_s=20.0,
            bytes=10**9,
            tier="durable",
        )
        for i in range(5):
            add("gpu.xid", t + 44 + i / 100, f"{k}-xid-{i}", node=hosts[0], gpu=k % 8, xid=79, message="fell off")
        add("node.heartbeat", t + 44, f"{k}-hb", node=hosts[-1])
        add("run.failed", t + 45, f"{k}-failed", run=name, reason="Xid 79", node=hosts[0], gpu=k % 8, xid=79)
        add("node.state", t + 47, f"{k}-cordon", node=hosts[0], state="cordoned", reason="Xid 79")
        add("node.state", t + 50, f"{k}-back", node=hosts[0], state="in_service", reason="reset")
        add(
            "run.started",
            t + 55,
            f"{k}-restart",
            run=name,
            cluster=f"c{run}",
            gpus=8 * nodes,
            nodes=hosts,
            job_id=f"{k}",
        )
        add("run.restored", t + 58, f"{k}-restored", run=name, from_step=2 * k + 1)
    return e


@pytest.fixture
def fleet(post, django_user_model):
    """grow(runs, nodes, failures): the fleet at that size, grown in place (r0 and r0-n0 are always there)."""
    users = [django_user_model.objects.create_user(f"user{i}") for i in range(12)]
    oncall = users[0]
    oncall.groups.add(Group.objects.get(name="oncall"))
    actor = services.Actor.of_user(oncall)
    endpoint = WebhookEndpoint.objects.create(name="hook", url="http://127.0.0.1:9/hook", events=[])
    size = {"runs": 0, "failures": 0, "items": 0}

    def grow(*, runs: int, nodes: int, failures: int, items: int):
        events = []
        for run in range(runs):
            done = size["failures"] if run < size["runs"] else 0
            events += run_story(run, range(done, failures), nodes=nodes)
        events += [event("node.heartbeat", at(1), f"spare-{j}", node=f"spare-{j}") for j in range(nodes * runs)]
        post(events)
        size.update(runs=runs, failures=failures)
        first = Incident.objects.order_by("id").first()
        postmortem = postmortems.postmortem_draft(incident=first, actor=actor)
        postmortems.postmortem_save(postmortem=postmortem, actor=actor, markdown=f"edit {failures}")
        for i in range(size["items"], items):
            owner = users[i % len(users)]
            postmortems.action_item_add(incident=first, actor=actor, text=f"item {i}", owner=owner)
        size["items"] = items
        for i in range(failures):  # the first incident's own alerts, notes and nodes grow too
            gpu = GPU.objects.filter(node__hostname=f"r0-n{i}").first() or GPU.objects.first()
            Alert.objects.get_or_create(
                incident=first,
                fingerprint=f"ecc:{i}",
                defaults={
                    "kind": "ecc",
                    "severity": "warning",
                    "summary": "ECC",
                    "node": gpu.node,
                    "gpu": gpu,
                    "first_seen_at": at(i),
                    "last_seen_at": at(i),
                },
            )
            first.nodes.add(gpu.node)
            services.incident_note_add(incident=first, actor=services.Actor.of_user(users[i]), text=f"note {i}")
        for incident in Incident.objects.filter(deliveries__isnull=True):
            entry = incident.timeline.order_by("id").first()
            Delivery.objects.create(
                endpoint=endpoint, incident=incident, entry=entry, event="triggered", payload={}, created_at=at(0)
            )
        now = timezone.now()
        report = reports.report_generate(since=now - timedelta(days=7 + failures), until=now, now=now)
        return {"report": report, "incident": first}

    return oncall, grow


SMALL = {"runs": 2, "nodes": 5, "failures": 2, "items": 2}
LARGE = {"runs": 6, "nodes": 15, "failures": 6, "items": 10}


def _count(client, url, at_most) -> int:
    """The queries of one GET with a cold cache (the most a page costs: run pages keep their goodput in it), failing
    as django_assert_max_num_queries does when they are more than the page's cap."""
    cache.clear()
    with at_most as queries:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(queries)


def _pages(built) -> dict[str, str]:
    incident = built["incident"].pk
    return {
        "overview": "/",
        "fleet": "/fleet",
        "run": "/runs/r0",
        "node": "/nodes/r0-n0",
        "board": "/incidents/",
        "incident": f"/incidents/{incident}",
        "postmortem": f"/incidents/{incident}/postmortem",
        "reports": "/reports/",
        "report": f"/reports/{built['report'].pk}",
        "action-items": "/incidents/action-items?all=1",
        "deliveries": "/incidents/deliveries",
    }


def _api(built) -> dict[str, str]:
    return {
        "runs": "/api/v1/runs",
        "run": "/api/v1/runs/r0",
        "run-attempts": "/api/v1/runs/r0/attempts",
        "run-interruptions": "/api/v1/runs/r0/interruptions",
        "run-checkpoints": "/api/v1/runs/r0/checkpoints",
        "nodes": "/api/v1/nodes",
        "node": "/api/v1/nodes/r0-n0",
        "incidents": "/api/v1/incidents",
        "incident": f"/api/v1/incidents/{built['incident'].pk}",
        "run-goodput": "/api/v1/runs/r0/goodput",
        "run-advice": "/api/v1/runs/r0/advice",
        "fleet-goodput": "/api/v1/fleet/goodput",
        "run-checkpoint-io": "/api/v1/runs/r0/checkpoint-io",
    }


def _measure(client, fleet, urls_of, caps, assert_max) -> tuple[dict, dict]:
    user, grow = fleet
    client.force_login(user)
    small_urls = urls_of(grow(**SMALL))
    small = {name: _count(client, url, assert_max(caps[name])) for name, url in small_urls.items()}
    large_urls = urls_of(grow(**LARGE))
    large = {name: _count(client, url, assert_max(caps[name])) for name, url in large_urls.items()}
    return small, large


def test_the_fleet_grows_between_the_two_sizes(fleet):
    from runs.models import Cluster, Event, Interruption, Node, Run

    _, grow = fleet
    grow(**SMALL)
    models = (Cluster, Run, Node, Interruption, Event, Incident)
    small = [m.objects.count() for m in models]
    grow(**LARGE)
    large = [m.objects.count() for m in models]
    assert all(b >= 3 * a for a, b in zip(small, large, strict=True)), (small, large)


def test_no_page_makes_more_queries_for_a_bigger_fleet(client, fleet, django_assert_max_num_queries):
    small, large = _measure(client, fleet, _pages, PAGE_CAPS, django_assert_max_num_queries)
    assert large == small, {name: (small[name], large[name]) for name in small if small[name] != large[name]}


def test_no_api_list_makes_more_queries_for_a_bigger_fleet(client, fleet, django_assert_max_num_queries):
    small, large = _measure(client, fleet, _api, API_CAPS, django_assert_max_num_queries)
    assert large == small, {name: (small[name], large[name]) for name in small if small[name] != large[name]}
