"""Slow clients against gunicorn's sync workers, bare and behind nginx with contrib/nginx/proxy.conf (issue 15).

Real parts: gunicorn serving fleetops.wsgi with two sync workers on the test's PostgreSQL, and nginx running the
proxy.conf that docs/DEPLOY.md tells operators to put in front. Clients that trickle a request a byte at a time hold
a sync worker each for as long as they like; behind nginx they hold only nginx connections, and every other request
keeps its latency.
"""

import gzip
import json
import socket
import statistics
import threading
import time

import pytest
import requests
from django.utils import timezone

from tests.conftest import make_token
from tests.hostile.proxy import behind_nginx
from tests.stories import event

TRICKLERS = 8  # more than the workers: the issue saw six hold both
pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


class Trickler(threading.Thread):
    """Sends a POST's headers and then its body a byte every half second, never finishing."""

    def __init__(self, port: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.stop = port, stop

    def run(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                sock.sendall(
                    b"POST /api/v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100000\r\n\r\n"
                )
                while not self.stop.wait(0.5):
                    sock.sendall(b" ")
        except OSError:
            pass  # dropped by the server: what nginx does to a client idle past client_body_timeout


def _latencies(url: str, token: str, n: int = 20, timeout: float = 3.0) -> list[float]:
    """n intake POSTs of one event each, one after another; a request that times out counts as `timeout`."""
    seconds = []
    for i in range(n):
        body = [event("node.heartbeat", timezone.now(), f"probe-{url}-{i}-{time.monotonic()}", node="n1")]
        started = time.monotonic()
        try:
            response = requests.post(
                url + "/api/v1/events",
                data=json.dumps(body),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/cloudevents-batch+json"},
                timeout=timeout,
            )
            assert response.status_code == 202, response.text
            seconds.append(time.monotonic() - started)
        except requests.Timeout:
            seconds.append(timeout)
    return seconds


@pytest.mark.serial  # timed: latency behind nginx against latency calm
@pytest.mark.reliability(
    "Slow clients: requests trickled a byte at a time",
    how=f"{TRICKLERS} clients each send a POST's headers and then one byte of its body every 0.5 s, against gunicorn "
    "(2 sync workers) bare and then behind nginx with contrib/nginx/proxy.conf; 20 one-event POSTs measured meanwhile",
    outcome="bare: the POSTs time out (3 s), the workers are held; behind nginx: every POST answers, p95 within "
    "3x the calm p95 + 0.2 s (before: docs/DEPLOY.md named nothing to put in front, every request stalled 30 s)",
)
def test_slow_clients_hold_nginx_connections_never_gunicorn_workers(postgres, tmp_path):
    token = make_token("probe", ["events:write"])
    stop = threading.Event()
    with behind_nginx(tmp_path) as (g_port, n_port):
        try:
            bare = f"http://127.0.0.1:{g_port}"
            proxied = f"http://127.0.0.1:{n_port}"
            _latencies(proxied, token, n=5)  # warm: the first requests load templates, open connections
            calm = _latencies(proxied, token)

            for _ in range(TRICKLERS):
                Trickler(n_port, stop).start()
            time.sleep(1)
            loaded = _latencies(proxied, token)
            p95 = statistics.quantiles(calm, n=20)[-1]
            p95_loaded = statistics.quantiles(loaded, n=20)[-1]
            ms = f"calm p95 {p95 * 1000:.0f} ms, with {TRICKLERS} slow clients {p95_loaded * 1000:.0f} ms"
            print(f"\nbehind nginx: {ms}")
            assert max(loaded) < 3.0
            assert p95_loaded <= 3 * p95 + 0.2

            for _ in range(TRICKLERS):
                Trickler(g_port, stop).start()
            time.sleep(1)
            bare_times = _latencies(bare, token, n=2)
            print(f"bare gunicorn with {TRICKLERS} slow clients: {', '.join(f'{s:.1f} s' for s in bare_times)}")
            assert min(bare_times) >= 3.0  # what nginx is there for: bare, the workers are held
        finally:
            stop.set()


def test_nginx_sends_pages_compressed_to_clients_that_ask(postgres, tmp_path):
    """contrib/nginx/proxy.conf compresses on the way out (the 16,384-node overview is 1.67 MB of HTML, 107 KB
    gzipped): the same page, gzipped for a client that asks, plain for one that does not, and said to vary by what
    was asked; the API's schema a quarter of its size or less."""
    with behind_nginx(tmp_path) as (_, n_port):
        proxied = f"http://127.0.0.1:{n_port}/login/"
        plain = requests.get(proxied, headers={"Accept-Encoding": "identity"}, timeout=10)
        packed = requests.get(proxied, headers={"Accept-Encoding": "gzip"}, timeout=10, stream=True)
        wire = packed.raw.read(decode_content=False)
        assert plain.status_code == packed.status_code == 200
        assert "Content-Encoding" not in plain.headers and packed.headers["Content-Encoding"] == "gzip"
        assert "Accept-Encoding" in packed.headers["Vary"]
        page = gzip.decompress(wire).decode()
        assert page.lstrip().lower().startswith("<!doctype html>") and "Sign in" in page
        assert abs(len(page) - len(plain.text)) < 100  # the same page; its CSRF token is masked anew each time
        schema = requests.get(proxied.replace("/login/", "/api/v1/schema"), timeout=30, stream=True)
        raw = schema.raw.read(decode_content=False)
        assert schema.headers["Content-Encoding"] == "gzip" and len(raw) < len(gzip.decompress(raw)) / 4
