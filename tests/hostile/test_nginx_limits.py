"""Per-client limits of contrib/nginx (limits.conf and proxy.conf as shipped), in a real nginx in front of gunicorn
(issue 45: the shipped nginx had none, so one address could take every connection and request it liked).

On loopback every client is 127.0.0.1 unless it says otherwise: each client here binds a source address of its own
in 127.0.0.0/8 (Linux routes all of it to lo), so nginx sees distinct clients, one limited while another is not.
"""

import http.client
import json
import re
import resource
import socket
import time
from collections import Counter
from pathlib import Path

import pytest
from django.utils import timezone

from tests.conftest import make_token
from tests.hostile.proxy import behind_nginx
from tests.stories import event

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

# The budgets proxy.conf states, per client address (its comment says why each is what it is).
INTAKE_RATE, INTAKE_BURST, INTAKE_CONN = 300, 600, 512
PAGES_RATE, PAGES_BURST, PAGES_CONN = 10, 100, 64
NAT_JOB = 256 + 32  # 32 nodes of 8 ranks, and their agents, behind one address: what the intake's budget is sized for


def _open(port: int, client: str, raw: bytes) -> socket.socket:
    """A connection from source address `client` that has sent `raw` (one request, or its headers alone)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(client, 0))
    sock.sendall(raw)
    return sock


def _head(sock: socket.socket) -> str:
    """The status line and headers of the answer on `sock`, which is closed after."""
    data = b""
    with sock:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n\r\n")[0].decode("latin-1")


def _status(sock: socket.socket) -> int:
    head = _head(sock)
    return int(head.split(" ", 2)[1]) if head.startswith("HTTP/") else 0


def _post(body: list, token: str) -> bytes:
    payload = json.dumps(body).encode()
    head = f"POST /api/v1/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
    head += "Content-Type: application/cloudevents-batch+json\r\nConnection: close\r\n"
    head += f"Content-Length: {len(payload)}\r\n"
    return head.encode() + b"\r\n" + payload


def _heartbeat(token: str, tag: str) -> bytes:
    return _post([event("node.heartbeat", timezone.now(), f"limits-{tag}-{time.monotonic_ns()}", node="n1")], token)


def _at_once(port: int, client: str, requests: list[bytes]) -> tuple[Counter, float]:
    """Every request on a connection of its own, all sent before any answer is read: the statuses, and the seconds
    between the first and the last request leaving."""
    started = time.monotonic()
    socks = [_open(port, client, raw) for raw in requests]
    sent = time.monotonic() - started
    return Counter(_status(sock) for sock in socks), sent


def _one_by_one(port: int, client: str, path: str, n: int) -> tuple[list[int], list[http.client.HTTPResponse]]:
    """`n` GETs of `path`, one after another on one kept-alive connection: the statuses, and the 429 answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(client, 0))
    statuses, refused = [], []
    for _ in range(n):
        conn.request("GET", path)
        answer = conn.getresponse()
        answer.body = answer.read()
        statuses.append(answer.status)
        if answer.status == 429:
            refused.append(answer)
    conn.close()
    return statuses, refused


def _refusals(log: Path, kind: str, zone: str) -> int:
    """How many times nginx logged refusing a request by `zone` ("requests" or "connections")."""
    return len(re.findall(rf'limiting {kind}.*by zone "{zone}"', log.read_text()))


