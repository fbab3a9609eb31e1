import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetops_client.delivery import Backoff, HttpTransport, Response, RetryableError, Sender, events_url
from fleetops_client.spool import Spool


def _fill(spool, n):
    for _ in range(n):
        spool.append(lambda seq: {"id": f"n:node.heartbeat:-:{seq}", "type": "node.heartbeat"})


class FakeTransport:
    """Answers from a script; records every batch posted."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.posts = []

    def post(self, events):
        self.posts.append([e["id"] for e in events])
        answer = self.answers.pop(0) if self.answers else Response(202, {"accepted": len(events)})
        if isinstance(answer, Exception):
            raise answer
        return answer(events) if callable(answer) else answer


def test_backoff_is_exponential_with_full_jitter_and_bounded():
    for seed in range(50):
        backoff = Backoff(base=0.5, cap=30, rng=random.Random(seed))
        delays = [backoff.next_delay() for _ in range(20)]
        for n, delay in enumerate(delays):
            assert 0 <= delay <= min(30, 0.5 * 2**n)
    # jitter: the same attempt does not wait the same for everyone
    spread = {round(Backoff(base=1, cap=60, rng=random.Random(s)).next_delay(), 6) for s in range(20)}
    assert len(spread) > 10
    # Retry-After is honoured, but never beyond the cap
    assert Backoff(cap=30, rng=random.Random(1)).next_delay(retry_after=12) >= 12
    assert Backoff(cap=30, rng=random.Random(1)).next_delay(retry_after=3600) <= 30


def test_retries_until_the_api_answers_then_delivers_in_order(tmp_path):
    spool = Spool(tmp_path)
    _fill(spool, 5)
    transport = FakeTransport([RetryableError("connection refused"), RetryableError("HTTP 503")])
    sleeps = []
    sender = Sender(spool, transport, batch_size=2, backoff=Backoff(rng=random.Random(0)))
    assert sender.drain(sleep=sleeps.append)
    assert len(sleeps) == 2 and all(s >= 0 for s in sleeps)
    sent = [i for batch in transport.posts[2:] for i in batch]
    assert sent == [f"n:node.heartbeat:-:{s}" for s in range(1, 6)]
    assert spool.pending() == []


def test_gives_up_at_the_deadline_and_keeps_the_events(tmp_path):
    spool = Spool(tmp_path)
    _fill(spool, 3)
    clock = [0.0]
    sender = Sender(spool, FakeTransport([RetryableError("down")] * 1000), backoff=Backoff(base=1, cap=4))
    assert not sender.drain(deadline=20, sleep=lambda s: clock.__setitem__(0, clock[0] + s), clock=lambda: clock[0])
    assert len(spool.pending()) == 3


@pytest.mark.parametrize("status", [401, 403, 404])
def test_other_4xx_drop_the_batch_with_a_reason(tmp_path, caplog, status):
    spool = Spool(tmp_path)
    _fill(spool, 3)
    sender = Sender(spool, FakeTransport([Response(status, {"detail": "nope"})]))
    assert sender.drain()
    assert spool.pending() == [] and sender.stats.rejected == 3
    assert f"HTTP {status}" in caplog.text and "nope" in caplog.text


def test_400_drops_only_the_events_it_names(tmp_path, caplog):
    spool = Spool(tmp_path)
    _fill(spool, 4)
    bad = Response(400, {"errors": [{"index": 1, "field": "data.gpu", "reason": "must be 0-255"}]})
    transport = FakeTransport([bad])
    sender = Sender(spool, transport)
    assert sender.drain()
    assert transport.posts[1] == ["n:node.heartbeat:-:1", "n:node.heartbeat:-:3", "n:node.heartbeat:-:4"]
    assert sender.stats.rejected == 1 and "must be 0-255" in caplog.text
    assert spool.pending() == []


def test_413_halves_the_batch(tmp_path):
    spool = Spool(tmp_path)
    _fill(spool, 4)
    transport = FakeTransport([lambda ev: Response(413 if len(ev) > 1 else 202, {}) for _ in range(10)])
    assert Sender(spool, transport).drain()
    singles = [batch for batch in transport.posts if len(batch) == 1]
    assert singles == [[f"n:node.heartbeat:-:{s}"] for s in range(1, 5)]
    assert spool.pending() == []


class _Handler(BaseHTTPRequestHandler):
    script: list = []
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.headers["Authorization"], self.headers["Content-Type"], body))
        status, headers = self.script.pop(0)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(json.dumps({"accepted": len(body), "duplicates": 0}).encode())

    def log_message(self, *args):
        pass


def test_http_transport_maps_statuses():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _Handler.script = [(503, {}), (429, {"Retry-After": "7"}), (408, {}), (400, {}), (202, {})]
        transport = HttpTransport(f"http://127.0.0.1:{server.server_port}", "tok")
        with pytest.raises(RetryableError):
            transport.post([{"id": "a"}])
        with pytest.raises(RetryableError) as exc:
            transport.post([{"id": "a"}])
        assert exc.value.retry_after == 7
        with pytest.raises(RetryableError):
            transport.post([{"id": "a"}])
        assert transport.post([{"id": "a"}]).status == 400
        assert transport.post([{"id": "a"}]).status == 202
        assert _Handler.seen[0][:2] == ("Bearer tok", "application/cloudevents-batch+json")
    finally:
        server.shutdown()
    with pytest.raises(RetryableError, match="connection failed"):
        HttpTransport(f"http://127.0.0.1:{server.server_port}", "tok", timeout=2).post([{"id": "a"}])


def test_events_url():
    assert events_url("http://h:8000") == "http://h:8000/api/v1/events"
    assert events_url("http://h:8000/api/v1/events/") == "http://h:8000/api/v1/events"
