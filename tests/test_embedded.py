"""The embedded default does the whole job (issue 18): what `make run` ends in, `manage.py serve`, on SQLite with no
Redis, detects a hung run and a silent node by itself, and ends a run whose Slurm job ended without its end event
(issue 46), through the worker and beat it starts beside the web server; and a signal to it stops everything it
started (issue 46).

Real processes: the dev server and a Celery worker with beat on the broker folder (kombu's filesystem transport),
on a SQLite file of their own; the hang floor and the heartbeat timeout lowered by their settings so that the first
beat ticks (every 60 s) find them. Nothing is typed after the events are posted.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests

from runs.management.commands.serve import STOP_GRACE_S
from tests.conftest import require
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


def _embedded(tmp_path: Path, **settings: str) -> dict:
    """The environment of `make run`'s embedded default, on a SQLite file and a broker folder under tmp_path."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'fleetops.sqlite3'}",
        "EMBEDDED_BROKER_DIR": str(tmp_path / "broker"),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "PYTHONUNBUFFERED": "1",
        **settings,
    }


@contextmanager
def _serving(tmp_path: Path, **settings: str):
    """`manage.py serve` on a SQLite file and a broker folder of its own, with these settings: (url, API headers, its
    environment) once it answers; its log printed if the block fails; stopped after."""
    env = _embedded(tmp_path, **settings)
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
    try:
        wait_for(lambda: _answers(url), timeout=60, what="manage.py serve to answer")
        yield url, {"Authorization": f"Bearer {token}"}, env
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


