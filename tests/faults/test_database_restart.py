"""PostgreSQL stopped and started again in the middle of a stream, under gunicorn, a Celery worker and the agent.

Real parts only: a private PostgreSQL (pg_ctl stop -m fast / start), a private Redis, gunicorn serving
fleetops.wsgi, a `celery worker` process and the `fleetops-agent` process.
"""

import json
import os
import re
import subprocess
import sys

import pytest
import requests

from tests.faults.conftest import (
    ROOT,
    app_env,
    make_private_token,
    probe,
    send_sweeper,
    stream,
    wait_for,
)
from tests.services import Gunicorn, Worker, console_login

pytestmark = pytest.mark.services  # private servers started from the machine's binaries (conftest.py)
BATCH = "application/cloudevents-batch+json"


def _post(url: str, token: str, events: list[dict]) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": BATCH}
    return requests.post(url + "/api/v1/events", data=json.dumps(events), headers=headers, timeout=30)


def _agent(url: str, token: str, tmp_path) -> tuple[subprocess.Popen, object]:
    scenario = tmp_path / "nvml.json"
    scenario.write_text(json.dumps({"gpus": [{"uuid": "GPU-0"}, {"uuid": "GPU-1"}], "events": [{"gpu": 1, "xid": 48}]}))
    log = tmp_path / "agent.log"
    env = {**os.environ, "FLEETOPS_TOKEN": token, "FLEETOPS_AGENT_FAKE_NVML": str(scenario), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "fleetops_agent.main", "--fake", "--once", "--url", url, "--deadline", "180"]
    argv += ["--spool-dir", str(tmp_path / "spool"), "--node", "gpu-900", "--cluster", "sim-cluster"]
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT), log


@pytest.mark.reliability(
    "PostgreSQL restarted in the middle of a stream",
    how="private PostgreSQL stopped (pg_ctl -m fast) while gunicorn, a Celery worker and fleetops-agent work, "
    "then started again",
    outcome="event POST, API read and console page answer 503 with Retry-After (never 500) while it is down; "
    "the agent keeps its events spooled and resends them; every POST after the restart is 202; every event "
    "stored once and applied; the record equals a rebuild from the log",
)
def test_postgres_restart_mid_stream_gives_503_then_a_complete_record(private_postgres, private_redis, tmp_path):
    pg, url = private_postgres, private_postgres.url(private_postgres.database)
    events = stream()
    batches = [events[i : i + 250] for i in range(0, len(events), 250)]
    third = len(batches) // 3
    token = make_private_token(url)
    env = app_env(url, private_redis.url)
    web, worker = Gunicorn(tmp_path, env), Worker(**env)
    agent = None
    try:
        console = console_login(web.url, url)
        for batch in batches[:third]:
            assert _post(web.url, token, batch).status_code == 202

        pg.stop()
        refused = _post(web.url, token, batches[third])
        assert refused.status_code == 503, refused.text[:500]
        assert refused.headers["Retry-After"].isdigit()
        assert refused.headers["Content-Type"] == "application/json"
        assert "Database unavailable" in refused.json()["detail"]
        read = requests.get(web.url + "/api/v1/runs", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert (read.status_code, read.headers.get("Retry-After")) == (503, refused.headers["Retry-After"])
        page = console.get(web.url + "/", timeout=10)
        assert page.status_code == 503 and page.headers["Retry-After"].isdigit()
        assert page.headers["Content-Type"].startswith("text/html") and "database is unavailable" in page.text
        agent, agent_log = _agent(web.url, token, tmp_path)
        wait_for(lambda: "HTTP 503" in agent_log.read_text(), timeout=60, what="the agent to meet the 503")

        pg.start()
        for batch in batches[third:]:  # the refused batch again, then the rest: each 202 at the first try
            answer = _post(web.url, token, batch)
            assert answer.status_code == 202, answer.text[:500]
        assert agent.wait(180) == 0, agent_log.read_text()
        delivered = re.search(r"delivered (\d+), duplicates 0, rejected 0", agent_log.read_text())
        assert delivered and int(delivered.group(1)) >= 5, agent_log.read_text()

        def all_applied():
            send_sweeper(private_redis.url)  # picks up what a task lost to the outage left behind
            rows = pg.query(pg.database, "SELECT count(*) FROM runs_event WHERE applied_at IS NULL")
            return rows[0][0] == 0

        wait_for(all_applied, timeout=180, what="every event applied", every=3)
        # The reference rebuild is one process's: no worker beside it, whose queued turn or sweeper would take
        # rows the rebuild (skipping locked rows) then leaves out of its snapshot.
        worker.stop()
        state = probe(url, rebuild=True)
        assert state["events"] == len(events) + int(delivered.group(1))
        assert (state["doubled"], state["unapplied"]) == (0, 0)
        assert state["snapshot"]["interruptions"] and state["snapshot"] == state["rebuilt"]
        assert "database unavailable, answering 503" in web.log.read_text()
        assert " 500 " not in web.log.read_text() and "Internal Server Error" not in web.log.read_text()
    except BaseException:
        print(web.log.read_text()[-4000:])
        print("".join(worker.lines[-60:]))
        raise
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait(10)
        web.stop()
        worker.stop()
