"""A token speaks for what it is bound to (issue 15): its role, clusters, node and sources. Events outside are refused
whole with 403 naming the bound; forged node state from the right cluster still cannot drain past the breaker."""

from datetime import timedelta

import pytest
from django.utils import timezone

from incidents.models import Incident, PlaybookExecution
from runs.domain import trust
from runs.domain.cloudevents import parse_events
from runs.models import Cluster, Event, Node, Run, TokenQuota
from tests.security.conftest import client_for
from tests.stories import event

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_clusters():
    a, b = Cluster.objects.create(name="a"), Cluster.objects.create(name="b")
    Node.objects.create(hostname="a1", cluster=a)
    Node.objects.create(hostname="b1", cluster=b)
    Run.objects.create(name="run-b", cluster=b, gpu_count=8, started_at=timezone.now(), state="running")


def _state(node: str, state: str = "in_service", cluster: str | None = None, id_: str = "s1") -> dict:
    extra = {"cluster": cluster} if cluster else {}
    return event("node.state", timezone.now(), id_, node=node, state=state, reason="forged", **extra)


@pytest.mark.reliability(
    "Forged node.state from a scheduler token of another cluster",
    how="a token bound to cluster a posts node.state for b1 (cluster b), once plainly and once naming cluster a",
    outcome="403 both times, errors naming the event, data.node and cluster b; nothing stored, no quota spent "
    "(before: any events:write token could rewrite any node's state)",
)
def test_a_scheduler_token_of_another_cluster_is_refused(two_clusters, send):
    client = client_for(role="scheduler", clusters=["a"])
    for forged in (_state("b1"), _state("b1", cluster="a")):
        response = send(client, [_state("a1", id_="fine"), forged])
        assert response.status_code == 403, response.content
        (error,) = response.json()["errors"]
        assert (error["index"], error["field"]) == (1, "data.node")
        assert "node b1 is in cluster b" in error["reason"] and "cluster a" in error["reason"]
    assert not Event.objects.exists() and not TokenQuota.objects.exists()
    assert Node.objects.get(hostname="b1").cluster.name == "b"
    assert send(client, [_state("a1", "cordoned")]).status_code == 202
    assert Node.objects.get(hostname="a1").state == "cordoned"


def test_a_trainer_never_sends_node_or_gpu_state(two_clusters, send):
    client = client_for(role="trainer")
    xid = event("gpu.xid", timezone.now(), "x1", node="a1", gpu=0, xid=79, message="off the bus")
    response = send(client, [_state("a1"), xid])
    assert response.status_code == 403
    assert [(e["field"], e["reason"].split(" (")[0]) for e in response.json()["errors"]] == [
        ("type", "a token of role trainer may not send node.state"),
        ("type", "a token of role trainer may not send gpu.xid"),
    ]
    step = event("run.step", timezone.now(), "st", run="run-b", step=10)
    assert send(client, [step]).status_code == 202


def test_a_node_agent_speaks_for_its_own_node_only(two_clusters, send):
    client = client_for(role="agent", node="a1")
    beat = event("node.heartbeat", timezone.now(), "hb", node="b1")
    response = send(client, [beat])
    assert response.status_code == 403 and "its own node only, not 'b1'" in response.json()["errors"][0]["reason"]
    step = event("run.step", timezone.now(), "st", run="run-b", step=10)
    assert "role agent may not send run.step" in send(client, [step]).json()["errors"][0]["reason"]
    assert send(client, [event("node.heartbeat", timezone.now(), "hb", node="a1")]).status_code == 202


def test_runs_are_held_to_their_cluster_and_a_new_run_names_its_own(two_clusters, send):
    client = client_for(role="trainer", clusters=["a"])
    response = send(client, [event("run.step", timezone.now(), "st", run="run-b", step=10)])
    assert response.status_code == 403 and "run run-b is in cluster b" in response.json()["errors"][0]["reason"]
    unknown = send(client, [event("run.step", timezone.now(), "st", run="nobody-knows", step=1)])
    assert unknown.status_code == 403 and "is not known; name it in data.cluster" in unknown.content.decode()
    new = [
        event("run.started", timezone.now(), "go", run="run-a", cluster="a", gpus=8, nodes=["a1"], job_id="7"),
        event("run.step", timezone.now(), "st", run="run-a", step=1),
    ]
    assert send(client, new).status_code == 202
    assert Run.objects.get(name="run-a").cluster.name == "a"


