"""Every run and node an event names is held to its token's bounds (issue 45), not only the run it is about: a
training job's run.failed names the node a playbook will drain, and a start's node list says which nodes join which
cluster. Refused whole with 403 naming the event, the field and the bound; nothing is stored."""

import json

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from incidents.models import Alert, Incident, PlaybookExecution
from runs.domain import trust
from runs.domain.cloudevents import parse_events
from runs.models import Attempt, Event, Node
from tests.conftest import make_token
from tests.security.conftest import client_for
from tests.stories import event

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_clusters(send):
    """Clusters a and b, each with two nodes and a run on one of them, started by its own scheduler."""
    for name in ("a", "b"):
        scheduler = client_for(role="scheduler", clusters=[name])
        start = event(
            "run.started", timezone.now(), f"go-{name}", run=f"run-{name}", cluster=name, gpus=8,
            nodes=[f"{name}1"], job_id=f"{name}-7",
        )  # fmt: skip
        assert send(scheduler, [start, _beat(f"{name}2", name)]).status_code == 202
    assert set(Node.objects.values_list("hostname", "cluster__name")) == {
        ("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b"),
    }  # fmt: skip


def _beat(node: str, cluster: str) -> dict:
    return event("node.heartbeat", timezone.now(), f"hb-{node}", node=node, cluster=cluster)


def _failed(run: str, node: str, id_: str = "f1") -> dict:
    return event("run.failed", timezone.now(), id_, run=run, node=node, gpu=0, xid=79, reason="fell off the bus")


@pytest.mark.reliability(
    "A training job's token bound to cluster a reports its run failed on a node of cluster b",
    how="run.failed for the token's own run naming b1 (Xid 79, a fault whose remedy is drain-and-replace)",
    outcome="403 naming the event, data.node and cluster b; nothing stored, no incident, no playbook on b1 (before: "
    "accepted, and the playbook drained b1 through cluster b's scheduler)",
)
def test_a_trainer_bound_to_one_cluster_cannot_name_another_clusters_node(two_clusters, send):
    trainer = client_for(role="trainer", clusters=["a"])
    response = send(trainer, [_failed("run-a", "b1")])
    assert response.status_code == 403, response.content
    (error,) = response.json()["errors"]
    assert (error["index"], error["field"]) == (0, "data.node")
    assert error["reason"].startswith("node b1 is in cluster b, not in run run-a's cluster a")
    assert not Event.objects.filter(type="run.failed").exists()
    assert not Incident.objects.exists() and not PlaybookExecution.objects.exists()
    assert send(trainer, [_failed("run-a", "a1", "f2")]).status_code == 202  # its own node: as before


def test_an_unbound_trainer_names_only_its_runs_cluster(two_clusters, send):
    """The default trainer token speaks for every cluster's runs, each through its own cluster's nodes."""
    trainer = client_for(role="trainer")
    response = send(trainer, [_failed("run-b", "b1"), _failed("run-a", "b2", "f2")])
    assert response.status_code == 403
    assert [(e["index"], e["field"]) for e in response.json()["errors"]] == [(1, "data.node")]
    assert "node b2 is in cluster b, not in run run-a's cluster a" in response.json()["errors"][0]["reason"]
    assert not Event.objects.filter(type="run.failed").exists()


@pytest.mark.reliability(
    "A training job starts its run on nodes of another cluster",
    how="an unbound trainer token and one bound to cluster a post run.started for a run of cluster a listing a2 and b1",
    outcome="403 naming data.nodes[1] and cluster b; b1 stays in cluster b and in no attempt of the run",
)
def test_a_trainer_never_moves_a_node_onto_its_runs_cluster(two_clusters, send):
    for trainer in (client_for(role="trainer"), client_for(role="trainer", clusters=["a"])):
        start = event(
            "run.started", timezone.now(), "go-2", run="run-a", cluster="a", gpus=16, nodes=["a2", "b1"], job_id="8"
        )
        response = send(trainer, [start])
        assert response.status_code == 403
        assert [(e["index"], e["field"]) for e in response.json()["errors"]] == [(0, "data.nodes[1]")]
    assert Node.objects.get(hostname="b1").cluster.name == "b"
    assert not Attempt.objects.filter(run__name="run-a", nodes__hostname="b1").exists()


