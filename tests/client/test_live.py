"""fleetops_client against a live FleetOps: what it sends is accepted and folded into the run's record, a resend is a
duplicate, what waited in the spool while FleetOps was down arrives once; and the package installs and runs in a
virtual environment that has no Django."""

import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleetops_client import Client, Config
from runs.models import Checkpoint, Event, Run
from tests.conftest import make_token

ROOT = Path(__file__).resolve().parents[2]


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _config(url, token, tmp_path, **overrides) -> Config:
    values = dict(url=url, token=token, run="llama-live", rank=0, world_size=2, node="gpu-001", incarnation="77.0")
    values.update(spool_dir=str(tmp_path / "spool"), flush_s=0.05, step_every_s=0.0, sample_every_s=0.0)
    return Config(**(values | overrides))


def _train(client: Client, steps: range) -> None:
    client.run_started(nodes=["gpu-001"], gpus=8, job_id="77", cluster="cluster-a")
    client.restored(steps.start - 1)
    for step in steps:
        client.step(step, seconds=0.2)
        client.grad_norm(step, 1.5)
        if step % 5 == 0:
            with client.checkpoint(step, bytes=10_000, tier="durable"):
                pass
        if step == 15:
            client.heartbeat("evaluation")
    client.completed()


@pytest.mark.django_db(transaction=True)
def test_what_the_client_sends_fleetops_folds_into_the_run(live_server, tmp_path):
    token = make_token("trainer", ["events:write"], role="trainer")
    client = Client(_config(live_server.url, token, tmp_path))
    _train(client, range(11, 21))
    assert client.close(timeout=30)
    assert client.stats() | {"delivered": 0} == {
        "dropped_samples": 0,
        "lost_records": 0,
        "delivered": 0,
        "duplicates": 0,
        "rejected": 0,
        "spool_dropped": 0,
    }
    counts = {t: Event.objects.filter(type=t).count() for t in set(Event.objects.values_list("type", flat=True))}
    assert counts == {
        "run.started": 1,
        "run.restored": 1,
        "run.step": 10,
        "rank.step_time": 10,
        "rank.grad_norm": 1,
        "checkpoint.started": 2,
        "checkpoint.completed": 2,
        "run.completed": 1,
        "run.heartbeat": 1,
    }
    assert client.stats()["delivered"] == sum(counts.values())
    run = Run.objects.get(name="llama-live")
    assert run.state == Run.State.COMPLETED and run.last_step == 20
    assert sorted(Checkpoint.objects.filter(run=run).values_list("step", "status", "bytes")) == [
        (15, "completed", 10_000),
        (20, "completed", 10_000),
    ]

    again = Client(_config(live_server.url, token, tmp_path))  # the same attempt says it all again
    _train(again, range(11, 21))
    assert again.close(timeout=30)
    assert again.stats()["delivered"] == 0 and again.stats()["duplicates"] == sum(counts.values())


@pytest.mark.django_db(transaction=True)
def test_events_spooled_while_fleetops_was_down_arrive_once(live_server, tmp_path):
    token = make_token("trainer", ["events:write"], role="trainer")
    down = Client(_config(_closed_url(), token, tmp_path))
    _train(down, range(1, 6))
    assert not down.close(timeout=0.5)
    spooled = len(down.spool.pending())
    assert spooled == 15 and Event.objects.count() == 0

    up = Client(_config(live_server.url, token, tmp_path))  # the job's next process on that node, FleetOps back
    assert up.close(timeout=30)
    assert Event.objects.count() == spooled and up.stats()["delivered"] == spooled
    assert not up.spool.pending()


@pytest.mark.django_db(transaction=True)
def test_the_client_installs_and_reports_in_a_virtual_environment_without_django(live_server, tmp_path):
    token = make_token("trainer", ["events:write"], role="trainer")
    source = tmp_path / "fleetops_client"
    shutil.copytree(
        ROOT / "fleetops_client", source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    script = textwrap.dedent(
        """
        import importlib.util, sys
        assert importlib.util.find_spec("django") is None, "Django is installed here"
        import fleetops_client
        client = fleetops_client.init(spool_dir=sys.argv[1], flush_s=0.05, step_every_s=0.0)
        client.restored(0)
        for step in range(1, 4):
            client.step(step, seconds=0.1)
        sys.exit(0 if client.close(timeout=30) and client.stats()["delivered"] == 4 else 1)
        """
    )
    env = {"FLEETOPS_URL": live_server.url, "FLEETOPS_TOKEN": token, "FLEETOPS_RUN": "no-django", "PATH": "/usr/bin"}
    done = subprocess.run(
        [str(python), "-c", script, str(tmp_path / "spool")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert Event.objects.filter(run_name="no-django").count() == 4
