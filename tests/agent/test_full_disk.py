"""The node agent on a full disk (issue 45: it exited at its first poll, with everything it had spooled undelivered).

A real fleetops-agent process (fake NVML) with its spool on a small tmpfs, against the real API: it spools while the
API is down and is killed; the disk is filled; a new agent must deliver what was spooled and go on sending its polls.
"""

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from django.db import OperationalError

from runs.models import Event
from tests.conftest import make_token
from tests.services import free_ports, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _agent(url: str, token: str, spool: Path, scenario: Path, log: Path) -> subprocess.Popen:
    env = os.environ | {"FLEETOPS_TOKEN": token, "FLEETOPS_AGENT_FAKE_NVML": str(scenario), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "fleetops_agent.main", "--fake", "--url", url, "--spool-dir", str(spool)]
    argv += ["--node", "gpu-007", "--cluster", "cluster-a", "--interval", "0.2"]
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _spooled(spool: Path) -> list[dict]:
    return [json.loads(line)["event"] for seg in sorted(spool.glob("seg-*.jsonl")) for line in seg.open()]


def _stored() -> Counter:
    """(source, id) of every stored event, with how often; read again where SQLite's shared database is locked."""
    for _ in range(100):
        try:
            return Counter(Event.objects.values_list("source", "event_id"))
        except OperationalError:
            pass
    return Counter(Event.objects.values_list("source", "event_id"))


@pytest.mark.reliability(
    "The node agent's spool disk fills up",
    how="fleetops-agent (fake NVML, a poll every 0.2 s) spools with the API down and is killed; its spool is on a "
    "256 KiB tmpfs, which is then filled to the last byte; a new agent is started against the API, runs for 20 polls, "
    "and the disk is freed while it runs",
    outcome="every event spooled before the disk filled arrives, once; the agent stays up, says the spool cannot be "
    "written and holds its new polls in memory, which arrive meanwhile; once the disk has room it writes them there "
    "and exits 0 on SIGTERM; no torn line in the spool (before: the agent exited at its first poll, nothing delivered)",
)
@pytest.mark.django_db(transaction=True)
def test_an_agent_on_a_full_disk_delivers_what_it_spooled_and_keeps_sending(live_server, small_disk, tmp_path):
    token = make_token("agent-gpu-007", ["events:write"], role="agent", node="gpu-007")
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"gpus": [{"uuid": "GPU-0"}, {"uuid": "GPU-1"}]}))
    spool = small_disk.path / "spool"

    # 1. The API down: polls pile up in the spool; the agent is killed before it could deliver any
    log1 = tmp_path / "run1.log"
    down = _agent(f"http://127.0.0.1:{free_ports()}", token, spool, scenario, log1)
    try:
        wait_for(lambda: len(_spooled(spool)) >= 50, timeout=60, what="50 events spooled", every=0.1)
    finally:
        down.send_signal(signal.SIGKILL)
        down.wait(10)
    backlog = {(e["source"], e["id"]) for e in _spooled(spool)}

    # 2. The disk full, the API up: what was spooled arrives, and the agent goes on
    small_disk.fill()
    assert small_disk.full()
    log2 = tmp_path / "run2.log"
    up = _agent(live_server.url, token, spool, scenario, log2)
    try:
        wait_for(lambda: backlog <= set(_stored()) or up.poll() is not None, timeout=60, what="the backlog")
        assert up.poll() is None, log2.read_text()
        assert backlog <= set(_stored())
        # (the first polls may still fit in the room the spool's last block had left)
        refused = "cannot be written (No space left on device)"
        wait_for(lambda: refused in log2.read_text() or up.poll() is not None, timeout=30, what="the disk to refuse")

        arrived = len(_stored())
        wait_for(lambda: len(_stored()) >= arrived + 20 * 5 or up.poll() is not None, timeout=60, what="20 polls")
        assert up.poll() is None, log2.read_text()  # 20 polls on a full disk (a heartbeat, 2 ECC and 2 health each)
        held = set(_stored()) - backlog - {(e["source"], e["id"]) for e in _spooled(spool)}
        assert small_disk.full() and len(held) >= 50  # sent from memory: the disk never had them

        # 3. Room again: the events held in memory are written with the next poll's
        small_disk.free()
        wait_for(lambda: "can be written again" in log2.read_text(), timeout=30, what="the spool written again")
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(30)
    assert code == 0, log2.read_text()
    stored = _stored()
    assert all(n == 1 for n in stored.values()) and backlog <= set(stored)
    assert all(e["id"] for e in _spooled(spool))  # every line parses: no torn append left between records
