"""fleetops_client: the training job's reporter. Its queue never holds the loop up, its samples are bounded and their
drops counted, its ids make resends duplicates and requeued steps new, and what it sends is what FleetOps takes."""

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from fleetops_client import Client, Config
from fleetops_client.config import incarnation, run_name
from fleetops_client.delivery import Response, RetryableError
from fleetops_client.spool import Spool

ROOT = Path(__file__).resolve().parents[2]


class Transport:
    """An event API in memory: takes batches, or refuses them while `down` is set, or hangs while `hang` is set."""

    def __init__(self):
        self.batches: list[list[dict]] = []
        self.down = False
        self.hang = threading.Event()
        self.posting = threading.Event()  # set once a post has begun (a hung one is stuck in it)
        self.seen: set[tuple[str, str]] = set()

    def post(self, events):
        self.posting.set()
        while self.hang.is_set():
            time.sleep(0.01)
        if self.down:
            raise RetryableError("connection refused")
        self.batches.append(events)
        fresh = 0
        for e in events:
            fresh += (e["source"], e["id"]) not in self.seen
            self.seen.add((e["source"], e["id"]))
        return Response(202 if fresh else 200, {"accepted": fresh, "duplicates": len(events) - fresh})

    @property
    def events(self):
        return [e for batch in self.batches for e in batch]


def config(tmp_path, **overrides) -> Config:
    values = dict(url="http://fleetops.invalid", token="t", run="llama", rank=0, world_size=4, node="gpu-001")
    values.update(incarnation="4711.0", spool_dir=str(tmp_path / "spool"), flush_s=0.05, sample_every_s=0.0)
    values.update(overrides)
    return Config(**values)


def test_the_run_and_attempt_come_from_the_scheduler_as_the_slurm_prolog_names_them():
    slurm = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NAME": "llama 70b/pretrain", "SLURM_RESTART_COUNT": "2"}
    assert run_name(slurm) == "llama-70b-pretrain"  # contrib/slurm/prolog.sh's tr, so both land on one run
    assert run_name({"SLURM_JOB_ID": "4711"}) == "slurm-4711"
    assert run_name({**slurm, "FLEETOPS_RUN": "mine"}) == "mine"
    assert incarnation(slurm) == "4711.2"
    assert incarnation({**slurm, "TORCHELASTIC_RESTART_COUNT": "1"}) == "4711.2.e1"
    with pytest.raises(ValueError, match="FLEETOPS_RUN"):
        run_name({})


def test_rank_and_world_size_come_from_torchrun_else_srun():
    env = {"FLEETOPS_RUN": "r", "FLEETOPS_URL": "http://x", "SLURM_PROCID": "5", "SLURM_NTASKS": "8"}
    assert (Config.from_env(env).rank, Config.from_env(env).world_size) == (5, 8)
    env |= {"RANK": "3", "WORLD_SIZE": "4"}
    assert (Config.from_env(env).rank, Config.from_env(env).world_size) == (3, 4)
    with pytest.raises(ValueError, match="FLEETOPS_FLUSH_S must be a number"):
        Config.from_env({**env, "FLEETOPS_FLUSH_S": "soon"})


def test_without_a_url_every_call_is_a_no_op(tmp_path):
    client = Client(config(tmp_path, url=None))
    client.step(1)
    client.restored(0)
    with client.checkpoint(1):
        pass
    assert client.flush() and client.stats() == {"dropped_samples": 0, "lost_records": 0}
    assert not (tmp_path / "spool").exists()


