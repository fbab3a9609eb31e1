"""Console pages under load, for the pages benchmarks: signed-in viewers' sessions, wrk driving keep-alive connections
(each request from the next viewer's session in turn), gunicorn's access log for the server's own time per request.

Server time is gunicorn's %(D)s (request parsed to response written, in the worker); client time is wrk's on
loopback, which adds the wait for a free worker. Needs wrk (`apt-get install wrk`)."""

import http.client
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import Group, User
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import call_command
from django.middleware.csrf import CSRF_ALLOWED_CHARS, CSRF_SECRET_LENGTH
from django.test.utils import override_settings
from django.utils.crypto import get_random_string

from fleetops.roles import VIEWER

from .servers import server_env

WRK_THREADS = 2  # one per core of the 2-core machine the figures come from
ACCESS_FORMAT = "%(m)s %(U)s %(s)s %(D)s"  # method, path, status, request time in microseconds

# Each request carries the next session's cookies in turn (per wrk thread); wrk prints the summary once the run is
# over: latency percentiles are in microseconds.
_WRK_SCRIPT = """
local cookies = {%s}
local extra = {%s}
local sent = 0
request = function()
  sent = sent + 1
  local headers = {["Cookie"] = cookies[(sent %% #cookies) + 1]}
  for name, value in pairs(extra) do headers[name] = value end
  return wrk.format(nil, nil, headers)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %%d, "duration_us": %%d, "status_errors": %%d, "socket_errors": %%d, '
    .. '"p50_us": %%d, "p95_us": %%d, "p99_us": %%d, "max_us": %%d}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max))
end
"""


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request: ("HX-Request", "true") for an htmx part


@dataclass(frozen=True)
class Measured:
    requests: int
    rps: float
    server_ms: tuple[float, float, float]  # p50, p95, p99 from the access log
    client_ms: tuple[float, float, float]  # p50, p95, p99 from wrk


def wrk() -> str:
    found = shutil.which("wrk")
    if found is None:
        pytest.fail("The pages benchmark needs wrk: `apt-get install wrk` (Debian/Ubuntu), `brew install wrk`.")
    return found


def viewer_cookies(count: int, *, prefix: str = "bench-viewer", group: str = VIEWER) -> list[str]:
    """`count` people of `group` (viewers unless said) signed in, each with a session stored in the database as a
    login on the server would store it (signed, its password hash keyed, with the server's SECRET_KEY) and a CSRF
    cookie of its own, as a browser holds after its first page: the Cookie header of each."""
    role = Group.objects.get_or_create(name=group)[0]
    cookies = []
    with override_settings(SECRET_KEY=server_env()["SECRET_KEY"]):
        for n in range(count):
            user, _ = User.objects.get_or_create(username=f"{prefix}-{n}" if count > 1 else prefix)
            user.set_unusable_password()
            user.save()
            user.groups.set([role])
            session = SessionStore()
            session[SESSION_KEY] = str(user.pk)
            session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
            session[HASH_SESSION_KEY] = user.get_session_auth_hash()
            session.create()
            csrf = f"{settings.CSRF_COOKIE_NAME}={get_random_string(CSRF_SECRET_LENGTH, CSRF_ALLOWED_CHARS)}"
            cookies.append(f"sessionid={session.session_key}; {csrf}")
    return cookies


@pytest.fixture(scope="session")
def static_files() -> Iterator[Path]:
    """collectstatic into a directory of our own, with the manifest (DEBUG off, the pages link the hashed names)
    but without WhiteNoise's gzip and Brotli copies: compressing plotly.js takes minutes on a small machine, and
    wrk asks for no encoding. The server's storage reads the same staticfiles.json."""
    manifest_only = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"},
    }
    with tempfile.TemporaryDirectory(prefix="fleetops-static-") as root:
        with override_settings(STATIC_ROOT=root, STORAGES=manifest_only):
            call_command("collectstatic", interactive=False, verbosity=0)
        yield Path(root)


def get(base: str, path: str, cookie: str, headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, bytes]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", path, headers={"Cookie": cookie, **dict(headers)})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def run_wrk(
    url: str,
    cookies: list[str],
    *,
    seconds: int,
    connections: int,
    script_dir: Path,
    headers: tuple[tuple[str, str], ...] = (),
) -> dict:
    """wrk's summary of `connections` keep-alive connections asking for `url` back to back for `seconds`."""
    script = script_dir / "pageload.lua"
    extra = ", ".join(f"[{json.dumps(name)}] = {json.dumps(value)}" for name, value in headers)
    script.write_text(_WRK_SCRIPT % (", ".join(json.dumps(cookie) for cookie in cookies), extra))
    command = [
        wrk(),
        f"-t{min(WRK_THREADS, connections)}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "30s",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    found = re.search(r"^WRK_JSON (.*)$", out, re.MULTILINE)
    assert found, f"wrk printed no summary:\n{out}"
    return json.loads(found.group(1))


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 by the nearest rank."""
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]

    return rank(0.50), rank(0.95), rank(0.99)


def server_times(log: Path, offset: int, path: str) -> list[float]:
    """Milliseconds of each GET `path` logged after `offset`."""
    with log.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    times, statuses = [], set()
    for line in chunk.decode().splitlines():
        method, logged_path, status, micros = line.split()
        if method == "GET" and logged_path == path.split("?")[0]:
            times.append(int(micros) / 1000)
            statuses.add(status)
    assert statuses <= {"200"}, f"{path}: statuses {statuses} in the access log"
    return times


def measure(base: str, page: Page, cookies: list[str], log: Path, *, connections: int, seconds: int) -> Measured:
    """`connections` keep-alive connections sending GET page.path back to back for `seconds`."""
    offset = log.stat().st_size
    summary = run_wrk(
        base + page.path, cookies, seconds=seconds, connections=connections, script_dir=log.parent, headers=page.headers
    )
    assert summary["status_errors"] == 0 and summary["socket_errors"] == 0, f"{page.name}: {summary}"
    time.sleep(0.5)  # the last lines reach the log
    server = server_times(log, offset, page.path)
    # Requests cut off when wrk stops are in neither count, or in one only: the two agree to a few requests.
    assert abs(len(server) - summary["requests"]) <= 2 * connections, (len(server), summary)
    return Measured(
        requests=summary["requests"],
        rps=summary["requests"] / (summary["duration_us"] / 1e6),
        server_ms=percentiles(server),
        client_ms=tuple(summary[f"p{q}_us"] / 1000 for q in (50, 95, 99)),
    )


def fmt(ms: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:,.1f}" for v in ms)
