"""events_apply folds a chunk's steps, heartbeats and Xids per subject (one write per run, node or GPU instead of
one or more per event); the record must be what applying the events one at a time gives, in any order."""

import random
from datetime import timedelta

from django.db.models import Sum

from runs.domain.cloudevents import parse_events
from runs.domain.simulator import LLAMA3_RATE_PER_GPU_HOUR, SimulationConfig, simulate
from runs.models import GPU, Event, Node
from runs.services import events_apply, events_ingest, record_rebuild
from tests.stories import at, event, record_snapshot


def _ties() -> list[dict]:
    """Readings that only the folding's tie rules get right: equal times, counts, UUIDs, clusters named late."""
    same = at(30)
    events = [
        event("run.step", same, "s1", run="sim-run", step=500, loss=1.0),
        event("run.step", same, "s2", run="sim-run", step=510, loss=1.0),
        event("run.step", same, "s3", run="sim-run", step=505, loss=1.0),
        event("node.heartbeat", same, "h1", node="tie-node"),
        event("node.heartbeat", same, "h2", node="tie-node", cluster="cluster-b"),
        event("node.heartbeat", same + timedelta(seconds=1), "h3", node="tie-node"),  # newest, names none
        event("node.heartbeat", same - timedelta(seconds=1), "h4", node="tie-node"),
    ]
    for n in range(12):  # a storm on one GPU: counts folded into events, equal times, a UUID that changes
        events.append(
            event(
                "gpu.xid",
                same + timedelta(seconds=n // 3),
                f"x{n}",
                node="tie-node",
                gpu=2,
                xid=(79, 48, 74)[n % 3],
                message=f"storm {n}",
                **({"count": n + 1} if n % 2 else {}),
                **({"uuid": f"GPU-{n}"} if n in (3, 7) else {}),
            )
        )
    return events


def _stream() -> list[dict]:
    config = SimulationConfig(gpus=64, days=0.5, seed=7, rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * 400)
    return list(simulate(config)) + _ties()


def _record() -> dict:
    return {
        "snapshot": record_snapshot(),
        "uuids": list(GPU.objects.order_by("node__hostname", "index").values_list("node__hostname", "index", "uuid")),
    }


def test_folded_chunks_give_the_record_of_one_event_at_a_time(db, django_capture_on_commit_callbacks):
    events = _stream()
    kinds = {e["type"] for e in events}
    assert {"run.step", "node.heartbeat", "gpu.xid", "run.failed"} <= kinds
    parsed, problems = parse_events(events, max_batch=len(events))
    assert not problems
    with django_capture_on_commit_callbacks(execute=False):  # stored only: applied below, two ways
        ids = events_ingest(events=parsed).event_ids
    assert not Event.objects.filter(applied_at__isnull=False).exists()

    one_by_one = ids[:]
    random.Random(3).shuffle(one_by_one)
    for event_id in one_by_one:
        assert events_apply(event_ids=[event_id]) == 1
    expected = _record()
    xids = sum(e["data"].get("count", 1) for e in events if e["type"] == "gpu.xid")
    assert GPU.objects.aggregate(n=Sum("xid_count"))["n"] == xids

    Node.objects.update(cluster=None)  # record_rebuild keeps the inventory: the heartbeats must name it again
    assert record_rebuild() == len(events)  # the whole log again, in chunks of 500: folded
    assert _record() == expected
    tie = GPU.objects.get(node__hostname="tie-node", index=2)
    assert tie.node.cluster.name == "cluster-b"  # named by an older heartbeat than the one kept
    assert (tie.uuid, tie.last_xid, tie.xid_count) == ("GPU-7", 79, sum(n + 1 if n % 2 else 1 for n in range(12)))