def test_a_schedulers_start_is_held_to_its_clusters_for_every_node_it_lists(two_clusters, send):
    scheduler = client_for(role="scheduler", clusters=["a"])
    start = event("run.started", timezone.now(), "go-3", run="run-a3", cluster="a", gpus=16, nodes=["a9", "b2"],
                  job_id="9")  # fmt: skip
    response = send(scheduler, [start])
    assert response.status_code == 403
    (error,) = response.json()["errors"]
    assert (
        error["field"] == "data.nodes[1]"
        and "node b2 is in cluster b, which this token does not speak for" in (error["reason"])
    )
    start["data"]["nodes"] = ["a9"]  # a node new to the record joins the start's cluster, as before
    assert send(scheduler, [start]).status_code == 202
    assert Node.objects.get(hostname="a9").cluster.name == "a"


def test_named_nodes_are_read_from_every_field_that_names_one():
    (start, failed), problems = parse_events(
        [
            event("run.started", timezone.now(), "s", run="r", cluster="a", gpus=8, nodes=["n1", "n2"], job_id="1"),
            _failed("r", "n3"),
        ],
        max_batch=10,
    )
    assert problems == []
    assert trust.named_nodes(start) == [("data.nodes[0]", "n1"), ("data.nodes[1]", "n2")]
    assert trust.named_nodes(failed) == [("data.node", "n3")]
    bounds = trust.Bounds(role=trust.TRAINER)
    (problem,) = trust.out_of_bounds([start], bounds, node_clusters={"n2": "b"}, run_clusters={"r": "a"})
    assert problem.field == "data.nodes[1]" and "a training job names the nodes of its own run's cluster" in (
        problem.reason
    )
    assert trust.out_of_bounds([start], bounds, node_clusters={"n1": "a"}, run_clusters={"r": "a"}) == []


# --- The Alertmanager and PagerDuty intakes name nodes and runs too ---

AM = "/api/v1/intake/alertmanager"
PD = "/api/v1/intake/pagerduty/v2/enqueue"


def _am(client: APIClient, node: str, status: str = "firing", fingerprint: str = "f1"):
    alert = {
        "status": status, "labels": {"alertname": "GPUHot", "node": node, "severity": "critical"}, "annotations": {},
        "startsAt": "2026-11-29T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "fingerprint": fingerprint,
    }  # fmt: skip
    body = {"version": "4", "groupKey": "{}", "status": status, "receiver": "fleetops", "alerts": [alert]}
    return client.post(AM, json.dumps(body), content_type="application/json")


def _pd(token: str, action: str, dedup_key: str, node: str | None = None):
    body = {"routing_key": token, "event_action": action, "dedup_key": dedup_key}
    if action == "trigger":
        body["payload"] = {"summary": "NCCL timeout", "source": node, "severity": "error"}
    return APIClient().post(PD, json.dumps(body), content_type="application/json")


def _bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + token)
    return client


