"""Fixtures for tests on the real parts: PostgreSQL, Redis and a Celery worker process."""

import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.db import connection

from fleetops.celery import app as celery_app
from runs.models import Event
from tests.conftest import reachable, require

ROOT = Path(__file__).resolve().parents[1]
GUNICORN = Path(sys.executable).parent / "gunicorn"


@pytest.fixture
def postgres():
    require(connection.vendor == "postgresql", "PostgreSQL (DATABASE_URL=postgres://...)")


def session_database_url() -> str:
    """The database this test session uses, for the servers and workers a test starts as processes of their own."""
    db = connection.settings_dict
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


class Worker:
    """A real `celery worker` process on Redis, pointed at the test database; its output kept in `lines`."""

    def __init__(self, queues: str = "", **settings_env: str):
        env = {
            **os.environ,
            "DATABASE_URL": session_database_url(),
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "PYTHONUNBUFFERED": "1",
            **settings_env,  # the worker's own settings come from its environment, not from the test's overrides
        }
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "fleetops",
            "worker",
            "--pool=solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
            "-Q",
            queues or ",".join(settings.FLEETOPS_QUEUES),
        ]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        ready = threading.Event()

        def read():
            for line in self.process.stdout:
                self.lines.append(line)
                if " ready." in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30):
            self.process.kill()
            pytest.fail("celery worker did not start:\n" + "".join(self.lines[-40:]))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)

    def kill(self) -> None:
        """SIGKILL: no chance to finish the step in hand or to tell anyone."""
        self.process.kill()
        self.process.wait(10)


@pytest.fixture
def broker(postgres):
    """Redis reachable, the queue empty, and tasks sent to it rather than run in-process."""
    redis_url = os.environ.get("REDIS_URL", "")
    require(bool(redis_url) and reachable(redis_url, 6379), "Redis (REDIS_URL)")
    with celery_app.connection_for_write() as connection_:
        for queue in settings.FLEETOPS_QUEUES:  # leftovers from an earlier test would meet another database
            connection_.default_channel.queue_purge(queue)
    celery_app.conf.task_always_eager = False
    try:
        yield
    finally:
        celery_app.conf.task_always_eager = True


@pytest.fixture
def worker(broker):
    process = Worker()
    try:
        yield process.lines
    finally:
        process.stop()


def wait_until_applied(expected: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Event.objects.count() == expected and not Event.objects.filter(applied_at__isnull=True).exists():
            return
        time.sleep(0.1)
    pending = Event.objects.filter(applied_at__isnull=True).count()
    pytest.fail(f"{pending} of {Event.objects.count()} events still unapplied after {timeout}s")


def wait_until_detected(expected: int, timeout: float = 60) -> None:
    """Until every event is applied and looked at by the detectors."""
    wait_until_applied(expected, timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Event.objects.filter(detected_at__isnull=True).exists():
            return
        time.sleep(0.1)
    pytest.fail(f"{Event.objects.filter(detected_at__isnull=True).count()} events not yet seen by the detectors")


def wait_for(predicate, *, timeout: float, what: str, every: float = 0.25):
    """Poll until predicate() returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(every)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral() -> tuple[int, int]:
    """The ports the kernel hands out as source ports of outgoing connections (Linux: 32768-60999)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int = 1) -> int:
    """The first of `count` consecutive free ports, below the kernel's ephemeral range: no client connection can take
    one as its source port, so a server stopped and started again on it binds again (a private Redis restarted on
    its port failed now and then when its port was in 55400-55499, where a worker's reconnect could land), and two
    test sessions on one machine rarely meet (a random start)."""
    low, high = _ephemeral()
    # Below the range where it leaves room, else above it; a machine whose range covers nearly all ports (some
    # containers) gets ports from inside it, as before.
    span = (20000, low - count) if low - count > 21000 else (high + 1, 65535 - count)
    if span[1] - span[0] < 1000:
        span = (20000, 60000)
    for _ in range(200):
        first = random.randrange(*span)
        if all(_free(first + i) for i in range(count)):
            return first
    raise RuntimeError("no free ports")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"  # a zombie has exited; init reaps it later
    except FileNotFoundError:
        return False


class Gunicorn:
    """`gunicorn fleetops.wsgi` (two worker processes) on a free port; output kept in `log`."""

    def __init__(self, root: Path, env: dict[str, str], workers: int = 2):
        self.port, self.log = free_ports(), root / "gunicorn.log"
        command = [str(GUNICORN), "fleetops.wsgi:application", "-b", f"127.0.0.1:{self.port}", "-w", str(workers)]
        command += ["--timeout", "60", "--graceful-timeout", "5"]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **env}, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )
        wait_for(self._answers, timeout=60, what="gunicorn to answer")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail("gunicorn exited:\n" + self.log.read_text()[-3000:])
        try:
            return requests.get(self.url + "/login/", timeout=2).status_code < 500
        except requests.RequestException:
            return False

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


PASSWORD = "pw-0ncall!"  # console_login's superusers'


def console_login(base: str, database_url: str, username: str = "oncall", *, create: bool = True) -> requests.Session:
    """A superuser made in `database_url` with manage.py (unless `create` is false: made before), signed in to the
    console at `base`: the session."""
    if create:
        command = ["createsuperuser", "--noinput", "--username", username, "--email", "o@x.test"]
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url, "REDIS_URL": "", "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
            check=True,
            capture_output=True,
            timeout=120,
        )
    session = requests.Session()
    form = session.get(base + "/login/", timeout=10)
    _plain(session)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    answer = session.post(
        base + "/login/",
        data={"csrfmiddlewaretoken": csrf, "username": username, "password": PASSWORD},
        headers={"Referer": base + "/login/"},
        timeout=10,
        allow_redirects=False,
    )
    assert answer.status_code == 302, answer.text[:500]
    _plain(session)
    return session


def _plain(session: requests.Session) -> None:
    """Production settings mark the cookies Secure; on loopback HTTP the session sends them anyway."""
    for cookie in session.cookies:
        cookie.secure = False