@pytest.mark.reliability(
    "One client address floods the console or the event intake, or holds connections open",
    how=f"nginx with contrib/nginx/limits.conf and proxy.conf as shipped, in front of gunicorn; clients on distinct "
    f"loopback addresses: {PAGES_BURST + 50} page GETs one after another from one; {NAT_JOB} event POSTs at once from "
    f"another (a job of 256 ranks and 32 agents behind one NAT address); 1,000 at once from a third; "
    f"{INTAKE_CONN} and {PAGES_CONN} requests held open (headers sent, body never) from two more",
    outcome=f"pages past {PAGES_BURST} at once and {PAGES_RATE}/s, intake POSTs past {INTAKE_BURST} and "
    f"{INTAKE_RATE}/s, and a connection past {INTAKE_CONN} (intake) or {PAGES_CONN} (pages) open from one address "
    "are answered 429 with Retry-After by nginx (logged with their zone), never reaching gunicorn; the NAT'd job's "
    "POSTs are all 202; other addresses, and the limited address's other budget, answer as usual (before: no limit "
    "at all)",
)
def test_nginx_limits_each_client_address_and_spares_the_others(postgres, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))  # 1,000 connections at once
    token = make_token("probe", ["events:write"])
    log = tmp_path / "nginx-error.log"
    with behind_nginx(tmp_path) as (_, port):
        # Pages: one address past its budget is refused by nginx, with a Retry-After; another is served
        started = time.monotonic()
        statuses, refused = _one_by_one(port, "127.0.0.2", "/login/", PAGES_BURST + 50)
        elapsed = time.monotonic() - started
        assert set(statuses) == {200, 429}
        assert PAGES_BURST < statuses.count(200) <= PAGES_BURST + PAGES_RATE * elapsed + 1
        assert refused[0].getheader("Retry-After") == "1"
        assert "too many requests from this address" in json.loads(refused[0].body)["detail"]
        assert _refusals(log, "requests", "fleetops_pages") == statuses.count(429)
        assert _one_by_one(port, "127.0.0.3", "/login/", 1)[0] == [200]
        assert _status(_open(port, "127.0.0.2", _heartbeat(token, "pages-spent"))) == 202  # its intake budget is whole

        # The intake: a job's ranks behind one address, their gradient norms in the same second, all pass
        started = time.monotonic()
        answers, sent = _at_once(port, "127.0.0.4", [_heartbeat(token, f"nat-{i}") for i in range(NAT_JOB)])
        assert answers == {202: NAT_JOB}, f"{answers} in {sent:.2f} s"
        print(f"\nNAT job: {answers} sent in {sent:.2f} s, answered in {time.monotonic() - started:.1f} s")

        # ... and a flood from one address is cut at the budget, before gunicorn (a bad token: cheap to answer)
        answers, sent = _at_once(port, "127.0.0.5", [_post([], "not-a-token")] * 1000)
        print(f"flood: {answers} sent in {sent:.2f} s")
        assert set(answers) == {401, 429}, answers
        assert answers[401] <= INTAKE_BURST + INTAKE_RATE * sent + 1, f"{answers} in {sent:.2f} s"
        assert _refusals(log, "requests", "fleetops_intake") > 0
        assert _status(_open(port, "127.0.0.6", _heartbeat(token, "beside-the-flood"))) == 202

        # Connections: one address holding its budget of requests open gets no more; another does
        conn_refusals = _refusals(log, "connections", "fleetops_intake_conn")  # the flood's, past its 512 at once
        head = b"POST /api/v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n{"
        held = [_open(port, "127.0.0.7", head) for _ in range(INTAKE_CONN)]
        page_head = b"POST /login/ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\nu"
        held += [_open(port, "127.0.0.8", page_head) for _ in range(PAGES_CONN)]
        time.sleep(1)  # nginx has read their headers: each is a request being processed, waiting for its body
        one_too_many = _head(_open(port, "127.0.0.7", _heartbeat(token, "one-too-many")))
        assert one_too_many.startswith("HTTP/1.1 429") and "\r\nRetry-After: 1" in one_too_many
        assert _status(_open(port, "127.0.0.8", b"GET /login/ HTTP/1.1\r\nHost: localhost\r\n\r\n")) == 429
        assert _refusals(log, "connections", "fleetops_intake_conn") == conn_refusals + 1
        assert _refusals(log, "connections", "fleetops_pages_conn") == 1
        assert _status(_open(port, "127.0.0.9", _heartbeat(token, "beside-the-held"))) == 202
        assert _one_by_one(port, "127.0.0.9", "/login/", 1)[0] == [200]
        for sock in held:
            sock.close()
