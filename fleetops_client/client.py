"""The training job's side of FleetOps: what the loop reports, sent without ever holding the loop up.

A call on the training thread only appends a small tuple to an in-memory queue (a few microseconds); a background
thread turns the queue into CloudEvents every ``flush_s``, spools them to local disk (one write, one fsync a batch)
and posts them from the spool, so events survive FleetOps being down and the process dying (the next process of the
same run and rank on that node sends what is left). Two queues:

- lifecycle events (restores, checkpoints, completion, steps for the hang watchdog): rare, bounded by
  ``records_max``; one that does not fit is counted in ``lost_records`` and logged, never waited for;
- high-rate samples (per-rank step times, gradient norms): bounded by ``samples_max``, the oldest dropped first
  when full, counted in ``dropped_samples`` and reported to FleetOps in each step-time sample's ``dropped``.

Event ids are ``<run>:<incarnation>:<what>``: the same step of the same attempt is the same event (a resend is a
duplicate), and a step trained again after a requeue is a new one (the incarnation is Slurm's job id and restart
count). Run-level events (steps, checkpoints, restores, completion) come from rank 0 only; every rank sends its own
step times and gradient norms.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from fleetops_client.config import Config
from fleetops_client.delivery import HttpTransport, RetryableError, Sender
from fleetops_client.spool import Spool

log = logging.getLogger("fleetops_client")

TIERS = ("memory", "local", "durable")


def _rfc3339(at: float) -> str:
    # timezone.utc, not datetime.UTC: that is Python 3.11's, and a training job may run 3.9 (pyproject.toml).
    return datetime.fromtimestamp(at, timezone.utc).isoformat().replace("+00:00", "Z")  # noqa: UP017


class CheckpointWrite:
    """What the body of ``Client.checkpoint`` may tell about its write: its size and, for an asynchronous save, the
    future that completes when the write is durable (``concurrent.futures.Future`` or anything with
    ``add_done_callback``)."""

    def __init__(self, step: int, tier: str, bytes: int):
        self.step = step
        self.tier = tier
        self.bytes = bytes
        self.future = None

    def durable_when(self, future) -> None:
        self.future = future


class Client:
    def __init__(self, config: Config, *, transport=None, start: bool = True):
        self.config = config
        # Re-entrant: the SIGTERM handler runs on the training thread, perhaps inside _record or _sample.
        self._lock = threading.RLock()
        self._records: deque = deque()
        self._samples: deque = deque()
        self.dropped_samples = 0
        self.lost_records = 0
        self._step_sent_at = -math.inf  # monotonic time run.step was last queued
        self._last_step_m: float | None = None  # monotonic end of this rank's previous step
        self._compute_s: float | None = None  # this step's compute time, when a DDP hook measured it
        self._norm = None  # this step's local gradient norm, when a DDP hook took it
        self._beats = 0
        self._window = [0.0, 0, time.monotonic()]  # step seconds summed, steps, window start
        self.current_step = 0  # the step being trained: the last one reported (or restored from) plus one
        self._closed = False
        self._idle = threading.Condition()
        self._wake = threading.Event()
        self._unavailable_since: float | None = None
        self._thread = None
        if not config.enabled:
            log.info("FLEETOPS_URL is not set: the FleetOps client sends nothing")
            return
        self.spool = Spool(config.spool_path, max_bytes=config.spool_max_mb * 1024 * 1024)
        transport = transport or HttpTransport(config.url, config.token or "", timeout=config.timeout_s)
        # The spool is the sender thread's and the SIGTERM handler's: held for disk reads and writes, never a POST.
        self._spool_lock = threading.Lock()
        self.sender = Sender(self.spool, transport, batch_size=config.batch, lock=self._spool_lock)
        if start:
            self._thread = threading.Thread(target=self._loop, name="fleetops-client", daemon=True)
            self._thread.start()
            atexit.register(self.close)
            self._spool_on_sigterm()

    def _spool_on_sigterm(self) -> None:
        """A job killed by its scheduler (a requeue, a cancel) gets SIGTERM and then, seconds later, SIGKILL; exit
        handlers never run. So on SIGTERM what is queued is spooled first (the next process of the run and rank sends
        it), then SIGTERM does what it did before. Only where nobody handles SIGTERM yet, from the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def spool_then_die(signum, frame):
            if self._spool_lock.acquire(timeout=3):  # the sender holds it for a disk write at most
                try:
                    self._spool_queued()
                finally:
                    self._spool_lock.release()
            else:
                log.error("FleetOps client: the spool stayed busy; %d queued events lost", self._queued())
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, spool_then_die)
        self._sigterm_handler = spool_then_die

    @classmethod
    def from_env(cls, **overrides) -> Client:
        return cls(Config.from_env(**overrides))

    # -- what the training loop calls ----------------------------------------------------------------------------

    def step(self, step: int, *, seconds: float | None = None) -> None:
        """This rank finished training step ``step``.

        Its step time is ``seconds`` when given, else the compute time a DDP hook measured this step
        (``fleetops_client.pytorch``), else the wall time since this rank's previous step. Each ``sample_every_s`` this
        rank sends the mean of its step times as one ``rank.step_time``; rank 0 sends ``run.step`` at most every
        ``step_every_s``.
        """
        now_m = time.monotonic()
        took = seconds if seconds is not None else self._compute_s
        if took is None and self._last_step_m is not None:
            took = now_m - self._last_step_m
        self._compute_s = None
        self._last_step_m = now_m
        self.current_step = step + 1
        if not self.config.enabled:
            return
        if self._norm is not None:
            norm, self._norm = self._norm, None
            data = {"rank": self.config.rank, "node": self.config.node, "step": step, "value": float(norm)}
            self._sample("rank.grad_norm", f"grad_norm:{step}", data)
        window = self._window
        if took is not None:
            window[0] += took
            window[1] += 1
            if now_m - window[2] >= self.config.sample_every_s:
                mean, steps = window[0] / window[1], window[1]
                window[:] = [0.0, 0, now_m]
                data = {"rank": self.config.rank, "node": self.config.node, "step": step, "seconds": mean}
                data.update(steps=steps, dropped=self.dropped_samples)
                self._sample("rank.step_time", f"step_time:{step}", data)
        if self.config.rank == 0 and now_m - self._step_sent_at >= self.config.step_every_s:
            self._step_sent_at = now_m
            self._record("run.step", f"step:{step}", {"step": step})

    def heartbeat(self, phase: str = "") -> None:
        """The training loop is alive between steps (an evaluation, a long data load): call it from the loop, never
        from a thread of its own, or a hung loop would look alive. Holds the hang watchdog off; rank 0, at most every
        ``step_every_s``."""
        now_m = time.monotonic()
        if self.config.rank == 0 and now_m - self._step_sent_at >= self.config.step_every_s:
            self._step_sent_at = now_m
            self._beats += 1
            self._record("run.heartbeat", f"heartbeat:{self.current_step}:{self._beats}", {"phase": phase[:200]})

    def wants_grad_norm(self, step: int) -> bool:
        """Whether ``step`` is one whose gradient norm every rank reports (the cross-replica check compares steps)."""
        return self.config.enabled and step % self.config.grad_norm_every == 0

    def grad_norm(self, step: int, value: float) -> None:
        """This rank's local gradient norm at ``step``, before the all-reduce; kept on the sampled steps only."""
        if self.wants_grad_norm(step):
            data = {"rank": self.config.rank, "node": self.config.node, "step": step, "value": float(value)}
            self._sample("rank.grad_norm", f"grad_norm:{step}", data)

    def local_grad_norm(self, value) -> None:
        """This step's local gradient norm, reported with the step (``step()``) as ``rank.grad_norm``. ``value`` may
        be a tensor still being computed: it is read (``float()``) only then. The DDP hook calls it on the steps
        ``wants_grad_norm`` picks."""
        self._norm = value

    def compute_time(self, seconds: float) -> None:
        """This step's compute time on this rank (forward and backward, no waiting on other ranks): what a
        straggler shows in. The DDP hook calls it; ``step()`` uses it for the step's time."""
        self._compute_s = seconds

    def restored(self, from_step: int) -> None:
        """This attempt loaded the checkpoint of ``from_step`` and trains again."""
        self._last_step_m = None  # the load is no step
        self.current_step = from_step + 1
        self._window[:] = [0.0, 0, time.monotonic()]
        if self.config.rank == 0:
            self._record("run.restored", f"restored:{from_step}", {"from_step": from_step})

    def checkpoint_started(self, step: int, *, at: float | None = None) -> None:
        if self.config.rank == 0:
            self._record("checkpoint.started", f"checkpoint:{step}:started", {"step": step}, at=at)

    def checkpoint_completed(
        self, step: int, *, blocking_s: float, bytes: int = 0, tier: str = "durable", durable_at: float | None = None
    ) -> None:
        """The write of ``step`` finished: training was blocked ``blocking_s`` seconds from its start."""
        if tier not in TIERS:
            raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
        if self.config.rank == 0:
            data = {"step": step, "blocking_s": max(0.0, float(blocking_s)), "bytes": int(bytes), "tier": tier}
            if durable_at is not None:
                data["durable_at"] = _rfc3339(durable_at)
            self._record("checkpoint.completed", f"checkpoint:{step}:completed:{tier}", data)

    def checkpoint_failed(self, step: int, reason: str) -> None:
        if self.config.rank == 0:
            self._record("checkpoint.failed", f"checkpoint:{step}:failed", {"step": step, "reason": reason[:1000]})

    @contextmanager
    def checkpoint(self, step: int, *, tier: str = "durable", bytes: int = 0) -> Iterator[CheckpointWrite]:
        """Time the write of ``step``: training is blocked for the body. An exception reports the write failed.

        For an asynchronous save, hand its future to ``write.durable_when(future)``: the blocking is the body (the
        copy to host memory), and the write is reported completed when the future is done (durable then, for the durable
        tier).
        """
        write = CheckpointWrite(step, tier, bytes)
        started, started_m = time.time(), time.monotonic()
        self.checkpoint_started(step, at=started)
        try:
            yield write
        except BaseException as exc:
            self.checkpoint_failed(step, f"{type(exc).__name__}: {exc}")
            raise
        blocking = time.monotonic() - started_m
        if write.future is None:
            self.checkpoint_completed(step, blocking_s=blocking, bytes=write.bytes, tier=write.tier)
            return

        def done(future) -> None:
            error = future.exception()
            if error is not None:
                self.checkpoint_failed(step, f"{type(error).__name__}: {error}")
            else:
                self.checkpoint_completed(step, blocking_s=blocking, bytes=write.bytes, tier=write.tier)

        write.future.add_done_callback(done)

    def run_started(self, *, nodes: list[str], gpus: int, job_id: str, cluster: str | None = None, **extra) -> None:
        """The attempt started, for a job whose scheduler does not report it (Slurm's prolog does: docs/CLIENT.md)."""
        if self.config.rank == 0:
            data = {"cluster": cluster or self.config.cluster or "default", "gpus": gpus, "nodes": list(nodes)}
            data.update(job_id=str(job_id), **extra)
            self._record("run.started", "started", data)

    def completed(self) -> None:
        """The run finished its training."""
        if self.config.rank == 0:
            self._record("run.completed", "completed", {})

    # -- queues ---------------------------------------------------------------------------------------------------

    def _record(self, kind: str, key: str, data: dict, *, at: float | None = None) -> None:
        if not self.config.enabled:
            return
        if self._closed:  # a checkpoint's future finishing after close(), say
            self.lost_records += 1
            log.error("FleetOps client closed: %s %s not sent (%d lost)", kind, key, self.lost_records)
            return
        with self._lock:
            if len(self._records) >= self.config.records_max:
                self.lost_records += 1
                log.error("FleetOps client queue full: %s %s not sent (%d lost)", kind, key, self.lost_records)
                return
            self._records.append((kind, key, time.time() if at is None else at, data))

    def _sample(self, kind: str, key: str, data: dict) -> None:
        if self._closed:
            return
        with self._lock:
            if len(self._samples) >= self.config.samples_max:
                self._samples.popleft()
                self.dropped_samples += 1
            self._samples.append((kind, key, time.time(), data))

    def _take(self) -> list[dict]:
        with self._lock:
            queued = list(self._records) + list(self._samples)
            self._records.clear()
            self._samples.clear()
        config = self.config
        prefix = f"{config.run}:{config.incarnation}:"
        return [
            {
                "specversion": "1.0",
                "id": prefix + key,
                "source": config.source,
                "type": kind,
                "time": _rfc3339(at),
                "data": {"run": config.run, **data},
            }
            for kind, key, at, data in queued
        ]

    def _spool_queued(self) -> None:
        """Move what is queued to the spool (the caller holds the spool lock)."""
        events = self._take()
        if events:
            self.spool.extend(events)

    def _queued(self) -> int:
        with self._lock:
            return len(self._records) + len(self._samples)

    # -- the sender thread ----------------------------------------------------------------------------------------

    def _pump(self, *, deadline: float | None = None) -> bool:
        """Spool what is queued, then send until the spool is empty or the API is unavailable. True when idle."""
        with self._spool_lock:  # taken and spooled in one hold: a SIGTERM in between finds them on disk
            self._spool_queued()
        now = time.monotonic()
        if self._unavailable_since is not None and now < self._retry_at and deadline is None:
            return False
        try:
            while self.sender.send_once():
                if deadline is not None and time.monotonic() > deadline:
                    return False
        except RetryableError as exc:
            if self._unavailable_since is None:
                self._unavailable_since = now
                log.warning("FleetOps unavailable (%s): spooling to %s", exc, self.config.spool_path)
            self._retry_at = now + self.sender.backoff.next_delay(exc.retry_after)
            return False
        if self._unavailable_since is not None:
            log.warning("FleetOps reachable again after %.0f s", now - self._unavailable_since)
            self._unavailable_since = None
        return True

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.config.flush_s)
            self._wake.clear()
            try:
                idle = self._pump()
            except Exception:  # never let the thread die: the next round tries again
                log.exception("FleetOps client: sending failed")
                idle = False
            with self._idle:
                self._last_idle = idle and not self._records and not self._samples
                self._idle.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything queued; True when FleetOps has it all within ``timeout`` seconds (else it stays spooled)."""
        if not self.config.enabled:
            return True
        deadline = time.monotonic() + timeout
        self._retry_at = 0.0  # asked to send now: not after the back-off of earlier failures
        if self._thread is None or not self._thread.is_alive():
            self._unavailable_since = None
            return self._pump(deadline=deadline)
        while time.monotonic() < deadline:
            with self._idle:
                self._last_idle = False
                self._wake.set()
                self._idle.wait(max(0.0, deadline - time.monotonic()))
                if self._last_idle:
                    return True
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return False

    def close(self, timeout: float = 5.0) -> bool:
        """Flush for up to ``timeout`` seconds and stop the thread; what is not sent stays in the spool."""
        if self._closed:
            return True
        sent = self.flush(timeout)
        self._closed = True
        handler = getattr(self, "_sigterm_handler", None)
        if handler is not None and signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, self.config.flush_s))
        if self.config.enabled:
            with self._spool_lock:  # queued while the last send was in flight: kept for the next process
                queued = self._queued()
                self._spool_queued()
            sent = sent and not queued
        return sent

    def stats(self) -> dict:
        """What was sent, spooled and dropped so far."""
        out = {"dropped_samples": self.dropped_samples, "lost_records": self.lost_records}
        if self.config.enabled:
            s = self.sender.stats
            out.update(
                delivered=s.delivered, duplicates=s.duplicates, rejected=s.rejected, spool_dropped=self.spool.dropped
            )
        return out

    _retry_at = 0.0
    _last_idle = False