def _post(url: str, headers: dict, events: list[dict]) -> None:
    answer = requests.post(
        url + "/api/v1/events",
        data=json.dumps(events),
        headers={**headers, "Content-Type": "application/cloudevents-batch+json"},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text


def test_make_run_detects_a_hang_and_a_silent_node_with_no_command_typed(tmp_path):
    quick = {"HANG_FLOOR_S": "30", "HANG_K": "2", "HEARTBEAT_TIMEOUT_S": "30"}
    with _serving(tmp_path, **quick) as (url, headers, _env):
        now = datetime.now(UTC).replace(microsecond=0)
        start = now - timedelta(minutes=10)
        events = [_event("run.started", start, "s", run="h1", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="1")]
        events += [_event("run.step", start + timedelta(seconds=20 * i), f"st{i}", run="h1", step=i) for i in range(20)]
        events.append(_event("node.heartbeat", now - timedelta(seconds=5), "hb", node="quiet", cluster="c1"))
        _post(url, headers, events)
        posted = time.monotonic()

        def both() -> list[str] | None:
            titles = _incident_titles(url, headers)
            hung, silent = any("hung" in t for t in titles), any("quiet" in t for t in titles)
            return titles if hung and silent else None

        found = wait_for(
            both, timeout=BOUND_S, what="a hang incident and a heartbeat-loss incident from the worker's beat", every=2
        )
        print(f"\nfound in {time.monotonic() - posted:.0f} s: {sorted(found)}")


def test_make_run_ends_a_run_whose_slurm_job_ended_without_its_end_event(tmp_path, slurm_cluster):
    """The reconciliation with the scheduler runs on serve's beat too: a real Slurm job ends, no epilog event is sent,
    and the run is ended as Slurm says with nothing typed (the sweep every 5 s here, every 60 s by default)."""
    with _serving(tmp_path, SCHEDULER_RECONCILE_S="5", SCHEDULER_RECONCILE_GRACE_S="0") as (url, headers, env):
        cluster = f"Cluster.objects.create(name='loopback', scheduler='slurm', api_url={slurm_cluster.conf!r})"
        _manage(env, "shell", "-c", f"from runs.models import Cluster; {cluster}")
        job_id = slurm_cluster.run("sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", "--wrap=sleep 2")
        job_id = job_id.strip().split(";")[0]
        began = datetime.now(UTC) - timedelta(seconds=1)
        data = {"run": "lost-epilog", "cluster": "loopback", "gpus": 8, "nodes": ["gpu-001"], "job_id": job_id}
        _post(url, headers, [_event("run.started", began, f"slurm:loopback:{job_id}:0:start", **data)])

        def reconciled() -> list[dict]:
            answer = requests.get(url + "/api/v1/runs/lost-epilog/goodput", headers=headers, timeout=30).json()
            return [f for f in answer.get("data_quality", []) if f["code"] == "ended_by_reconciliation"]

        (finding,) = wait_for(
            reconciled, timeout=60, what="the run ended by the reconciliation on serve's beat", every=1
        )
        assert f"Slurm reports job {job_id} COMPLETED" in finding["what"]


def _incident_titles(url: str, headers: dict) -> list[str]:
    rows = requests.get(url + "/api/v1/incidents", headers=headers, timeout=30).json()["results"]
    return [row["title"] for row in rows]


def _answers(url: str) -> bool:
    try:
        return requests.get(url + "/login/", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.reliability(
    "A signal to manage.py serve (SIGTERM from a process manager or `kill`, SIGHUP from a closed terminal) ended it at "
    "once and left the Celery worker and beat it had started running, orphaned, on the database and the broker folder",
    how="manage.py serve on a free port with the embedded settings, its worker and beat up; then SIGTERM, SIGINT or "
    "SIGHUP to serve's own process, not its group",
    outcome="serve exits, and no process it started (the worker, beat) is left, within the worker's stop grace and 5 s",
)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"])
def test_a_signal_to_serve_stops_everything_it_started(tmp_path, signum):
    require(_processes_visible(), "psutil or /proc, to see serve's processes")
    env = _embedded(tmp_path)
    _manage(env, "migrate", "--noinput", "-v0")
    command = [sys.executable, "manage.py", "serve", f"127.0.0.1:{free_ports(1)}"]
    _signalled_leaves_nothing(command, env, tmp_path / "serve.log", signum, started=2)  # the worker, beat its child


@pytest.mark.reliability(
    "SIGTERM to `make run` stopped make and the shell of its recipe, and left manage.py serve, its worker and beat "
    "running; on another PORT the demo's e-mails still linked to port 8000",
    how="make run PORT=<a free port> with the embedded settings (its venv and migrate done beforehand: make -o "
    "migrate), the demo loaded and its login page answering there; then SIGTERM to make's process",
    outcome="make exits, and no process it started (serve, the worker, beat) is left, within the worker's stop grace "
    "and 5 s; the demo's page to its on-call e-mail links to the port it was served on",
)
def test_make_run_serves_on_its_port_and_sigterm_stops_everything_it_started(tmp_path):
    require(shutil.which("make") is not None and _processes_visible(), "make, and psutil or /proc")
    env = _embedded(tmp_path, DEMO_LOGIN_FILE=str(tmp_path / "demo-login"), EMAIL_FILE_PATH=str(tmp_path / "mail"))
    del env["CELERY_TASK_ALWAYS_EAGER"]  # as make run has it: the demo loads in-process, serve's worker queues
    env.pop("PUBLIC_URL", None)
    _manage(env, "migrate", "--noinput", "-v0")
    port = free_ports(1)
    command = ["make", "-o", "migrate", "run", f"PORT={port}", f"BIN={Path(sys.executable).parent}"]
    url = f"http://127.0.0.1:{port}"
    _signalled_leaves_nothing(command, env, tmp_path / "make.log", signal.SIGTERM, started=3, url=url)
    mails = [path.read_text() for path in (tmp_path / "mail").iterdir()]
    assert mails and all(f"{url}/incidents/" in mail for mail in mails), mails[:1]


def _signalled_leaves_nothing(
    command: list[str], env: dict, log_path: Path, signum: int, *, started: int, url: str = ""
) -> None:
    """Start command, wait for `started` processes under it (and its login page at url), send signum to its own
    process (not its group), and assert that it exits and that none of them outlives it."""
    log = log_path.open("w")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    seen: set[int] = set()

    def all_started() -> set[int] | None:
        assert process.poll() is None, f"{command[0]} exited with {process.returncode} before it had started all"
        found = _descendants(process.pid)
        return found if len(found) >= started and (not url or _answers(url)) else None

    try:
        seen = wait_for(all_started, timeout=240, what=f"{started} processes under {command[0]}")
        time.sleep(2)  # past their start-up, which installs the handlers a stop goes through
        seen |= _descendants(process.pid)
        os.kill(process.pid, signum)
        process.wait(STOP_GRACE_S + 5)
        wait_for(lambda: not _running(seen), timeout=5, what=f"the processes it started ({sorted(seen)}) to stop")
    except BaseException:
        log.flush()
        print(log_path.read_text()[-4000:])
        raise
    finally:
        left = _running(seen | {process.pid})
        for pid in left | {child for parent in left for child in _descendants(parent)}:  # beat, if it came late
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(5)


def _processes_visible() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return Path("/proc/self/stat").exists()
    return True


def _descendants(pid: int) -> set[int]:
    """pid's children, theirs and so on: psutil's view where it is installed (make test has it), else /proc's."""
    try:
        import psutil
    except ImportError:
        table = _proc_table()
        found, frontier = set(), {pid}
        while frontier:
            frontier = {child for child, (_, parent) in table.items() if parent in frontier} - found
            found |= frontier
        return found
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _running(pids: set[int]) -> set[int]:
    """Those of pids still running; a zombie has ended (only its entry waits for a parent to reap it)."""
    try:
        import psutil
    except ImportError:
        table = _proc_table()
        return {pid for pid in pids if pid in table and table[pid][0] != "Z"}
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _proc_table() -> dict[int, tuple[str, int]]:
    """/proc's processes: pid -> (state, parent pid)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError, ValueError):
            continue  # ended while being read
        table[int(entry.name)] = (state, int(parent))
    return table
