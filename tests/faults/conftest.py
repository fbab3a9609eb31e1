"""Private PostgreSQL and Redis servers that the fault tests may stop and restart, and the app run against them.

The shared servers (5432, 6379) are never touched: each fault test that restarts a server gets its own,
started here from Debian's binaries on a free port of 55400-55499 (initdb + pg_ctl in a temporary folder owned
by the postgres user; redis-server as a child process), and runs gunicorn and Celery workers as subprocesses
with DATABASE_URL and REDIS_URL pointing at them. Missing binaries skip on a laptop and fail under CI=true.
"""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from celery.exceptions import AlwaysEagerIgnored
from django.conf import settings

from fleetops.celery import app as celery_app
from tests.conftest import require
from tests.services import free_ports, wait_for

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = "fleetops_template"


# --- PostgreSQL -------------------------------------------------------------------------------------------


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


class PrivatePostgres:
    """One PostgreSQL cluster of our own: stop(), start(), restart() at will."""

    def __init__(self, root: Path, bindir: Path):
        self.root, self.bindir, self.port = root, bindir, free_ports()
        self.data = root / "data"
        self._as_postgres(self.bindir / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        self.admin(f"CREATE DATABASE {TEMPLATE}")

    def _as_postgres(self, *args, timeout: float = 60) -> str:
        command = [str(a) for a in args]
        if os.geteuid() == 0:  # root may not run postgres: the cluster belongs to the postgres user
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            log = (self.root / "server.log").read_text() if (self.root / "server.log").exists() else ""
            pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}\n{log[-2000:]}")
        return done.stdout

    def _pg_ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            self.bindir / "pg_ctl", "-D", self.data, "-l", self.root / "server.log", "-w", "-o", options, *args
        )

    def start(self) -> None:
        self._pg_ctl("start")

    def stop(self) -> None:
        """A fast shutdown: open sessions are ended ("terminating connection due to administrator command")."""
        self._pg_ctl("-m", "fast", "stop")

    def restart(self) -> None:
        self._pg_ctl("-m", "fast", "restart")

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def admin(self, sql: str) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)

    def query(self, name: str, sql: str) -> list[tuple]:
        with psycopg.connect(self.url(name)) as conn:
            return conn.execute(sql).fetchall()

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("-m", "immediate", "stop")


class PrivateReplica(PrivatePostgres):
    """A streaming replica of a private server, on a port of its own: pg_basebackup -R (standby.signal and the
    primary's address written for it), then started as a hot standby."""

    def __init__(self, primary: PrivatePostgres):
        self.root, self.bindir, self.port = primary.root / f"replica-{primary.port}", primary.bindir, free_ports()
        self.data = self.root / "data"
        self.root.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        backup = [self.bindir / "pg_basebackup", "-h", "127.0.0.1", "-p", primary.port, "-U", "postgres"]
        self._as_postgres(*backup, "-D", self.data, "-R", "-X", "stream", "-c", "fast", "--no-sync")
        self.start()

    def pause_replay(self) -> None:
        self.admin("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self.admin("SELECT pg_wal_replay_resume()")


@pytest.fixture
def private_replica(private_postgres) -> Iterator[PrivateReplica]:
    """A streaming replica of the private server, this test's database included."""
    replica = PrivateReplica(private_postgres)
    try:
        yield replica
    finally:
        replica.close()
        shutil.rmtree(replica.root, ignore_errors=True)


def private_server_folder(prefix: str) -> tuple[Path, Path]:
    """(a new temporary folder the postgres user owns, the PostgreSQL server binaries' folder) for a PrivatePostgres;
    skips on a laptop without the binaries, fails under CI."""
    bindir = _pg_bin()
    require(bindir is not None and shutil.which("runuser") is not None, "PostgreSQL server binaries (postgresql)")
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    return root, bindir


@pytest.fixture(scope="session")
def private_postgres_server() -> Iterator[PrivatePostgres]:
    root, bindir = private_server_folder("fleetops-pg-")
    server = PrivatePostgres(root, bindir)
    try:
        _run_manage(["migrate", "--noinput"], DATABASE_URL=server.url(TEMPLATE))  # once; each test copies it
        yield server
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def private_postgres(private_postgres_server, request):
    """The private server with a fresh database for this test (a copy of the migrated template): its URL."""
    server = private_postgres_server
    name = "t_" + request.node.name.lower()[:50].replace("[", "_").replace("]", "").replace("-", "_")
    server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    server.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    server.database = name
    yield server
    if (server.data / "postmaster.pid").exists():
        server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _run_manage(args: list[str], **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": "", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def make_private_token(database_url: str, name: str = "fault-tests") -> str:
    args = ["create_api_token", name, "--scopes", "events:write,read", "--role", "scheduler"]
    out = _run_manage(args, DATABASE_URL=database_url)
    return [line for line in out.split() if len(line) > 30][-1]


def probe(database_url: str, *, rebuild: bool = False) -> dict:
    """The private database's event counts and record snapshot; with rebuild, also the snapshot after
    `rebuild_record` (every event folded in again, in order, by one process: the reference)."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.faults.probe", *(["--rebuild"] if rebuild else [])],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url, "REDIS_URL": "", "LOG_LEVEL": "WARNING"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# --- Redis ------------------------------------------------------------------------------------------------


class PrivateRedis:
    """`redis-server` as a child process, no persistence: a restart loses every queued task, as a crash would."""

    def __init__(self, root: Path):
        self.root, self.port, self.process = root, free_ports(), None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--daemonize", "no", "--dir", str(self.root)]
        log = (self.root / "redis.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._answers, timeout=20, what=f"redis-server on {self.port}")

    def stop(self) -> None:
        """SIGKILL: whatever was queued is gone."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    require(shutil.which("redis-server") is not None, "redis-server")
    server = PrivateRedis(tmp_path)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.stop()


def send_sweeper(redis_url: str) -> None:
    """What beat does every minute, now: queue apply_pending_events for every stored event still unapplied."""
    with celery_app.connection_for_write(redis_url) as connection, warnings.catch_warnings():
        warnings.simplefilter("ignore", AlwaysEagerIgnored)  # the tests' eager mode is for .delay(), not this
        celery_app.send_task("runs.tasks.apply_pending_events", kwargs={"older_than_s": 0}, connection=connection)


# --- The app ----------------------------------------------------------------------------------------------


def app_env(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def queues() -> str:
    return ",".join(settings.FLEETOPS_QUEUES)


def stream() -> list[dict]:
    """Three days of a simulated 256-GPU run at ten times Llama 3's failure rate: about 4,500 events with a dozen
    failures and restarts, checkpoints, Xids, ECC and node states, in time order."""
    from runs.domain.simulator import SimulationConfig, simulate

    return list(simulate(SimulationConfig(gpus=256, days=3, seed=2, rate_per_gpu_hour=3.5e-4)))