@pytest.mark.reliability(
    "Alertmanager alerts about another cluster's node, or a resolved notice of its alert, from a bound token",
    how="an agent token of a1 and a scheduler token of cluster a post a firing alert labelled node b1, then a "
    "resolved notice carrying the fingerprint of b1's firing alert under a1's labels; a trainer token posts one on a1",
    outcome="403 naming alerts[0].labels.node and the bound; no alert recorded, b1's alert still firing (before: "
    "accepted, and any events:write token could plant or clear alerts on any node)",
)
def test_alertmanager_alerts_are_held_to_the_tokens_bounds(two_clusters):
    owner = _bearer(make_token("b-scheduler", ["events:write"], role="scheduler", clusters=["b"]))
    assert _am(owner, "b1", fingerprint="hot-b1").status_code == 200
    agent = _bearer(make_token("a1-agent", ["events:write"], role="agent", node="a1"))
    scheduler = _bearer(make_token("a-scheduler", ["events:write"], role="scheduler", clusters=["a"]))
    trainer = _bearer(make_token("a-trainer", ["events:write"], role="trainer", clusters=["a"]))
    for client, node, status, expected in (
        (agent, "b1", "firing", "its own node only, not 'b1'"),
        (scheduler, "b1", "firing", "node b1 is in cluster b, which this token does not speak for"),
        (scheduler, "a1", "resolved", "node b1 is in cluster b"),  # b1's alert, by its fingerprint
        (trainer, "a1", "firing", "a token of role trainer may not report alerts about a node (a1)"),
    ):
        response = _am(client, node, status, fingerprint="hot-b1" if status == "resolved" else "f-" + node)
        assert response.status_code == 403, response.content
        (error,) = response.json()["errors"]
        assert error["field"] == "alerts[0].labels.node" and expected in error["reason"], error
    assert list(Alert.objects.values_list("fingerprint", "status")) == [("am:hot-b1", "firing")]
    assert _am(agent, "a1", fingerprint="f-a1").status_code == 200  # its own node: as before


@pytest.mark.reliability(
    "A PagerDuty trigger and acknowledge from a token of another cluster",
    how="cluster b's scheduler triggers dedup_key nccl-b on b1; an agent token of a1 triggers an alert naming b1 and "
    "acknowledges nccl-b",
    outcome="403 both times; b1's incident stays unacknowledged with only its own alert (before: the agent's "
    "trigger joined b's incident and its acknowledge silenced b's page)",
)
def test_pagerduty_events_are_held_to_the_routing_keys_bounds(two_clusters):
    owner = make_token("b-pd", ["events:write"], role="scheduler", clusters=["b"])
    assert _pd(owner, "trigger", "nccl-b", node="b1").status_code == 202
    agent = make_token("a1-pd", ["events:write"], role="agent", node="a1")
    trigger = _pd(agent, "trigger", "nccl-a", node="b1")
    assert trigger.status_code == 403 and "its own node only, not 'b1'" in trigger.json()["errors"][0]
    ack = _pd(agent, "acknowledge", "nccl-b")
    assert ack.status_code == 403 and "dedup_key 'nccl-b'" in ack.json()["errors"][0]
    resolve = _pd(agent, "resolve", "nccl-b")
    assert resolve.status_code == 403
    (incident,) = Incident.objects.all()
    assert incident.status == "triggered" and incident.alerts.count() == 1
    assert incident.alerts.get().status == "firing"
    assert _pd(agent, "trigger", "nccl-a", node="a1").status_code == 202  # its own node: as before


@pytest.mark.reliability(
    "A training job claims another cluster's future node by naming it first",
    how="an unbound trainer token starts its run on cluster a with a node the record does not know yet (b9); then "
    "cluster b's own scheduler reports b9's state",
    outcome="the run's attempt lists b9, but b9 joins no cluster on the job's word; cluster b's scheduler is "
    "accepted and places it in b (before: b9 joined cluster a, and b's scheduler got 403 for its own node)",
)
def test_a_trainer_never_places_a_node_in_a_cluster(two_clusters, send):
    trainer = client_for(role="trainer")
    start = event(
        "run.started", timezone.now(), "job-go", run="job", cluster="a", gpus=16, nodes=["a1", "b9"], job_id="9",
    )  # fmt: skip
    assert send(trainer, [start, _failed("job", "b9")]).status_code == 202
    assert set(Attempt.objects.get(run__name="job").nodes.values_list("hostname", flat=True)) == {"a1", "b9"}
    assert Node.objects.get(hostname="b9").cluster is None
    state = event("node.state", timezone.now(), "b9-state", node="b9", state="cordoned", reason="rma", cluster="b")
    response = send(client_for(role="scheduler", clusters=["b"]), [state])
    assert response.status_code == 202, response.content
    b9 = Node.objects.get(hostname="b9")
    assert (b9.cluster.name, b9.state) == ("b", "cordoned")
    assert Node.objects.get(hostname="a1").cluster.name == "a"  # placed by a's scheduler, as before
