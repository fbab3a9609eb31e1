"""The embedded default does the whole job (issue 18): what `make run` ends in, `manage.py serve`, on SQLite with no
Redis, detects a hung run and a silent node by itself, through the worker and beat it starts beside the web server.

Real processes: the dev server and a Celery worker with beat on the broker folder (kombu's filesystem transport),
on a SQLite file of their own; the hang floor and the heartbeat timeout lowered by their settings so that the first
beat ticks (every 60 s) find them. Nothing is typed after the events are posted.
"""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from tests.services import free_ports, wait_for

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 150  # two beat ticks of 60 s, and the worker's start


def _manage(env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _event(type_: str, when: datetime, id_: str, **data) -> dict:
    time_ = when.isoformat().replace("+00:00", "Z")
    return {"specversion": "1.0", "id": id_, "source": "embedded://test", "type": type_, "time": time_, "data": data}


def test_make_run_detects_a_hang_and_a_silent_node_with_no_command_typed(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'fleetops.sqlite3'}",
        "EMBEDDED_BROKER_DIR": str(tmp_path / "broker"),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "HANG_FLOOR_S": "30",
        "HANG_K": "2",
        "HEARTBEAT_TIMEOUT_S": "30",
        "PYTHONUNBUFFERED": "1",
    }
    _manage(env, "migrate", "--noinput", "-v0")
    token = _manage(env, "create_api_token", "embedded", "--scopes", "events:write,read", "--role", "scheduler")
    token = token.strip().split()[-1]
    port = free_ports(1)
    log = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        wait_for(lambda: _answers(url), timeout=60, what="manage.py serve to answer")
        now = datetime.now(UTC).replace(microsecond=0)
        start = now - timedelta(minutes=10)
        events = [_event("run.started", start, "s", run="h1", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="1")]
        events += [_event("run.step", start + timedelta(seconds=20 * i), f"st{i}", run="h1", step=i) for i in range(20)]
        events.append(_event("node.heartbeat", now - timedelta(seconds=5), "hb", node="quiet", cluster="c1"))
        answer = requests.post(
            url + "/api/v1/events",
            data=json.dumps(events),
            headers={**headers, "Content-Type": "application/cloudevents-batch+json"},
            timeout=30,
        )
        assert answer.status_code == 202, answer.text
        posted = time.monotonic()

        def both() -> list[str] | None:
            titles = _incident_titles(url, headers)
            hung, silent = any("hung" in t for t in titles), any("quiet" in t for t in titles)
            return titles if hung and silent else None

        found = wait_for(
            both, timeout=BOUND_S, what="a hang incident and a heartbeat-loss incident from the worker's beat", every=2
        )
        print(f"\nfound in {time.monotonic() - posted:.0f} s: {sorted(found)}")
    except BaseException:
        log.flush()
        print((tmp_path / "serve.log").read_text()[-4000:])
        raise
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)


def _incident_titles(url: str, headers: dict) -> list[str]:
    rows = requests.get(url + "/api/v1/incidents", headers=headers, timeout=30).json()["results"]
    return [row["title"] for row in rows]


def _answers(url: str) -> bool:
    try:
        return requests.get(url + "/login/", timeout=2).status_code == 200
    except requests.RequestException:
        return False
