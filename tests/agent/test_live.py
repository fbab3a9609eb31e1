"""The agent, killed while the API is down and restarted after it is back, delivers every event exactly once."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from runs.models import Event
from tests.conftest import make_token

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent(url: str, token: str, spool: Path, scenario: Path, log: Path, deadline: float) -> subprocess.Popen:
    env = os.environ | {"FLEETOPS_TOKEN": token, "FLEETOPS_AGENT_FAKE_NVML": str(scenario), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "fleetops_agent.main", "--fake", "--once", "--url", url, "--spool-dir", str(spool)]
    argv += ["--node", "gpu-007", "--cluster", "cluster-a", "--deadline", str(deadline), "--storm-window", "60"]
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _spooled(spool: Path) -> list[dict]:
    out = []
    for seg in sorted(spool.glob("seg-*.jsonl")):
        for line in seg.read_text().splitlines():
            try:
                out.append(json.loads(line)["event"])
            except ValueError:
                pass
    return out


def _wait_for(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.django_db(transaction=True)
def test_killed_while_the_api_is_down_then_restarted_delivers_every_event_exactly_once(live_server, tmp_path):
    token = make_token("agent", ["events:write"])
    spool = tmp_path / "spool"
    storm = tmp_path / "storm.json"
    storm.write_text(
        json.dumps(
            {
                "gpus": [{"uuid": "GPU-0"}, {"uuid": "GPU-1", "recovery_action": 1}],
                "events": [{"gpu": 0, "xid": 79, "repeat": 2000}, {"gpu": 1, "xid": 48}, {"gpu": 1, "ecc": "dbe"}],
            }
        )
    )
    quiet = tmp_path / "quiet.json"
    quiet.write_text(json.dumps({"gpus": [{}, {}]}))

    # 1. API down: the agent spools and retries; SIGKILL it mid-retry
    log1 = tmp_path / "run1.log"
    down = _agent(f"http://127.0.0.1:{_closed_port()}", token, spool, storm, log1, deadline=600)
    try:
        _wait_for(lambda: "event API unavailable" in log1.read_text(), 30, "the agent to find the API down")
    finally:
        down.send_signal(signal.SIGKILL)
        down.wait(10)
    before_kill = _spooled(spool)
    # heartbeat, gpu.ecc and gpu.health for 2 GPUs, one gpu.xid per storm, a gpu.ecc after the double-bit error
    assert Counter(e["type"] for e in before_kill) == {"node.heartbeat": 1, "gpu.ecc": 3, "gpu.health": 2, "gpu.xid": 2}
    assert Event.objects.count() == 0

    # 2. API back: the restarted agent sends what was spooled before the kill, and its own new readings
    log2 = tmp_path / "run2.log"
    up = _agent(live_server.url, token, spool, quiet, log2, deadline=60)
    assert up.wait(90) == 0, log2.read_text()
    spooled = _spooled(spool) if spool.exists() else []
    expected = {(e["source"], e["id"]) for e in before_kill} | {(e["source"], e["id"]) for e in spooled}
    assert len(expected) == len(before_kill) + 5  # run 2: a heartbeat, ecc and health for 2 GPUs, no Xids

    rows = Counter(Event.objects.values_list("source", "event_id"))
    assert set(rows) == expected
    assert all(n == 1 for n in rows.values())
    storm_event = Event.objects.get(type="gpu.xid", data__xid=79)
    assert storm_event.data["count"] == 2000 and storm_event.data["node"] == "gpu-007"

    # 3. a crash between the POST and the cursor write: the resend carries the same ids, so it is a duplicate
    state = json.loads((spool / "state.json").read_text())
    (spool / "state.json").write_text(json.dumps(state | {"delivered": 0}))
    log3 = tmp_path / "run3.log"
    again = _agent(live_server.url, token, spool, quiet, log3, deadline=60)
    assert again.wait(90) == 0, log3.read_text()
    assert "delivered 5, duplicates 13, rejected 0" in log3.read_text()
    after = Counter(Event.objects.values_list("source", "event_id"))
    assert all(n == 1 for n in after.values())
    assert set(rows) <= set(after) and len(after) == len(rows) + 5  # only run 3's own new readings were added
