"""`fleetops-agent --send-every`: routine polls are delivered together every so often, an Xid at once with them.

At 16,384 nodes polling every 30 s, a delivery a poll is 546 POSTs a second, more than one 2-core machine's intake
takes (docs/PERFORMANCE.md, "16,384 agents posting for themselves"); --send-every 120 makes it 137. A real agent
process (fake NVML) against the real API; when a POST came is told by its events' received_at."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import OperationalError

from runs.models import Event
from tests.conftest import make_token
from tests.services import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _read(query):
    """What `query()` reads now; on the embedded default the live server's writes lock SQLite's shared in-memory
    database's tables for a moment, so a read that meets one is made again."""
    for _ in range(100):
        try:
            return query()
        except OperationalError:
            time.sleep(0.05)
    return query()


@pytest.mark.django_db(transaction=True)
def test_polls_wait_for_the_send_interval_and_an_xid_goes_at_once_with_them(live_server, tmp_path):
    token = make_token("agent-gpu-007", ["events:write"], role="agent", node="gpu-007")
    inject = tmp_path / "inject.jsonl"
    inject.write_text("")
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"gpus": [{"uuid": "GPU-0"}], "inject": str(inject)}))
    env = os.environ | {"FLEETOPS_TOKEN": token, "FLEETOPS_AGENT_FAKE_NVML": str(scenario), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "fleetops_agent.main", "--fake", "--url", live_server.url, "--node", "gpu-007"]
    argv += ["--spool-dir", str(tmp_path / "spool"), "--interval", "0.2", "--readings-every", "1000"]
    argv += ["--send-every", "60", "--storm-window", "0.2"]
    log = tmp_path / "agent.log"
    agent = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    heartbeats = Event.objects.filter(type="node.heartbeat")
    try:
        # The first poll goes at once (a heartbeat, and the GPU's first readings); the next ones wait for 60 s.
        wait_for(lambda: _read(heartbeats.count), timeout=30, what="the first poll", every=0.05)
        time.sleep(3.0)  # more polls, spooled (one each 0.5 s: the agent waits on NVML events that long between)
        assert _read(heartbeats.count) == 1, log.read_text()

        injected = time.time()
        inject.write_text(json.dumps({"gpu": 0, "xid": 79}) + "\n")
        wait_for(lambda: _read(Event.objects.filter(type="gpu.xid").count), timeout=30, what="the Xid", every=0.05)
        arrived = time.time() - injected
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)

    xid = _read(lambda: Event.objects.get(type="gpu.xid"))
    assert xid.data["xid"] == 79 and arrived < 10, (arrived, log.read_text())
    # The polls spooled meanwhile went with it, in the same delivery, and none before it: two deliveries of heartbeats.
    received = sorted(_read(lambda: list(heartbeats.values_list("received_at", flat=True))))
    together = [at for at in received if at >= xid.received_at - timedelta(seconds=0.5)]
    assert len(together) >= 4 and len(together) == len(received) - 1, (received, xid.received_at, log.read_text())
    assert xid.received_at - received[0] > timedelta(seconds=2.5)


def test_a_negative_send_interval_is_refused():
    argv = [sys.executable, "-m", "fleetops_agent.main", "--url", "http://127.0.0.1:1", "--token", "x"]
    done = subprocess.run([*argv, "--send-every", "-1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--send-every must be 0 or more seconds" in done.stderr
