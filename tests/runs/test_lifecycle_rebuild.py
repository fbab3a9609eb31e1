"""A run's rebuild reads an attempt's node list (2,048 hostnames on a big run) from its start event once, when that
event is new to the attempt; every later rebuild keeps the membership. This is what keeps a long run's load linear."""

from runs.models import Attempt, Event, Node
from tests.stories import at, event


def _members() -> dict[int, list[str]]:
    return {
        a.number: sorted(n.hostname for n in a.nodes.all())
        for a in Attempt.objects.filter(run__name="r1").prefetch_related("nodes")
    }


def _started(minutes, key, nodes):
    return event("run.started", at(minutes), key, run="r1", job_id=key, nodes=nodes, cluster="c1", gpus=8)


def test_an_attempts_nodes_are_read_once_from_its_start_event(post):
    post(
        [
            _started(0, "s1", ["n1", "n2"]),
            event("run.failed", at(10), "f1", run="r1", reason="Xid 79", node="n2", gpu=3, xid=79),
            _started(20, "s2", ["n1", "n3"]),
        ]
    )
    assert _members() == {1: ["n1", "n2"], 2: ["n1", "n3"]}
    starts = dict(Attempt.objects.filter(run__name="r1").values_list("number", "start_event_id"))
    assert starts == {1: Event.objects.get(event_id="s1").pk, 2: Event.objects.get(event_id="s2").pk}
    # Were the node lists read again, this edit would show: the rebuild after the next event must not see it.
    Event.objects.filter(event_id="s1").update(data={"run": "r1", "job_id": "s1", "nodes": ["edited"]})
    post([event("run.restored", at(25), "r2", run="r1", from_step=3)])
    assert _members() == {1: ["n1", "n2"], 2: ["n1", "n3"]}

    # A start that arrives late and comes first renumbers the attempts: every attempt's start event moved, so every
    # node list is read again (the edited one included), and the attempts keep their own nodes in the new order.
    post([_started(-5, "s0", ["n4"])])
    assert _members() == {1: ["n4"], 2: ["edited"], 3: ["n1", "n3"]}
    assert set(Node.objects.filter(hostname__in=["n4", "edited"]).values_list("cluster__name", flat=True)) == {"c1"}


def test_the_upgrade_fills_in_the_start_events_of_attempts_derived_before(post):
    from importlib import import_module

    from django.apps import apps

    post(
        [
            _started(0, "s1", ["n1"]),
            event("run.failed", at(10), "f1", run="r1", reason="lost"),
            _started(20, "s2", ["n2"]),
        ]
    )
    derived = dict(Attempt.objects.values_list("number", "start_event_id"))
    Attempt.objects.update(start_event_id=None)  # as 0007 leaves them
    Attempt.objects.filter(number=2).update(started_at=at(21))  # a record out of line with its events
    import_module("runs.migrations.0008_attempt_start_event_backfill").backfill(apps, None)
    assert dict(Attempt.objects.values_list("number", "start_event_id")) == {1: derived[1], 2: None}
