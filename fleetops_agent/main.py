"""fleetops-agent: NVML readings and Xid/ECC events of one node, spooled on disk and posted to FleetOps.

Every ``--interval`` seconds a node.heartbeat, and every ``--readings-every``-th of those polls (each, by default) per
GPU a gpu.ecc and a gpu.health reading. Between
polls it waits on NVML's event set; Xids are folded into one gpu.xid per (GPU, Xid) and storm window,
with a ``count``; an ECC event triggers a fresh gpu.ecc reading of that GPU. Everything goes through the
spool first, then to ``POST /api/v1/events``; see docs/AGENT.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import sys
import time
from datetime import UTC, datetime

from fleetops_agent import __version__
from fleetops_agent.nvml import XID_MESSAGES, NoDriver, Nvml
from fleetops_agent.storm import StormFolder, XidWindow
from fleetops_client.delivery import Backoff, HttpTransport, RetryableError, Sender
from fleetops_client.spool import Spool

log = logging.getLogger("fleetops_agent")


def _name(value: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._:-]", "-", value).lstrip("._:-")[:200]
    return cleaned or "unknown"


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


class Agent:
    def __init__(
        self,
        nvml: Nvml,
        spool: Spool,
        sender: Sender | None,
        *,
        node: str,
        cluster: str | None,
        storm_s,
        readings_every: int = 1,
    ):
        if readings_every < 1:
            raise ValueError("readings_every must be at least 1")
        self.nvml = nvml
        self.readings_every = readings_every
        self.polls = 0
        self.spool = spool
        self.sender = sender
        self.node = node
        self.cluster = cluster
        self.source = f"fleetops-agent://{cluster or 'default'}/{node}"
        self.storm = StormFolder(storm_s)
        self.stopping = False
        self.urgent = False  # spooled since the last delivery: more than routine polls (an Xid, an ECC event)

    def emit(
        self, type_: str, data: dict, *, gpu: int | None = None, when: datetime | None = None, urgent: bool = True
    ) -> None:
        """Spool one event. Its id carries the spool's persisted sequence, so it never changes on resend. Anything
        but a routine poll's reading is `urgent`: delivered at once, whatever --send-every says."""
        self.urgent |= urgent
        when = when or _now()
        target = "-" if gpu is None else str(gpu)

        def build(seq: int) -> dict:
            return {
                "specversion": "1.0",
                "id": f"{self.node}:{type_}:{target}:{seq}",
                "source": self.source,
                "type": type_,
                "time": _iso(when),
                "data": {"node": self.node} | data,
            }

        self.spool.append(build)

    def poll(self) -> None:
        """A heartbeat; and on the first poll and every `readings_every`-th after it, each GPU's readings."""
        self.emit("node.heartbeat", {"cluster": self.cluster} if self.cluster else {}, urgent=False)
        self.polls += 1
        if (self.polls - 1) % self.readings_every:
            return
        for i in range(len(self.nvml.handles)):
            self.poll_ecc(i, urgent=False)
            health = self.nvml.health(i)
            if health is not None:
                self.emit("gpu.health", {"gpu": i} | health, gpu=i, urgent=False)

    def poll_ecc(self, i: int, *, urgent: bool = True) -> None:
        ecc = self.nvml.ecc(i)
        if ecc is not None:
            self.emit("gpu.ecc", {"gpu": i} | ecc, gpu=i, urgent=urgent)

    def handle_events(self, timeout_ms: int, *, until_quiet: bool = False) -> None:
        """Take NVML events for up to ``timeout_ms`` (or, with ``until_quiet``, until a wait times out)."""
        end = time.monotonic() + timeout_ms / 1000
        while not self.stopping:
            left = int(max(0, (end - time.monotonic()) * 1000))
            event = self.nvml.wait_event(0 if until_quiet else left)
            if event is None:
                if until_quiet or left == 0:
                    return
                continue
            if event.kind == "xid":
                message = XID_MESSAGES.get(event.xid, "Xid reported by NVML")
                uuid = self.nvml.uuids[event.gpu] if event.gpu < len(self.nvml.uuids) else None
                closed = self.storm.add(event.gpu, event.xid, message, _now(), time.monotonic(), uuid)
                if closed is not None:
                    self.emit_xid(closed)
            else:
                self.poll_ecc(event.gpu)
            if not until_quiet and time.monotonic() >= end:
                return

    def emit_xid(self, window: XidWindow) -> None:
        data = {"gpu": window.gpu, "xid": window.xid, "message": f"Xid {window.xid}: {window.message}"}
        if window.uuid:
            data["uuid"] = window.uuid
        data |= {"count": window.count, "first_seen": _iso(window.first), "last_seen": _iso(window.last)}
        self.emit("gpu.xid", data, gpu=window.gpu, when=window.first)

    def flush_storms(self, *, everything: bool = False) -> None:
        for window in self.storm.flush_all() if everything else self.storm.due(time.monotonic()):
            self.emit_xid(window)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleetops-agent", description=__doc__.split("\n")[0])
    p.add_argument("--url", default=os.environ.get("FLEETOPS_URL"), help="FleetOps base URL (or $FLEETOPS_URL)")
    p.add_argument("--token", default=None, help="API token with events:write (default: $FLEETOPS_TOKEN)")
    p.add_argument("--spool-dir", default="/var/lib/fleetops-agent/spool")
    p.add_argument("--spool-max-mb", type=float, default=64.0, help="spool bound; the oldest is dropped beyond")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between heartbeats and health polls")
    p.add_argument(
        "--readings-every",
        type=int,
        default=1,
        help="send the GPUs' ECC and health readings every N-th poll (ECC events from NVML are read at once anyway)",
    )
    p.add_argument("--cluster", default=None)
    p.add_argument("--node", default=None, help="node name (default: the hostname)")
    p.add_argument("--storm-window", type=float, default=10.0, help="seconds identical Xids are counted together")
    p.add_argument("--batch", type=int, default=500, help="events per POST")
    p.add_argument(
        "--send-every",
        type=float,
        default=0.0,
        help="seconds between deliveries of routine polls (default 0: at once); an Xid or an ECC event goes at once "
        "with whatever is spooled. Keep it well under the server's HEARTBEAT_TIMEOUT_S (300 s)",
    )
    p.add_argument("--once", action="store_true", help="one poll, drain the event set, deliver, exit")
    p.add_argument("--deadline", type=float, default=60.0, help="with --once: seconds to keep retrying delivery")
    p.add_argument("--fake", action="store_true", help="a fake NVML ($FLEETOPS_AGENT_FAKE_NVML names a scenario)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--version", action="version", version=__version__)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = args.token or os.environ.get("FLEETOPS_TOKEN")
    if not args.url or not token:
        print("fleetops-agent: --url and --token (or FLEETOPS_TOKEN) are required", file=sys.stderr)
        return 2
    if args.send_every < 0:
        print("fleetops-agent: --send-every must be 0 or more seconds", file=sys.stderr)
        return 2
    if args.fake:
        from fleetops_agent.fake_nvml import FakeGpuModel

        FakeGpuModel.from_env().install()

    nvml = Nvml()
    try:
        count = nvml.init()
    except NoDriver as exc:
        print(f"fleetops-agent: no NVIDIA driver found: {exc} (use --fake to run without a GPU)", file=sys.stderr)
        return 3
    nvml.register_events()
    node = _name(args.node or socket.gethostname().split(".")[0])
    # Sequences start at the clock's milliseconds at least: on a full disk events are held in memory, their ids handed
    # out and sent but never written, and the next run must not hand them out again (the API would answer its events
    # under them "duplicate").
    first_seq = time.time_ns() // 1_000_000
    spool = Spool(args.spool_dir, max_bytes=int(args.spool_max_mb * 1024 * 1024), first_seq=first_seq)
    sender = Sender(spool, HttpTransport(args.url, token), batch_size=args.batch, backoff=Backoff())
    if args.readings_every < 1:
        print("fleetops-agent: --readings-every must be at least 1", file=sys.stderr)
        return 2
    agent = Agent(
        nvml,
        spool,
        sender,
        node=node,
        cluster=args.cluster and _name(args.cluster),
        storm_s=args.storm_window,
        readings_every=args.readings_every,
    )
    log.info(
        "fleetops-agent %s on %s: %d GPUs, driver %s, spool %s (%d pending, %d dropped so far)",
        __version__,
        node,
        count,
        nvml.driver_version(),
        args.spool_dir,
        len(spool.pending()),
        spool.dropped,
    )

    def stop(signum, frame):
        agent.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if args.once:
            return run_once(agent, args.deadline)
        run_forever(agent, args.interval, send_every=args.send_every)
        return 0
    finally:
        nvml.shutdown()