def test_rank_zero_sends_the_run_events_and_every_rank_its_samples(tmp_path):
    transport = Transport()
    zero = Client(config(tmp_path, step_every_s=0.0), transport=transport)
    one = Client(config(tmp_path, rank=1, step_every_s=0.0), transport=transport)
    for client in (zero, one):
        client.restored(100)
        for step in range(101, 104):
            client.step(step, seconds=0.5)
            client.grad_norm(step, 2.0)
        client.grad_norm(110, 3.0)
        client.completed()
        assert client.close()
    by_source = {}
    for e in transport.events:
        by_source.setdefault(e["source"], []).append((e["type"], e["data"].get("step", e["data"].get("from_step"))))
    assert sorted(by_source["fleetops-client://llama/rank-0"]) == sorted(
        [("run.restored", 100), ("run.completed", None), ("rank.grad_norm", 110)]
        + [("run.step", s) for s in (101, 102, 103)]
        + [("rank.step_time", s) for s in (101, 102, 103)]
    )
    assert sorted(by_source["fleetops-client://llama/rank-1"]) == sorted(
        [("rank.grad_norm", 110)] + [("rank.step_time", s) for s in (101, 102, 103)]
    )
    step_time = next(e for e in transport.events if e["type"] == "rank.step_time")
    assert step_time["data"] == {
        "run": "llama",
        "rank": 0,
        "node": "gpu-001",
        "step": 101,
        "seconds": 0.5,
        "steps": 1,
        "dropped": 0,
    }
    assert step_time["id"] == "llama:4711.0:step_time:101" and step_time["time"].endswith("Z")


def test_step_times_are_sent_as_one_mean_per_window(tmp_path):
    transport = Transport()
    client = Client(config(tmp_path, sample_every_s=3600.0), transport=transport)
    for step, seconds in ((1, 1.0), (2, 2.0)):
        client.step(step, seconds=seconds)
    client._window[2] -= 3600.0  # the window has lasted an hour: the next step closes it
    client.step(3, seconds=3.0)
    client.step(4, seconds=9.0)  # the next window's
    client.close()
    samples = [e["data"] for e in transport.events if e["type"] == "rank.step_time"]
    assert [(s["step"], s["seconds"], s["steps"]) for s in samples] == [(3, 2.0, 3)]


def test_the_step_time_is_the_time_between_steps_unless_a_hook_measured_the_compute(tmp_path):
    transport = Transport()
    client = Client(config(tmp_path), transport=transport)
    client.step(1)  # the first step after start has no previous one to be timed from
    time.sleep(0.05)
    client.step(2)
    client.compute_time(0.01)
    client.step(3)
    client.close()
    seconds = {e["data"]["step"]: e["data"]["seconds"] for e in transport.events if e["type"] == "rank.step_time"}
    assert set(seconds) == {2, 3} and seconds[2] >= 0.05 and seconds[3] == 0.01


@pytest.mark.serial  # timed: a sample costs under 200 us
def test_a_hung_api_never_holds_the_training_loop_up_and_samples_drop_oldest_first(tmp_path):
    transport = Transport()
    transport.hang.set()
    client = Client(config(tmp_path, samples_max=100, sample_every_s=0.0), transport=transport)
    client.restored(0)  # something to send: the sender thread takes it and gets stuck in the post
    assert transport.posting.wait(5)  # stuck before the first sample, so none leaves the queue: exactly 900 drop
    start = time.perf_counter()
    for step in range(1, 1001):
        client.step(step, seconds=0.1)
    per_call = (time.perf_counter() - start) / 1000
    assert per_call < 200e-6  # 50 us is the bench's target on an idle machine; this bounds "never blocks"
    assert client.dropped_samples == 900 and len(client._samples) == 100
    assert [s[3]["step"] for s in client._samples][:3] == [901, 902, 903]  # the newest 100 kept
    transport.hang.clear()
    assert client.close()
    kept = [e["data"] for e in transport.events if e["type"] == "rank.step_time"]
    assert [d["step"] for d in kept] == list(range(901, 1001))
    assert kept[-1]["dropped"] == 899  # the drops so far, reported to FleetOps with each sample


def test_while_fleetops_is_down_events_wait_in_the_spool_and_a_new_process_sends_them_as_the_same_events(tmp_path):
    transport = Transport()
    transport.down = True
    first = Client(config(tmp_path), transport=transport)
    first.restored(10)
    with first.checkpoint(20, bytes=1000):
        time.sleep(0.01)
    assert not first.close(timeout=0.3)  # FleetOps down: nothing delivered, everything spooled
    assert len(first.spool.pending()) == 3 and transport.events == []

    transport.down = False
    second = Client(config(tmp_path), transport=transport)  # the same run, rank and node after a restart
    second.restored(10)  # said again by the restarted process: the same event
    assert second.close()
    types = [(e["type"], e["id"]) for e in transport.events]
    assert sorted(types) == sorted(
        [
            ("run.restored", "llama:4711.0:restored:10"),
            ("checkpoint.started", "llama:4711.0:checkpoint:20:started"),
            ("checkpoint.completed", "llama:4711.0:checkpoint:20:completed:durable"),
            ("run.restored", "llama:4711.0:restored:10"),
        ]
    )
    assert second.stats()["duplicates"] == 1
    completed = next(e["data"] for e in transport.events if e["type"] == "checkpoint.completed")
    assert completed["bytes"] == 1000 and 0.01 <= completed["blocking_s"] < 1.0 and completed["tier"] == "durable"


