"""A bounded on-disk spool of events waiting for delivery.

Layout of the spool directory:

- ``seg-<first seq>.jsonl``: append-only segments, one JSON record per line, ``{"seq": n, "event": {...}}``;
  every append is flushed and fsync'd before it returns, so a spooled event survives a crash or a SIGKILL.
- ``state.json``: ``{"delivered": seq, "next_seq": n, "dropped": count}``, replaced atomically (write to a
  temporary file, fsync, rename, fsync the directory). ``delivered`` is the cursor: every record with a
  sequence at or below it was delivered (or dropped with a logged reason) and is never sent again.

The sequence is monotonic across restarts (the larger of ``state.next_seq`` and the last record on disk,
plus one), and the event id is derived from it when the event is spooled, so a record resent after a
crash
keeps its id and the API answers "duplicate". A torn last line (a crash mid-write) is cut off on open.
When the segments exceed ``max_bytes`` the oldest segment is dropped whole and its undelivered records
are added to ``dropped``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_STATE = "state.json"
_PREFIX = "seg-"
_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class Record:
    seq: int
    event: dict[str, Any]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    def __init__(self, directory: str | os.PathLike, *, max_bytes: int = 64 * 1024 * 1024, segment_bytes: int = 0):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(4096, max_bytes // 16)
        state = self._read_state()
        self.delivered: int = state.get("delivered", 0)
        self.dropped: int = state.get("dropped", 0)
        self.next_seq: int = state.get("next_seq", 1)
        last = self._repair_last_segment()
        if last is not None:
            self.next_seq = max(self.next_seq, last + 1)

    # -- state ---------------------------------------------------------------------------------------

    def _read_state(self) -> dict[str, int]:
        try:
            return json.loads((self.dir / _STATE).read_text())
        except FileNotFoundError:
            return {}
        except ValueError:
            log.warning("spool state %s is unreadable; starting from the segments", self.dir / _STATE)
            return {}

    def _write_state(self) -> None:
        tmp = self.dir / (_STATE + ".tmp")
        body = json.dumps({"delivered": self.delivered, "next_seq": self.next_seq, "dropped": self.dropped})
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / _STATE)
        _fsync_dir(self.dir)

    # -- segments ------------------------------------------------------------------------------------

    def _segments(self) -> list[Path]:
        return sorted(p for p in self.dir.glob(_PREFIX + "*" + _SUFFIX))

    @staticmethod
    def _first_seq(path: Path) -> int:
        return int(path.name[len(_PREFIX) : -len(_SUFFIX)])

    def _repair_last_segment(self) -> int | None:
        """Cut a torn trailing line off the newest segment; the last sequence on disk, if any."""
        segments = self._segments()
        last = None
        for path in reversed(segments):
            data = path.read_bytes()
            good = 0
            for line in data.splitlines(keepends=True):
                if not line.endswith(b"\n"):
                    break
                try:
                    last = json.loads(line)["seq"]
                except (ValueError, KeyError):
                    break
                good += len(line)
            if good < len(data):
                log.warning("spool segment %s has a torn tail of %d bytes; cutting it", path, len(data) - good)
                with open(path, "r+b") as f:
                    f.truncate(good)
                    os.fsync(f.fileno())
            if last is not None:
                return last
        return last

    def _records(self, path: Path) -> list[Record]:
        out = []
        for line in path.read_bytes().splitlines():
            try:
                raw = json.loads(line)
                out.append(Record(raw["seq"], raw["event"]))
            except (ValueError, KeyError):
                continue
        return out

    def size(self) -> int:
        return sum(p.stat().st_size for p in self._segments())

    # -- public --------------------------------------------------------------------------------------

    def append(self, make_event: Callable[[int], dict[str, Any]]) -> Record:
        """Spool one event; ``make_event(seq)`` builds it with its sequence (so its id can carry it)."""
        return self.extend([make_event(self.next_seq)])[0]

    def extend(self, events: list[dict[str, Any]]) -> list[Record]:
        """Spool events whose ids are already fixed, in one write and one fsync (the training client's batches)."""
        if not events:
            return []
        records = [Record(self.next_seq + i, event) for i, event in enumerate(events)]
        body = b"".join(
            (json.dumps({"seq": r.seq, "event": r.event}, separators=(",", ":")) + "\n").encode() for r in records
        )
        segments = self._segments()
        path = segments[-1] if segments else None
        if path is None or path.stat().st_size + len(body) > self.segment_bytes:
            path = self.dir / f"{_PREFIX}{records[0].seq:016d}{_SUFFIX}"
        new = not path.exists()
        with open(path, "ab") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        if new:
            _fsync_dir(self.dir)
        self.next_seq = records[-1].seq + 1
        self._enforce_bound()
        return records

    def _enforce_bound(self) -> None:
        segments = self._segments()
        total = sum(p.stat().st_size for p in segments)
        changed = False
        while total > self.max_bytes and len(segments) > 1:
            oldest = segments.pop(0)
            lost = [r for r in self._records(oldest) if r.seq > self.delivered]
            if lost:
                self.dropped += len(lost)
                self.delivered = max(self.delivered, lost[-1].seq)
                log.warning(
                    "spool over %d bytes: dropped %d undelivered events (seq %d-%d), %d dropped in all",
                    self.max_bytes,
                    len(lost),
                    lost[0].seq,
                    lost[-1].seq,
                    self.dropped,
                )
            total -= oldest.stat().st_size
            self._write_state()  # the cursor moves before the file goes, so nothing is resent or lost silently
            oldest.unlink()
            changed = True
        if changed:
            _fsync_dir(self.dir)

    def pending(self, limit: int = 1000) -> list[Record]:
        """The oldest undelivered records, in sequence order."""
        out: list[Record] = []
        segments = self._segments()
        for i, path in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            if nxt is not None and self._first_seq(nxt) <= self.delivered + 1:
                continue  # every record here is at or below the cursor
            for record in self._records(path):
                if record.seq > self.delivered:
                    out.append(record)
                    if len(out) >= limit:
                        return out
        return out

    def mark_delivered(self, seq: int) -> None:
        """Move the cursor to ``seq`` (inclusive) and remove segments that are wholly delivered."""
        if seq <= self.delivered:
            return
        self.delivered = seq
        self._write_state()
        segments = self._segments()
        for i, path in enumerate(segments[:-1]):
            if self._first_seq(segments[i + 1]) <= self.delivered + 1:
                path.unlink()
        # the newest segment stays (appends continue there) until a newer one exists

    def all_records(self) -> list[Record]:
        return [r for p in self._segments() for r in self._records(p)]
