"""The periodic detectors over the event log: stragglers, silent data corruption, lemons; rack grouping."""

import pytest

from incidents.detection import services as detection
from incidents.models import Alert, Incident
from runs.models import Node
from tests.stories import at, event


def running_run(nodes):
    return [event("run.started", at(0), "start", run="r", cluster="c1", gpus=8 * len(nodes), nodes=nodes, job_id="1")]


def test_a_slow_rank_in_consecutive_windows_flags_its_node_suspect(post, django_capture_on_commit_callbacks):
    nodes = [f"n{i}" for i in range(8)]
    samples = []
    for minute in range(1, 15):  # three 5-minute windows before 00:15, one sample a minute per rank
        for rank, node in enumerate(nodes):
            seconds = 1.9 if node == "n5" else 1.30 + 0.01 * (rank % 3)
            samples.append(
                event(
                    "rank.step_time",
                    at(minute),
                    f"st-{minute}-{rank}",
                    run="r",
                    rank=rank,
                    node=node,
                    step=minute,
                    seconds=seconds,
                )
            )
    post(running_run(nodes) + samples)
    with django_capture_on_commit_callbacks(execute=True):
        assert detection.stragglers_detect(now=at(15)) == 1
    alert = Alert.objects.get(kind="straggler")
    assert alert.node.hostname == "n5" and "MAD" in alert.explanation
    assert Node.objects.get(hostname="n5").state == "suspect"
    assert alert.explanation[:60] in Node.objects.get(hostname="n5").state_reason


def test_a_host_whose_gradients_disagree_repeatedly_is_flagged(post, django_capture_on_commit_callbacks):
    nodes = [f"n{i}" for i in range(4)]
    norms = [
        event(
            "rank.grad_norm",
            at(step, 1),
            f"g-{step}-{rank}",
            run="r",
            rank=rank,
            node=node,
            step=step,
            value=(9.0 if node == "n2" else 3.0),
        )
        for step in range(1, 6)
        for rank, node in enumerate(nodes)
    ]
    post(running_run(nodes) + norms)
    with django_capture_on_commit_callbacks(execute=True):
        assert detection.sdc_detect(now=at(6)) == 1
    assert Alert.objects.get(kind="sdc").node.hostname == "n2"
    assert Node.objects.get(hostname="n2").state == "suspect"


def test_a_node_in_repeated_interruptions_is_a_lemon(post):
    story = running_run(["n1", "n2"])
    for i, minute in enumerate((10, 40, 70)):
        story += [
            event("run.failed", at(minute), f"f{i}", run="r", reason="crash", node="n2"),
            event(
                "run.started",
                at(minute + 5),
                f"s{i}",
                run="r",
                cluster="c1",
                gpus=16,
                nodes=["n1", "n2"],
                job_id=f"j{i}",
            ),
        ]
    post(story)
    assert detection.lemons_detect(now=at(80)) == 1
    assert Alert.objects.get(kind="lemon").node.hostname == "n2"


@pytest.mark.parametrize("same_rack", [True, False])
def test_alerts_from_one_rack_within_the_window_are_one_incident(post, same_rack):
    Node.objects.create(hostname="a", rack="R7", state="in_service")
    Node.objects.create(hostname="b", rack="R7" if same_rack else "R8", state="in_service")
    post([event("node.heartbeat", at(0), f"hb-{n}", node=n) for n in ("a", "b")])
    assert detection.heartbeats_detect(now=at(10)) == 2
    assert Incident.objects.count() == (1 if same_rack else 2)
    if same_rack:
        assert Incident.objects.get().group_key == "rack:R7"
