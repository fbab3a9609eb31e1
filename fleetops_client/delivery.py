"""Delivery of spooled events to the FleetOps event API (POST /api/v1/events, a CloudEvents batch).

- 202 (accepted) and 200 (every event a duplicate) deliver the batch: the spool cursor moves past it.
- Connection errors, timeouts, 5xx, 408 and 429 are retried with exponential backoff and full jitter
  (a ``Retry-After`` is honoured up to the cap); the batch stays in the spool meanwhile.
- 400 names the bad events by index: they are dropped with the reason logged and the rest is sent again.
  413 halves the batch; a single event that is still too large is dropped. Any other 4xx (401, 403, ...)
  drops the batch with a logged reason: resending it would fail the same way.

Event ids are fixed when an event is spooled, so a batch resent after a crash is a duplicate, not new.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from fleetops_client.spool import Record, Spool

log = logging.getLogger(__name__)

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"


class RetryableError(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass
class Response:
    status: int
    body: object
    retry_after: float | None = None  # seconds, from the answer's Retry-After header


class Backoff:
    """Exponential backoff with full jitter: attempt n waits uniform(0, min(cap, base * 2**n))."""

    def __init__(self, base: float = 0.5, cap: float = 60.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()
        self.attempt = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt += 1
        delay = self.rng.uniform(0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.cap))
        return delay

    def reset(self) -> None:
        self.attempt = 0


def api_url(url: str, path: str) -> str:
    """`path` under the server's /api/v1/, from its base URL or, as FLEETOPS_URL and the agent's --url may name, its
    /api/v1 or its events endpoint."""
    base = url.rstrip("/")
    for suffix in ("/api/v1/events", "/api/v1"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return f"{base}/api/v1/{path}"


def events_url(url: str) -> str:
    """Accept the server's base URL or the events endpoint itself."""
    return api_url(url, "events")


def request_json(
    method: str, url: str, *, token: str, body=None, content_type: str = "application/json", timeout: float = 10.0
) -> Response:
    """One request with the bearer token: the answer, whatever its status, with its JSON body (its text where it is
    not JSON). Raises OSError (urllib's URLError, a timeout) when no answer came."""
    headers = {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body, separators=(",", ":")).encode()
        headers["Content-Type"] = content_type
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return Response(answer.status, _decode(answer.read()))
    except urllib.error.HTTPError as exc:
        retry_after = exc.headers.get("Retry-After") if exc.headers else None
        return Response(exc.code, _decode(exc.read()), _seconds(retry_after))


class HttpTransport:
    def __init__(self, url: str, token: str, timeout: float = 10.0):
        self.url = events_url(url)
        self.token = token
        self.timeout = timeout

    def post(self, events: list[dict]) -> Response:
        try:
            response = request_json(
                "POST", self.url, token=self.token, body=events, content_type=BATCH_CONTENT_TYPE, timeout=self.timeout
            )
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise RetryableError(f"connection failed: {getattr(exc, 'reason', exc)}") from exc
        if response.status >= 500 or response.status in (408, 429):
            raise RetryableError(f"HTTP {response.status}", response.retry_after)
        return response


def _decode(raw: bytes) -> object:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw[:500].decode(errors="replace")


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


@dataclass
class Stats:
    delivered: int = 0
    duplicates: int = 0
    rejected: int = 0


class Sender:
    def __init__(self, spool: Spool, transport, *, batch_size: int = 500, backoff: Backoff | None = None, lock=None):
        self.spool = spool
        # Held around each read and write of the spool, never around a POST: the training client's SIGTERM handler
        # spools its queue under it, and must not wait out an HTTP timeout.
        self.lock = lock or contextlib.nullcontext()
        self.transport = transport
        self.batch_size = batch_size
        self.backoff = backoff or Backoff()
        self.stats = Stats()

    def send_once(self) -> bool:
        """Send the oldest pending batch. True when it left the spool (delivered or dropped), False when idle.

        Raises RetryableError when the API could not take it; the batch stays spooled.
        """
        with self.lock:
            records = self.spool.pending(self.batch_size)
        if not records:
            return False
        self._send(records)
        self.backoff.reset()
        return True

    def _send(self, records: list[Record]) -> None:
        while records:
            response = self.transport.post([r.event for r in records])
            if response.status in (200, 202):
                body = response.body if isinstance(response.body, dict) else {}
                self.stats.delivered += body.get("accepted", len(records)) if response.status == 202 else 0
                self.stats.duplicates += body.get("duplicates", 0)
                self._delivered(records[-1].seq)
                return
            if response.status == 413 and len(records) > 1:
                half = len(records) // 2
                self._send(records[:half])
                records = records[half:]
                continue
            if response.status == 400:
                bad = _bad_indices(response.body, len(records))
                if bad and len(bad) < len(records):
                    for i in sorted(bad):
                        self._drop([records[i]], f"HTTP 400: {bad[i]}")
                    keep = [r for i, r in enumerate(records) if i not in bad]
                    if keep:
                        # later records only: the cursor must not pass one that is still to be sent
                        self._send_in_order(keep, records[-1].seq)
                    return
            self._drop(records, f"HTTP {response.status}: {_short(response.body)}")
            self._delivered(records[-1].seq)
            return

    def _send_in_order(self, keep: list[Record], last_seq: int) -> None:
        self._send(keep)
        self._delivered(last_seq)

    def _delivered(self, seq: int) -> None:
        with self.lock:
            self.spool.mark_delivered(seq)

    def _drop(self, records: list[Record], reason: str) -> None:
        self.stats.rejected += len(records)
        for r in records:
            log.error("dropping event %s (%s, seq %d): %s", r.event.get("id"), r.event.get("type"), r.seq, reason)

    def drain(
        self,
        *,
        deadline: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> bool:
        """Send until the spool is empty (True) or the deadline passes (False), backing off between failures."""
        while True:
            try:
                if not self.send_once():
                    return True
            except RetryableError as exc:
                delay = self.backoff.next_delay(exc.retry_after)
                if deadline is not None and clock() + delay > deadline:
                    log.warning("event API unavailable (%s); %d events stay spooled", exc, len(self.spool.pending()))
                    return False
                log.warning("event API unavailable (%s); retrying in %.1fs", exc, delay)
                sleep(delay)


def _bad_indices(body: object, n: int) -> dict[int, str]:
    out: dict[int, str] = {}
    errors = body.get("errors") if isinstance(body, dict) else None
    for error in errors or []:
        if isinstance(error, dict) and isinstance(error.get("index"), int) and 0 <= error["index"] < n:
            out.setdefault(error["index"], f"{error.get('field', '')} {error.get('reason', '')}".strip())
    return out


def _short(body: object) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return text[:300]
