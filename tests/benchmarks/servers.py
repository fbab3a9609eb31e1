"""The real processes the pipeline benchmarks measure through: gunicorn serving fleetops.wsgi, and Celery workers.

Both run as subprocesses of this machine's venv against the benchmark's database (the one pytest-django points
the test process at, never a test_ copy) and the Redis of REDIS_URL, so what they store is what the benchmark
reads back.
"""

import http.client
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).parent / "gunicorn"
# With DEBUG off, pages name their static files through whitenoise's manifest, as in production: collected once
# per session into a directory of the benchmarks' own.
STATIC_ROOT = ROOT / "var" / "bench-staticfiles"
_collected: list[str] = []  # the STATIC_ROOTs collected this session


def database_url() -> str:
    db = connection.settings_dict
    return (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )


def redis_url() -> str:
    url = os.environ.get("REDIS_URL", "")
    if not url:
        pytest.exit("This benchmark needs Redis: set REDIS_URL (e.g. redis://127.0.0.1:6379/4).", returncode=1)
    return url


def server_env(**overrides: str) -> dict[str, str]:
    """Production-like settings: DEBUG off (no query log kept per request), tasks queued to Redis, quiet logs."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "fleetops.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url(),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "DEBUG": "false",
        "SECRET_KEY": "fleetops-benchmark-only-key-not-a-secret-0123456789abcdef",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback; no TLS proxy in front
        "LOG_LEVEL": "WARNING",
        "STATIC_ROOT": str(STATIC_ROOT),
        "PYTHONUNBUFFERED": "1",
        # The benchmarks measure the intake's ceiling with one token; the per-token quota (runs/quotas.py, 10,000
        # events/s and 5 MiB/s by default) would measure the quota instead. Its own cost (one statement) stays in.
        "EVENTS_QUOTA_PER_WINDOW": str(10**12),
        "EVENTS_QUOTA_BYTES_PER_WINDOW": str(10**15),
        **overrides,
    }


def _collectstatic(env: dict[str, str]) -> None:
    """Collected once and kept (whitenoise compresses plotly.js and friends: minutes on a busy 2-core machine);
    collected again when a file under static/ or pyproject.toml (the pinned packages serving files) is newer."""
    manifest = Path(env["STATIC_ROOT"]) / "staticfiles.json"  # a caller may pass a STATIC_ROOT of its own
    if env["STATIC_ROOT"] in _collected or (manifest.exists() and manifest.stat().st_mtime > _newest_static_source()):
        return
    command = [sys.executable, "manage.py", "collectstatic", "--noinput", "--clear", "--verbosity", "0"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        pytest.fail(f"collectstatic failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    manifest.touch()  # written before compression starts; stamped once everything is in place
    _collected.append(env["STATIC_ROOT"])


def _newest_static_source() -> float:
    sources = [ROOT / "pyproject.toml", *(path for path in (ROOT / "static").rglob("*") if path.is_file())]
    return max(path.stat().st_mtime for path in sources)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    """Any HTTP answer counts: the workers have imported Django and serve requests."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/login/")
        return conn.getresponse().status < 500
    except OSError:
        return False
    finally:
        conn.close()


@contextmanager
def gunicorn(
    workers: int = 2, threads: int = 1, *, timeout: float = 60, nice: int = 0, log: Path | None = None, **env: str
) -> Iterator[str]:
    """`gunicorn fleetops.wsgi` with `workers` processes (gthread when `threads` > 1) on a free loopback port, at
    `nice` (a lower CPU priority: docs/DEPLOY.md's intake pool); yields the base URL ("http://127.0.0.1:PORT") once it
    answers, and stops it (SIGTERM, then SIGKILL). Its output goes to `log`, kept, or to a temporary file, removed."""
    port = _free_port()
    command = [
        *(["nice", "-n", str(nice)] if nice else []),
        str(GUNICORN),
        "fleetops.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--timeout",
        "120",  # a 1,000-event batch on a busy 2-core machine must not be killed as a hung worker
        "--graceful-timeout",
        "10",
    ]
    environment = server_env(**env)
    _collectstatic(environment)
    if log is None:
        output = tempfile.NamedTemporaryFile(prefix="fleetops-gunicorn-", suffix=".log", delete=False)  # noqa: SIM115
    else:
        output = log.open("wb")  # noqa: SIM115
    process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while not _answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not answer on port {port}:\n{Path(output.name).read_text()[-4000:]}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        output.close()
        if log is None:
            os.unlink(output.name)


@contextmanager
def celery_workers(n: int = 1, queues: str = "", **overrides: str) -> Iterator[list]:
    """`n` real Celery worker processes (solo pool: one task at a time each) on `queues` (all FleetOps queues
    by default), pointed at the benchmark's database and REDIS_URL unless `overrides` say otherwise; yields the
    `tests.services.Worker`s."""
    from tests.services import Worker

    env = {"DATABASE_URL": database_url(), "REDIS_URL": redis_url(), "LOG_LEVEL": "WARNING", **overrides}
    started: list[Worker] = []
    try:
        for _ in range(n):
            started.append(Worker(queues, **env))
        yield started
    finally:
        for worker in started:
            worker.stop()


def purge_queues() -> None:
    """Drop every task waiting in the FleetOps queues of REDIS_URL (ours: a Redis db of the benchmark's own), and the
    apply turns they held (runs.ApplyTurn), so that the next batch of each sender queues a turn again at once."""
    from fleetops.celery import app
    from runs.models import ApplyTurn

    with app.connection_for_write() as conn:
        for queue in settings.FLEETOPS_QUEUES:
            conn.default_channel.queue_purge(queue)
    ApplyTurn.objects.all().delete()