def test_sources_are_held_to_their_prefix(two_clusters, send):
    client = client_for(role="scheduler", sources=["slurm://a"])
    inside = event("node.heartbeat", timezone.now(), "hb", source="slurm://a/prolog", node="a1")
    outside = event("node.heartbeat", timezone.now(), "hb", source="slurm://ab", node="a1")
    response = send(client, [inside, outside])
    assert response.status_code == 403 and response.json()["errors"][0] == {
        "index": 1,
        "field": "source",
        "reason": "this token may not send from source 'slurm://ab' (this token: role scheduler; source slurm://a)",
    }
    assert send(client, [inside]).status_code == 202


def test_the_bounds_are_pure_and_the_record_wins_over_the_event():
    (forged,), _ = parse_events([_state("b1", cluster="a")], max_batch=10)
    bounds = trust.Bounds(role=trust.SCHEDULER, clusters=frozenset({"a"}))
    named, _ = trust.clusters_named([forged])
    assert named == {"b1": "a"}
    assert not trust.out_of_bounds([forged], bounds, node_clusters=named, run_clusters={})
    (problem,) = trust.out_of_bounds([forged], bounds, node_clusters={**named, "b1": "b"}, run_clusters={})
    assert problem.field == "data.node"
    assert trust.source_allowed("/slurm/a/x", ["/slurm/a/"]) and not trust.source_allowed("/slurm/ab", ["/slurm/a"])


@pytest.mark.reliability(
    "Forged state from the right cluster: drained nodes reported back in service, fresh Xid 79s forged on others",
    how="a 40-node cluster with hot spares and a run on every node; a scheduler token bound to it forges, three "
    "rounds, an Xid 79 on a fresh node and node.state in_service for every node FleetOps drained",
    outcome="at most the breaker's 5% (2 nodes) drained; the third round's playbook is refused and a person paged "
    "(before: 8 of 40 drained)",
)
def test_forged_state_from_the_right_cluster_drains_no_more_than_the_breaker_allows(settings, send):
    settings.PLAYBOOK_MAX_OUT_SHARE = 0.05
    client = client_for(role="scheduler", clusters=["c1"])
    now = timezone.now()
    nodes = [f"x{i:02d}" for i in range(40)]
    setup = [event("node.heartbeat", now, f"hb-{n}", node=n, cluster="c1") for n in nodes]
    setup += [
        event("node.state", now, f"spare-{s}", node=s, state="hot_spare", reason="burn-in", cluster="c1")
        for s in ("s1", "s2", "s3", "s4")
    ]
    setup.append(event("run.started", now, "go", run="big", cluster="c1", gpus=320, nodes=nodes, job_id="1"))

    def post(events):
        response = send(client, events)
        assert response.status_code == 202, response.content

    post(setup)
    for round_, victim in enumerate(("x10", "x11", "x12")):
        moment = now + timedelta(seconds=10 * (round_ + 1))
        drained = list(
            PlaybookExecution.objects.filter(steps__name="drain", steps__status="succeeded").values_list(
                "node__hostname", flat=True
            )
        )
        forged = [
            event("node.state", moment, f"back-{round_}-{n}", node=n, state="in_service", reason="ok", cluster="c1")
            for n in drained
        ]
        xid = event("gpu.xid", moment, f"xid-{round_}", node=victim, gpu=0, xid=79, message="fell off the bus")
        post(forged + [xid])
    drained = set(
        PlaybookExecution.objects.filter(steps__name="drain", steps__status="succeeded").values_list(
            "node__hostname", flat=True
        )
    )
    assert drained == {"x10", "x11"}  # 5% of 40
    refused = PlaybookExecution.objects.filter(node__hostname="x12").get()
    assert refused.status == "failed" and "circuit breaker open" in refused.error
    incident = Incident.objects.get(alerts__node__hostname="x12")
    assert incident.timeline.filter(kind="paged").exists()