def run_once(agent: Agent, deadline_s: float) -> int:
    agent.poll()
    agent.handle_events(0, until_quiet=True)
    agent.flush_storms(everything=True)
    log.info("spooled; %d events pending", len(agent.spool.pending()))
    ok = agent.sender.drain(deadline=time.monotonic() + deadline_s)
    log.info("delivered %d, duplicates %d, rejected %d", *vars(agent.sender.stats).values())
    return 0 if ok else 1


def run_forever(agent: Agent, interval: float, *, send_every: float = 0.0) -> None:
    """Poll every `interval` s and deliver what is spooled: at once by default, or every `send_every` s, sooner when
    something urgent is spooled (never sooner than the backoff after a failed delivery). At 16,384 nodes polling
    every 30 s, a delivery a poll is 546 POSTs a second; --send-every 120 makes it 137 (docs/DEPLOY.md)."""
    next_poll = time.monotonic()
    next_send = 0.0  # the next routine delivery
    retry_at = 0.0  # no delivery before this: the backoff after the API could not take one
    while not agent.stopping:
        now = time.monotonic()
        if now >= next_poll:
            agent.poll()
            next_poll = now + interval
        agent.handle_events(500)
        agent.flush_storms()
        now = time.monotonic()
        if (agent.urgent or now >= next_send) and now >= retry_at:
            agent.urgent = False
            try:
                while agent.sender.send_once() and not agent.stopping:
                    pass
                next_send = time.monotonic() + send_every
            except RetryableError as exc:
                agent.urgent = True  # what was pending is still pending: try again once the backoff allows
                delay = agent.sender.backoff.next_delay(exc.retry_after)
                log.warning("event API unavailable (%s); retrying in %.1fs", exc, delay)
                retry_at = time.monotonic() + delay
    agent.flush_storms(everything=True)


if __name__ == "__main__":
    sys.exit(main())
