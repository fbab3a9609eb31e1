"""Xid storm folding: identical Xids on one GPU within a window become one gpu.xid event with a count.

A storm (the same Xid hundreds of thousands of times on one node) would otherwise flood the spool and the
API line by line. The first Xid of a (gpu, xid) pair opens a window; every repeat inside the window only
adds to its count; when the window closes one event goes out with ``count`` (how many were seen), and the
times of the first and the last. Nothing is hidden: the count is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class XidWindow:
    gpu: int
    xid: int
    message: str
    uuid: str | None
    first: datetime
    opened: float  # monotonic seconds
    last: datetime
    count: int = 1
    extra: dict = field(default_factory=dict)


class StormFolder:
    def __init__(self, window_s: float = 10.0):
        self.window_s = window_s
        self.open: dict[tuple[int, int], XidWindow] = {}

    def add(
        self, gpu: int, xid: int, message: str, when: datetime, now: float, uuid: str | None = None
    ) -> XidWindow | None:
        """Count one Xid; returns the window it closed (one that had run out but was not collected yet)."""
        key = (gpu, xid)
        window = self.open.get(key)
        if window is not None and now - window.opened < self.window_s:
            window.count += 1
            window.last = when
            return None
        self.open[key] = XidWindow(gpu, xid, message, uuid, when, now, when)
        return window

    def due(self, now: float) -> list[XidWindow]:
        """Windows that have closed by ``now``, removed from the folder."""
        closed = [w for w in self.open.values() if now - w.opened >= self.window_s]
        for w in closed:
            del self.open[(w.gpu, w.xid)]
        return closed

    def flush_all(self) -> list[XidWindow]:
        closed = list(self.open.values())
        self.open.clear()
        return closed
