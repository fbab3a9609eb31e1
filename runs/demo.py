"""A small simulated fleet for `make run`: CloudEvents that go through the event API's own code path.

Deterministic for a seed and an end time. The full fleet simulator (Llama 3 scale) is a later issue;
this one is sized to load in a few seconds: one cluster of 16 nodes, three runs, a handful of faults.
"""

import random
from datetime import UTC, datetime, timedelta

SOURCE = "fleetops/demo"
CLUSTER = "demo-slurm"
NODES = [f"gpu-{i:03d}" for i in range(1, 17)]


class _Stream:
    def __init__(self):
        self.events: list[dict] = []

    def add(self, type_: str, at: datetime, **data) -> None:
        self.events.append(
            {
                "specversion": "1.0",
                "id": f"demo-{len(self.events):06d}",
                "source": SOURCE,
                "type": type_,
                "time": at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                "data": data,
            }
        )


def demo_events(*, now: datetime, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    stream = _Stream()
    start = (now - timedelta(days=3)).replace(minute=0, second=0, microsecond=0)
    for node in NODES:
        stream.add("node.heartbeat", start, node=node, cluster=CLUSTER)
    _training_run(
        stream,
        rng,
        name="llama3-8b-pretrain",
        nodes=NODES[:8],
        spares=NODES[12:14],
        start=start,
        end=now,
        faults=[
            (timedelta(hours=9, minutes=17), {"reason": "GPU fell off the bus", "xid": 79, "gpu": 3}, 90),
            (
                timedelta(hours=31, minutes=5),
                {"reason": "NCCL watchdog: collective operation timeout", "category": "nccl_watchdog"},
                1200,
            ),
            (timedelta(hours=50), {"reason": "Kernel upgrade window", "planned": True}, 0),
            (timedelta(hours=62, minutes=40), {"reason": "Uncontained ECC error", "xid": 95, "gpu": 6}, 45),
        ],
    )
    _training_run(
        stream,
        rng,
        name="mixtral-sft",
        nodes=NODES[8:12],
        spares=[],
        start=start + timedelta(hours=2),
        end=start + timedelta(hours=20),
        faults=[],
        completes=True,
    )
    stream.add(
        "node.state",
        start + timedelta(hours=10),
        node=NODES[14],
        state="in_repair",
        reason="Xid 79 on gpu3: RMA opened",
        cluster=CLUSTER,
    )
    stream.add("node.state", start, node=NODES[15], state="hot_spare", reason="Passed burn-in", cluster=CLUSTER)
    for node in NODES:
        stream.add("node.heartbeat", now - timedelta(seconds=rng.randint(5, 60)), node=node, cluster=CLUSTER)
    return stream.events


def _training_run(stream, rng, *, name, nodes, spares, start, end, faults, completes=False):
    """Steps every 10 min, checkpoints every 30 min, each fault followed by a restart on a spare."""
    step_s, checkpoint_every = 600, 3
    gpus = len(nodes) * 8
    job = 1000 + rng.randint(0, 8999)
    at, step, last_checkpoint = start, 0, 0
    stream.add(
        "run.started",
        at,
        run=name,
        cluster=CLUSTER,
        gpus=gpus,
        nodes=nodes,
        job_id=str(job),
        checkpoint_interval_s=checkpoint_every * step_s,
    )
    pending = sorted(faults, key=lambda f: f[0])
    while at < end:
        if pending and at >= start + pending[0][0]:
            offset, fault, detect_s = pending.pop(0)
            fault_at = start + offset
            culprit = nodes[rng.randrange(len(nodes))]
            details = {k: v for k, v in fault.items() if k != "gpu"}
            if not fault.get("planned"):
                details["node"] = culprit
                if "gpu" in fault:
                    details["gpu"] = fault["gpu"]
                    stream.add(
                        "gpu.xid", fault_at, node=culprit, gpu=fault["gpu"], xid=fault["xid"], message=fault["reason"]
                    )
            stream.add(
                "run.failed", fault_at, run=name, **details, detected_at=_ts(fault_at + timedelta(seconds=detect_s))
            )
            if not fault.get("planned") and spares:
                stream.add(
                    "node.state",
                    fault_at + timedelta(seconds=detect_s + 30),
                    node=culprit,
                    state="in_repair" if "gpu" in fault else "suspect",
                    reason=fault["reason"],
                )
                nodes = [spares.pop(0) if n == culprit else n for n in nodes]
            restart_at = fault_at + timedelta(seconds=detect_s + rng.randint(240, 600))
            job += 1
            stream.add(
                "run.started",
                restart_at,
                run=name,
                cluster=CLUSTER,
                gpus=gpus,
                nodes=nodes,
                job_id=str(job),
                checkpoint_interval_s=checkpoint_every * step_s,
            )
            at = restart_at + timedelta(seconds=rng.randint(120, 300))
            stream.add("run.restored", at, run=name, from_step=last_checkpoint)
            step = last_checkpoint
            continue
        if at + timedelta(seconds=step_s) > end:
            break
        at += timedelta(seconds=step_s)
        step += 1
        stream.add("run.step", at, run=name, step=step)
        if step % checkpoint_every == 0:
            blocking = round(rng.uniform(15, 25), 1)
            stream.add("checkpoint.started", at, run=name, step=step)
            stream.add(
                "checkpoint.completed",
                at + timedelta(seconds=blocking),
                run=name,
                step=step,
                blocking_s=blocking,
                bytes=16 * 10**9 * 14,
                tier="durable",
            )
            at += timedelta(seconds=blocking)
            last_checkpoint = step
    if completes:
        stream.add("run.completed", at, run=name)
    else:
        for gpu in range(8):
            stream.add(
                "gpu.health",
                at,
                node=nodes[0],
                gpu=gpu,
                temperature_c=60 + rng.randint(0, 20),
                throttle_reasons=[],
                nvlink_errors=0,
                recovery_action=0,
            )
            stream.add("gpu.ecc", at, node=nodes[0], gpu=gpu, corrected=rng.randint(0, 3), uncorrected=0)


def _ts(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