class Client:
    """One keep-alive HTTP/1.1 connection to the server under test (http.client reconnects by itself when the
    server closes it, as gunicorn's sync workers do after each answer); bearer token on every request."""

    def __init__(self, base_url: str, token: str, timeout: float = 120):
        parts = urlsplit(base_url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        self.headers = {"Authorization": f"Bearer {token}"}

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> tuple[int, bytes]:
        headers = dict(self.headers, **({"Content-Type": content_type} if content_type else {}))
        try:
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
        except (ConnectionError, http.client.RemoteDisconnected):
            # The server closed a kept-alive connection between two requests: open a new one, send again.
            self.connection.close()
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
        return response.status, response.read()

    def post_events(self, body: bytes) -> tuple[int, bytes]:
        return self.request("POST", "/api/v1/events", body, "application/cloudevents-batch+json")

    def get_json(self, path: str):
        status, body = self.request("GET", path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def close(self) -> None:
        self.connection.close()


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0-100), nearest rank: a value that was measured, not an interpolation."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc): how much of a core it got."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has been busy so far, all cores together (Linux /proc/stat: user, nice, system,
    irq, softirq and steal; not idle or waiting for I/O)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """CPU seconds the local PostgreSQL server has used so far: every live postgres process, plus what the
    postmaster counts for its children that exited (a backend ends with its connection). Zero if none is local."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if name != "postgres" and not name.startswith("postgres:"):
            continue
        ticks += int(rest[11]) + int(rest[12])
        if rest[1] == "1" or not _is_postgres(rest[1]):  # the postmaster: add its reaped children's time
            ticks += int(rest[13]) + int(rest[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _is_postgres(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip().startswith("postgres")
    except OSError:
        return False


def events_done_wait(source: str, limit_s: float) -> float:
    """Until every event of `source` is applied and seen by detection; returns the perf_counter then."""
    from runs.models import Event

    pending = Event.objects.filter(source=source)
    deadline = time.perf_counter() + limit_s
    while left := pending.filter(applied_at__isnull=True).count() + pending.filter(detected_at__isnull=True).count():
        assert time.perf_counter() < deadline, f"{left:,} events of {source} still pending after {limit_s} s"
        time.sleep(0.1)
    return time.perf_counter()


def cpu_by_role(workers) -> dict[str, float]:
    """CPU seconds so far: the machine, PostgreSQL, the Celery workers, this process (the clients posting)."""
    return {
        "machine": machine_cpu_seconds(),
        "postgres": postgres_cpu_seconds(),
        "workers": sum(cpu_seconds(w.process.pid) for w in workers),
        "clients": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
    }


def xid_probe(
    url: str,
    reader: str,
    token_of,
    stop,
    latencies: list[tuple[float, float]],
    *,
    source: str,
    every_s: float,
    read_token: str = "",
) -> None:
    """An Xid 79 every `every_s` from a node of its own (a node's second Xid would join its open incident), posted to
    `url` under `token_of(node)` and timed from its 202 to its incident in GET /api/v1/incidents on `reader` (under
    `read_token`, else the node's): appends (seconds since the probe began, latency) until `stop` is set."""
    from django.utils import timezone

    began = time.perf_counter()
    n = 0
    while not stop.is_set():
        node = f"{source.rsplit('/', 1)[-1]}-{n:03d}"
        client = Client(url, token_of(node))
        reads = Client(reader, read_token or token_of(node))
        event = {
            "specversion": "1.0",
            "id": f"{node}-xid",
            "source": source,
            "type": "gpu.xid",
            "time": timezone.now().isoformat().replace("+00:00", "Z"),
            "data": {"node": node, "gpu": 3, "xid": 79, "message": "GPU has fallen off the bus."},
        }
        status, answer = client.post_events(json.dumps([event]).encode())
        accepted = time.perf_counter()
        assert status == 202, answer[:300]
        deadline = accepted + 120
        while not reads.get_json(f"/api/v1/incidents?node={node}")["results"]:
            assert time.perf_counter() < deadline, f"no incident for the Xid on {node} after 120 s"
            time.sleep(0.02)
        latencies.append((accepted - began, time.perf_counter() - accepted))
        client.close()
        reads.close()
        n += 1
        stop.wait(max(0.0, every_s - (time.perf_counter() - accepted)))


def post_all(
    url: str, posts, *, threads: int, paced: bool, keep_alive: bool = True
) -> tuple[float, float, list[float]]:
    """POST each (second, token, body) from `threads` threads in order (paced: none before its second), on a
    keep-alive connection per thread and token, or on a new connection each (as an agent's urllib does); returns
    (started, the last 202, the POSTs' latencies). Every answer must be 202."""
    lock = threading.Lock()
    queue = list(reversed(posts))
    latencies: list[float] = []
    failures: list[str] = []
    started = time.perf_counter()
    finished = [started]

    def send() -> None:
        clients: dict[str, Client] = {}
        while True:
            with lock:
                if not queue or failures:
                    break
                second, token, body = queue.pop()
            if paced and (wait := started + second - time.perf_counter()) > 0:
                time.sleep(wait)
            sent = time.perf_counter()
            client = clients.get(token) or Client(url, token)
            status, answer = client.post_events(body)
            if keep_alive:
                clients[token] = client
            else:
                client.close()
            done = time.perf_counter()
            with lock:
                latencies.append(done - sent)
                finished[0] = max(finished[0], done)
                if status != 202:
                    failures.append(f"{status}: {answer[:300]!r}")
        for client in clients.values():
            client.close()

    workers = [threading.Thread(target=send) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures[:3]
    return started, finished[0], latencies