def test_a_step_trained_again_after_a_requeue_is_a_new_event(tmp_path):
    transport = Transport()
    for restart in ("4711.0", "4711.1"):
        client = Client(config(tmp_path, incarnation=restart, step_every_s=0.0), transport=transport)
        client.step(7)
        client.close()
    assert [e["id"] for e in transport.events] == ["llama:4711.0:step:7", "llama:4711.1:step:7"]


def test_a_failed_write_is_reported_failed_and_an_async_one_completes_when_its_future_does(tmp_path):
    from concurrent.futures import Future

    transport = Transport()
    client = Client(config(tmp_path), transport=transport)
    with pytest.raises(OSError):
        with client.checkpoint(5):
            raise OSError("disk full")
    future = Future()
    with client.checkpoint(6, bytes=42) as write:
        write.durable_when(future)
    client.flush()
    assert [e["type"] for e in transport.events if e["data"]["step"] == 6] == ["checkpoint.started"]
    future.set_result(None)
    client.close()
    failed = next(e["data"] for e in transport.events if e["type"] == "checkpoint.failed")
    assert failed == {"run": "llama", "step": 5, "reason": "OSError: disk full"}
    done = next(e["data"] for e in transport.events if e["type"] == "checkpoint.completed")
    assert done["step"] == 6 and done["bytes"] == 42 and done["blocking_s"] < 0.5


def test_rank_zero_alone_reports_run_events(tmp_path):
    transport = Transport()
    client = Client(config(tmp_path, rank=3), transport=transport)
    client.restored(1)
    client.completed()
    with client.checkpoint(2):
        pass
    client.close()
    assert transport.events == []


def test_a_job_killed_by_its_scheduler_spools_what_it_had_queued_before_it_dies(tmp_path):
    """SIGTERM (a requeue or a cancel), then SIGKILL seconds later: exit handlers never run, so the queue is spooled on
    SIGTERM and the process dies of it as before."""
    script = textwrap.dedent(
        """
        import os, signal, sys, time
        from fleetops_client import Client, Config
        config = Config(url="http://127.0.0.1:9", token="t", run="killed", incarnation="1.0", spool_dir=sys.argv[1],
                        flush_s=3600.0, step_every_s=0.0)
        client = Client(config)
        client.restored(10)
        client.step(11)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        sys.exit(3)  # never reached: SIGTERM still ends the process
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    spooled = [r.event["id"] for r in Spool(tmp_path / "killed.rank-0").pending()]
    assert spooled == ["killed:1.0:restored:10", "killed:1.0:step:11"]


def test_a_plain_torchrun_launch_is_its_own_attempt_and_no_url_needs_no_run_name():
    assert incarnation({}) != incarnation({})  # launched again by hand: never taken for a resend of the last launch
    assert incarnation({"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"}).endswith(".e0")
    assert incarnation({"TORCHELASTIC_RUN_ID": "job-7", "TORCHELASTIC_RESTART_COUNT": "2"}) == "job-7.e2"
    quiet = Config.from_env({})  # no FLEETOPS_URL, no run: training goes on unreported
    assert not quiet.enabled and quiet.run == "unreported"


def test_close_keeps_in_the_spool_what_was_queued_behind_a_post_in_flight(tmp_path):
    transport = Transport()
    client = Client(config(tmp_path), transport=transport)
    transport.hang.set()
    client.restored(1)
    time.sleep(0.2)  # the sender thread is in its POST now
    client.completed()
    assert not client.close(timeout=0.3)
    transport.hang.clear()
    spooled = [r.event["type"] for r in client.spool.pending()]
    assert spooled == ["run.restored", "run.completed"]
    client.checkpoint_completed(2, blocking_s=1.0)  # after close: counted, not silently gone
    assert client.stats()["lost_records"] == 1
