"""A real DDP job (torch on CPU, gloo, 4 ranks under torchrun, one rank a node) reporting through fleetops_client to a
live FleetOps, whose own detectors then judge it: one rank made 30% slower flags its node as a straggler, one rank's
local gradients scaled flags its host for silent data corruption, and no healthy rank is flagged in either case.
The asynchronous checkpoints arrive completed and durable, timed."""

import importlib.util
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from fleetops_client import Client, Config
from incidents.detection.services import sdc_detect, stragglers_detect
from incidents.models import Alert
from runs.models import Checkpoint, Event
from tests.conftest import make_token, require
from tests.services import free_ports

ROOT = Path(__file__).resolve().parents[2]
NODES = ["ddp-0", "ddp-1", "ddp-2", "ddp-3"]


def _train(live_server, tmp_path, run: str, *extra: str) -> list[dict]:
    require(importlib.util.find_spec("torch") is not None, "PyTorch (torch==2.13.0, make test installs it)")
    token = make_token(f"{run}-{len(extra)}-{os.urandom(4).hex()}", ["events:write"], role="trainer")
    env = os.environ | {
        "FLEETOPS_URL": live_server.url,
        "FLEETOPS_TOKEN": token,
        "FLEETOPS_RUN": run,
        "FLEETOPS_SPOOL_DIR": str(tmp_path / "spool"),
        "FLEETOPS_FLUSH_S": "0.2",
        "FLEETOPS_SAMPLE_EVERY_S": "0.5",
        "FLEETOPS_GRAD_NORM_EVERY": "1",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    log = tmp_path / f"job-{len(list(tmp_path.glob('job-*.jsonl')))}.jsonl"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-addr", "127.0.0.1"]
    argv += ["--master-port", str(free_ports()), str(ROOT / "tests/client/trainer.py"), "--nodes", ",".join(NODES)]
    argv += ["--checkpoint-dir", str(tmp_path / "checkpoints"), "--job-log", str(log), *extra]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


def _scheduled(live_server, tmp_path, run: str) -> None:
    """The job started on the four nodes, as the scheduler's prolog reports it: the run is running."""
    token = make_token(f"{run}-scheduler", ["events:write"], role="scheduler")
    config = Config(url=live_server.url, token=token, run=run, incarnation="prolog", spool_dir=str(tmp_path / "s"))
    scheduler = Client(config)
    scheduler.run_started(nodes=NODES, gpus=4, job_id="1", cluster="ddp")
    assert scheduler.close(timeout=30)


def _flagged(detect, run: str, kind: str) -> dict[str, str]:
    """The detector run at the moment of the run's last sample: the nodes it flagged and the alert kinds."""
    last = Event.objects.filter(run_name=run, type=kind).latest("time").time
    detect(now=last + timedelta(milliseconds=1))
    return dict(Alert.objects.values_list("node__hostname", "kind"))


@pytest.mark.django_db(transaction=True)
def test_a_rank_made_30_percent_slower_flags_its_node_and_no_other(live_server, tmp_path, settings):
    settings.STRAGGLER_WINDOW_S = 2  # 3 windows of 2 s over a job of 80 steps of 0.1 s
    _scheduled(live_server, tmp_path, "ddp-slow")
    _train(
        live_server,
        tmp_path,
        "ddp-slow",
        "--steps",
        "80",
        "--step-seconds",
        "0.1",
        "--slow-rank",
        "2",
        "--leave-running",
    )
    samples = Event.objects.filter(run_name="ddp-slow", type="rank.step_time")
    by_rank = {}
    for data in samples.values_list("data", flat=True):
        by_rank.setdefault(data["rank"], []).append(data["seconds"])
    assert set(by_rank) == {0, 1, 2, 3}
    # The compute the hook measured, not the wall-clock step every rank shares: the slow rank's is ~30% more.
    means = {rank: sum(v) / len(v) for rank, v in by_rank.items()}
    healthy = [means[r] for r in (0, 1, 3)]
    assert 1.2 < means[2] / (sum(healthy) / 3) < 1.5, means
    assert _flagged(stragglers_detect, "ddp-slow", "rank.step_time") == {"ddp-2": "straggler"}


@pytest.mark.django_db(transaction=True)
def test_a_rank_whose_local_gradients_are_scaled_flags_its_host_and_no_other(live_server, tmp_path, settings):
    _scheduled(live_server, tmp_path, "ddp-sdc")
    _train(live_server, tmp_path, "ddp-sdc", "--steps", "30", "--sdc-rank", "1", "--batch", "32768", "--leave-running")
    norms = {}
    for data in Event.objects.filter(run_name="ddp-sdc", type="rank.grad_norm").values_list("data", flat=True):
        norms.setdefault(data["step"], {})[data["rank"]] = data["value"]
    assert len(norms) == 30 and all(len(by_rank) == 4 for by_rank in norms.values())
    for by_rank in norms.values():  # the healthy replicas agree within the detector's tolerance; rank 1 is 1.5x
        healthy = sorted(by_rank[r] for r in (0, 2, 3))
        assert healthy[-1] / healthy[0] - 1 < settings.SDC_REL_TOLERANCE
        assert 1.3 < by_rank[1] / healthy[1] < 1.7
    assert _flagged(sdc_detect, "ddp-sdc", "rank.grad_norm") == {"ddp-1": "sdc"}


@pytest.mark.django_db(transaction=True)
def test_async_checkpoints_arrive_completed_durable_and_timed_and_a_restart_resumes_from_the_last(
    live_server, tmp_path
):
    first = _train(live_server, tmp_path, "ddp-ckpt", "--steps", "20", "--checkpoint-every", "5")
    rows = list(Checkpoint.objects.filter(run__name="ddp-ckpt").order_by("step"))
    assert [(c.step, c.status, c.tier) for c in rows] == [(s, "completed", "durable") for s in (5, 10, 15, 20)]
    for c in rows:
        assert 0 < c.blocking_s < (c.completed_at - c.started_at).total_seconds() + 1e-3
        assert c.durable_at == c.completed_at and c.bytes > 64 * 256 * 4
    stamps = {e["step"]: e["t"] for e in first if e["event"] == "checkpoint"}
    for c in rows:  # the write started before the job logged it, within the copy's time
        assert abs(c.started_at.timestamp() - stamps[c.step]) < c.blocking_s + 0.5

    again = _train(live_server, tmp_path, "ddp-ckpt", "--steps", "25", "--checkpoint-every", "5")
    assert again[0] == {"event": "restored", "step": 20, "t": again[0]["t"]}
    restored = Event.objects.get(run_name="ddp-ckpt", type="run.restored")
    assert restored.data["from_step"] == 20 and abs(restored.time.timestamp() - again[0]["t"]) < 0.5
