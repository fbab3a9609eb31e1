"""contrib/slurm hooks post CloudEvents to a live FleetOps: run with the environment Slurm gives them, and the
strigger one fired by a real Slurm controller when a node is drained."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runs.models import Event, Run
from tests.conftest import make_token, require
from tests.services import wait_for

HOOKS = Path(__file__).resolve().parents[4] / "contrib" / "slurm"


def hook(name: str, url: str, token: str, **env: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "FLEETOPS_URL": url,
        "FLEETOPS_TOKEN": token,
        "FLEETOPS_ENV_FILE": "/none",
        **env,
    }
    result = subprocess.run(["bash", str(HOOKS / name)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def target(live_server):
    require(shutil.which("curl") is not None, "curl")
    return live_server.url, make_token("slurm", ["events:write"])


@pytest.mark.django_db(transaction=True)
def test_prolog_and_epilog_post_run_events_with_stable_ids(target):
    job = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu-[001-002]", "SLURM_CLUSTER_NAME": "fleetops"}
    job["SLURM_JOB_NAME"] = "llama-70b"
    assert hook("prolog.sh", *target, **job).stdout.strip() == "202"
    assert hook("prolog.sh", *target, **job).stdout.strip() == "200"  # a retried hook is a duplicate
    started = Event.objects.get(type="run.started")
    assert (started.source, started.event_id) == ("slurm/fleetops", "slurm:fleetops:4242:0:start")
    assert started.data["nodes"] == ["gpu-001", "gpu-002"] and started.data["gpus"] == 16
    assert Run.objects.filter(name="llama-70b").exists()

    hook("epilog.sh", *target, **job, SLURM_JOB_EXIT_CODE2="1:0")
    failed = Event.objects.get(type="run.failed")
    assert failed.event_id == "slurm:fleetops:4242:0:end"
    assert "exit code 1" in failed.data["reason"]

    hook("prolog.sh", *target, **job, SLURM_RESTART_COUNT="1")
    hook("epilog.sh", *target, **job, SLURM_RESTART_COUNT="1", SLURM_JOB_EXIT_CODE2="0:0")
    assert Event.objects.filter(type="run.completed", event_id="slurm:fleetops:4242:1:end").exists()
    # per-node Prolog: only the first node posts
    hook("prolog.sh", *target, **job, SLURM_RESTART_COUNT="2", SLURMD_NODENAME="gpu-002")
    assert not Event.objects.filter(event_id="slurm:fleetops:4242:2:start").exists()


@pytest.mark.django_db(transaction=True)
def test_the_strigger_hook_posts_node_state(target):
    env = {"FLEETOPS_CLUSTER": "c1", "FLEETOPS_STATE": "draining"}
    result = subprocess.run(
        ["bash", str(HOOKS / "fleetops-strigger.sh"), "gpu-007,gpu-008"],
        env={"PATH": "/usr/bin:/bin", "FLEETOPS_URL": target[0], "FLEETOPS_TOKEN": target[1], **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    events = Event.objects.filter(type="node.state").order_by("event_id")
    assert [e.data["node"] for e in events] == ["gpu-007", "gpu-008"]
    assert {e.data["state"] for e in events} == {"draining"}


@pytest.mark.django_db(transaction=True)
def test_a_real_slurm_drain_fires_the_trigger(slurm_cluster, target, tmp_path):
    tmp_path.chmod(0o755)
    env_file = tmp_path / "slurm.env"
    env_file.write_text(
        f"FLEETOPS_URL={target[0]}\nFLEETOPS_TOKEN={target[1]}\nFLEETOPS_CLUSTER=fleetops\n"
        f"export SLURM_CONF={slurm_cluster.conf}\n"
    )
    program = tmp_path / "trigger.sh"
    program.write_text(
        f'#!/bin/bash\nexport FLEETOPS_ENV_FILE={env_file}\nexec bash {HOOKS}/fleetops-strigger.sh "$@" '
        f">>{tmp_path}/trigger.log 2>&1\n"
    )
    program.chmod(0o755)
    slurm_cluster.run("strigger", "--set", "--node=gpu-003", "--drain", f"--program={program}")
    try:
        slurm_cluster.run("scontrol", "update", "nodename=gpu-003", "state=drain", "reason=xid 79")
        # Applied and looked at by the detectors, not only stored: the live server's thread works on it after the
        # intake commits, and a teardown flush racing that work deadlocked (TRUNCATE against its row locks).
        event = wait_for(
            lambda: Event.objects.filter(
                type="node.state", data__node="gpu-003", applied_at__isnull=False, detected_at__isnull=False
            ).first(),
            timeout=45,
            what="the trigger's node.state event, applied and detected",
        )
        assert event.data["state"] == "draining"
        assert "xid 79" in event.data["reason"]
    finally:
        subprocess.run(
            ["strigger", "--clear", "--node=gpu-003"],
            env={**os.environ, "SLURM_CONF": slurm_cluster.conf},
            capture_output=True,
            timeout=20,
            check=False,
        )
        slurm_cluster.run("scontrol", "update", "nodename=gpu-003", "state=resume")
