"""Hand-computed cases for the goodput reference model (tests/runs/goodput_reference.py), from docs/DOMAIN.md's text.

Pure Python: no database, no Django.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.runs.goodput_reference import LABELS, SHARED, label_seconds, totals

DAY = datetime(2026, 3, 1, tzinfo=UTC)


def at(hms: str) -> datetime:
    """'01:05' or '00:30:30' on DAY."""
    parts = [int(p) for p in hms.split(":")] + [0]
    return DAY + timedelta(hours=parts[0], minutes=parts[1], seconds=parts[2])


def stamp(hms: str) -> str:
    return at(hms).strftime("%Y-%m-%dT%H:%M:%SZ")


_counter = iter(range(1, 10**9))


def ev(event_type: str, hms: str, source: str = "/slurm/a", **data) -> dict:
    return {
        "specversion": "1.0",
        "id": f"e{next(_counter)}",
        "source": source,
        "type": event_type,
        "time": stamp(hms),
        "data": {"run": "r1", **data},
    }


def expect(result: dict[str, int], **seconds: int) -> None:
    wanted = dict.fromkeys((*LABELS, SHARED), 0)
    wanted.update({k: v for k, v in seconds.items() if k != "wall_clock"})
    wanted["wall_clock"] = seconds["wall_clock"]
    assert result == wanted
    assert sum(result[label] for label in (*LABELS, SHARED)) == result["wall_clock"]


def run_totals(events: list[dict], now: str = "23:00") -> dict[str, int]:
    start, labels = label_seconds(events, now=at(now))
    return totals(start, labels)


def shuffled_with_repeats(events: list[dict], seed: int) -> list[dict]:
    rng = random.Random(seed)
    messy = list(events) + [dict(e) for e in rng.sample(events, k=min(3, len(events)))]
    rng.shuffle(messy)
    return messy


def test_worked_example_of_the_spec():
    # Durable checkpoint at step 30 written 00:30:00-00:30:30, faults at 01:00 and 01:08, running again at 01:05 and
    # 01:12, training from step 30 at 01:15, a two-hour run completed at 02:00.
    # Interruption 1 (fault 01:00, no detected_at: detection 0): rescheduling 01:00-01:05 = 5 min; reload 01:05 until
    #   the next fault 01:08 = 3 min (its open stage stops there); chain: S = 30 (the 01:15 restore), rule 1: the
    #   blocking of step 30 ended 00:30:30 <= 01:00, rewound 00:30:30-01:00 = 29.5 min.
    # Interruption 2 (fault 01:08): rescheduling 01:08-01:12 = 4 min; reload 01:12-01:15 = 3 min; rewind point
    #   00:30:30 is before where interruption 1 ended (01:08), so it is 01:08: nothing rewound.
    # Checkpoint 00:30:00-00:30:30 = 0.5 min. Totals: rescheduling 9 min, reload 6, rewound 29.5, checkpoint 0.5,
    # productive 120 - 45 = 75 min: goodput 0.625.
    events = [
        ev("run.started", "00:00", cluster="c", gpus=8, nodes=["n1"], job_id="1"),
        ev("run.step", "00:29:59", step=30),
        ev("checkpoint.started", "00:30:00", step=30),
        ev("checkpoint.completed", "00:30:30", step=30, blocking_s=30, bytes=1, tier="durable"),
        ev("run.failed", "01:00", reason="xid 79"),
        ev("run.started", "01:05", cluster="c", gpus=8, nodes=["n2"], job_id="2"),
        ev("run.failed", "01:08", reason="nccl timeout"),
        ev("run.started", "01:12", cluster="c", gpus=8, nodes=["n3"], job_id="3"),
        ev("run.restored", "01:15", from_step=30),
        ev("run.completed", "02:00"),
    ]
    want = dict(rescheduling=540, reload=360, rewound=1770, checkpoint=30, productive=4500, wall_clock=7200)
    expect(run_totals(events), **want)
    for seed in range(5):
        expect(run_totals(shuffled_with_repeats(events, seed)), **want)
    assert want["productive"] / want["wall_clock"] == 0.625

    # A window: [01:00, 01:10) holds rewound 0, rescheduling 5 min, reload 3 min, rescheduling 2 more min.
    start, labels = label_seconds(events, now=at("23:00"))
    assert start == at("00:00")
    expect(totals(start, labels, since=at("01:00"), until=at("01:10")), rescheduling=420, reload=180, wall_clock=600)


def test_two_reporters_of_one_fault_take_the_earliest_detection():
    # Scheduler: fault 00:20:00, detected_at 00:25:00, no node. Agent: fault 00:21:00, detected_at 00:22:00, node n1.
    # One interruption: fault 00:20:00 (the first report), detected 00:22:00 (the earliest of any report).
    # detection 00:20-00:22 = 120 s; rescheduling 00:22-00:30 = 480 s; reload 00:30-00:33 = 180 s.
    # Rewound: S = 10, rule 1: step 10's blocking ended 00:10:20 <= 00:20 -> 00:10:20-00:20:00 = 580 s.
    # Checkpoint 00:10:00-00:10:20 = 20 s. Wall 3600; productive 3600 - 120 - 480 - 180 - 580 - 20 = 2220.
    events = [
        ev("run.started", "00:00", cluster="c", gpus=8, nodes=["n1"], job_id="1"),
        ev("checkpoint.started", "00:10:00", step=10),
        ev("checkpoint.completed", "00:10:20", step=10, blocking_s=20, bytes=1, tier="durable"),
        ev("run.failed", "00:20", source="/slurm/a", reason="job died", detected_at=stamp("00:25")),
        ev("run.failed", "00:21", source="/agent/n1", reason="xid 79", node="n1", xid=79, detected_at=stamp("00:22")),
        ev("run.started", "00:30", cluster="c", gpus=8, nodes=["n2"], job_id="2"),
        ev("run.restored", "00:33", from_step=10),
        ev("run.completed", "01:00"),
    ]
    want = dict(
        detection=120, rescheduling=480, reload=180, rewound=580, checkpoint=20, productive=2220, wall_clock=3600
    )
    expect(run_totals(events), **want)
    for seed in range(5):
        expect(run_totals(shuffled_with_repeats(events, seed)), **want)


def test_restore_of_a_write_whose_completion_never_arrived():
    # Step 5: durable, 00:05:00-00:05:10, blocking 10 s. Step 10: checkpoint.started 00:40:00, no completion.
    # Fault 00:50:00 detected 00:50:30, running again 00:55, restored from step 10 at 01:00, completed 01:30.
    # Rule 1 fails (no completion of 10); rule 2: step 10's write started 00:40 <= fault and did not fail -> rewound
    # 00:40:00-00:50:00 = 600 s. detection 30 s; rescheduling 00:50:30-00:55 = 270 s; reload 00:55-01:00 = 300 s.
    # Checkpoint: step 5 only, 10 s (a write never completed blocks for no time counted).
    # Wall 5400; productive 5400 - 30 - 270 - 300 - 600 - 10 = 4190.
    events = [
        ev("run.started", "00:00", cluster="c", gpus=8, nodes=["n1"], job_id="1"),
        ev("checkpoint.started", "00:05:00", step=5),
        ev("checkpoint.completed", "00:05:10", step=5, blocking_s=10, bytes=1, tier="durable"),
        ev("checkpoint.started", "00:40:00", step=10),
        ev("run.failed", "00:50", reason="hang", kind="hang", detected_at=stamp("00:50:30")),
        ev("run.started", "00:55", cluster="c", gpus=8, nodes=["n2"], job_id="2"),
        ev("run.restored", "01:00", from_step=10),
        ev("run.completed", "01:30"),
    ]
    expect(run_totals(events), detection=30, rescheduling=270, reload=300, rewound=600,
           checkpoint=10, productive=4190, wall_clock=5400)  # fmt: skip

    # Same, but step 10's write failed: rule 2 no longer holds; rule 3: step 5 (blocking ended 00:05:10, durable
    # 00:05:10, both by the fault) -> rewound 00:05:10-00:50:00 = 2690 s; productive 5400 - 30 - 270 - 300 - 2690 - 10
    # = 2100.
    failed = events + [ev("checkpoint.failed", "00:41:00", step=10, reason="disk full")]
    expect(run_totals(failed), detection=30, rescheduling=270, reload=300, rewound=2690,
           checkpoint=10, productive=2100, wall_clock=5400)  # fmt: skip


def _memory_tier_events(from_step: int, node: str | None) -> list[dict]:
    failed = {"reason": "xid 79"} | ({"node": node} if node else {})
    return [
        ev("run.started", "00:00", cluster="c", gpus=8, nodes=["n7", "n8"], job_id="1"),
        # Asynchronous durable write: blocks 00:10:00-00:10:05, durable at its completion 00:10:30.
        ev("checkpoint.started", "00:10:00", step=100),
        ev("checkpoint.completed", "00:10:30", step=100, blocking_s=5, bytes=1, tier="durable"),
        # Memory-tier copy: blocks 00:20:00-00:20:02, no durable_at (it lives on the run's own nodes).
        ev("checkpoint.started", "00:20:00", step=200),
        ev("checkpoint.completed", "00:20:02", step=200, blocking_s=2, bytes=1, tier="memory"),
        # Step 300's write failed.
        ev("checkpoint.started", "00:29:00", step=300),
        ev("checkpoint.failed", "00:29:20", step=300, reason="io error"),
        ev("run.failed", "00:30", **failed),
        ev("run.started", "00:31", cluster="c", gpus=8, nodes=["n8", "n9"], job_id="2"),
        ev("run.restored", "00:32", from_step=from_step),
        ev("run.completed", "01:00"),
    ]


def test_memory_tier_checkpoint_and_a_fault_naming_a_node():
    # Common to all three: detection 0, rescheduling 00:30-00:31 = 60 s, reload 00:31-00:32 = 60 s, wall 3600.
    #
    # A. Restored from 300 (its write failed), the fault names node n7. Rules 1 and 2 fail; rule 3: step 100
    #    survived (blocking ended 00:10:05, durable 00:10:30, both by 00:30); step 200's memory copy did not (the
    #    fault named a node). Rewound 00:10:05-00:30:00 = 1195 s. Checkpoint: step 100's 5 s (before the rewind
    #    point); step 200's 2 s lie inside the rewound work, so they are rewound. Productive 3600-60-60-1195-5 = 2280.
    expect(run_totals(_memory_tier_events(300, "n7")), rescheduling=60, reload=60, rewound=1195,
           checkpoint=5, productive=2280, wall_clock=3600)  # fmt: skip
    # B. Same, the fault names no node: step 200's memory copy survives (blocking ended 00:20:02 <= 00:30), the
    #    latest -> rewound 00:20:02-00:30:00 = 598 s; checkpoint 5 + 2 = 7 s; productive 3600-120-598-7 = 2875.
    expect(run_totals(_memory_tier_events(300, None)), rescheduling=60, reload=60, rewound=598,
           checkpoint=7, productive=2875, wall_clock=3600)  # fmt: skip
    # C. Restored from 200 itself, node named: rule 1 (the trainer says it loaded S: a memory copy on the failed node
    #    is believed to have had a replica): rewound 00:20:02-00:30:00 = 598 s, as in B.
    expect(run_totals(_memory_tier_events(200, "n7")), rescheduling=60, reload=60, rewound=598,
           checkpoint=7, productive=2875, wall_clock=3600)  # fmt: skip


def test_failure_before_the_first_start_counts_nothing():
    # run.failed at 00:05 and another at 00:10 (the same instant as the first run.started, and a failure sorts
    # before a start at the same instant): both come before the first run.started, end nothing, open nothing.
    # Span 00:10-01:10 = 3600 s, all productive. The later restore is in the first attempt: it counts nothing.
    events = [
        ev("run.failed", "00:05", reason="launch failed"),
        ev("run.failed", "00:10", reason="launch failed again"),
        ev("run.started", "00:10", cluster="c", gpus=8, nodes=["n1"], job_id="1"),
        ev("run.restored", "00:11", from_step=0),
        ev("run.completed", "01:10"),
    ]
    start, labels = label_seconds(events, now=at("23:00"))
    assert start == at("00:10")
    expect(totals(start, labels), productive=3600, wall_clock=3600)
    # No run.started at all: no span, no wall-clock.
    assert label_seconds(events[:2], now=at("23:00")) == (None, [])
    expect(totals(None, []), wall_clock=0)


def test_a_run_still_restarting_runs_to_now_and_superseded_attempts_count_nothing():
    # 00:00 started; 00:10 started again while open (supersedes: no interruption); its restore at 00:12 counts
    # nothing (that attempt restarted no interruption). 00:30 fault detected 00:31; no restart yet; now = 00:40.
    # detection 00:30-00:31 = 60 s; rescheduling (neither restart nor resume: everything after detection) 00:31-00:40
    # = 540 s; rewound: no S, so all training since the run started, 00:00-00:30 = 1800 s. Wall 2400, productive 0.
    events = [
        ev("run.started", "00:00", cluster="c", gpus=8, nodes=["n1"], job_id="1"),
        ev("run.started", "00:10", cluster="c", gpus=8, nodes=["n1"], job_id="2"),
        ev("run.restored", "00:12", from_step=0),
        ev("run.failed", "00:30", reason="hang", detected_at=stamp("00:31")),
    ]
    expect(run_totals(events, now="00:40"), detection=60, rescheduling=540, rewound=1800, wall_clock=2400)


@pytest.mark.serial  # timed: under 2 s
def test_a_three_hour_run_is_labelled_quickly():
    # Speed only: 3 hours, 10 interruptions, 20 checkpoints.
    events = [ev("run.started", "00:00", cluster="c", gpus=8, nodes=["n1"], job_id="0")]
    for k in range(20):
        minute = 5 + 8 * k
        events.append(ev("checkpoint.started", f"{minute // 60:02d}:{minute % 60:02d}:00", step=k))
        events.append(
            ev("checkpoint.completed", f"{minute // 60:02d}:{minute % 60:02d}:20", step=k, blocking_s=5, tier="local")
        )
    for k in range(10):
        minute = 9 + 16 * k
        events.append(ev("run.failed", f"{minute // 60:02d}:{minute % 60:02d}:00", reason="x"))
        events.append(ev("run.started", f"{minute // 60:02d}:{minute % 60:02d}:40", job_id=str(k + 1)))
        events.append(ev("run.restored", f"{minute // 60:02d}:{minute % 60:02d}:50", from_step=2 * k))
    events.append(ev("run.completed", "03:00"))
    began = time.perf_counter()
    start, labels = label_seconds(events, now=at("23:00"))
    elapsed = time.perf_counter() - began
    assert len(labels) == 3 * 3600
    assert totals(start, labels)["wall_clock"] == 10800
    assert elapsed < 2.0, elapsed
