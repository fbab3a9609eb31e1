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

A disk that refuses a write (full, over quota, remounted read-only) never stops the spool: what is already on disk
is still delivered, the cursor is kept in memory until ``state.json`` can be written again, and new records are held
in memory (the newest ``memory_max``; older ones are dropped and counted in ``dropped``), delivered from there, and
written to disk with the next record once the disk takes it. A failed append is cut off its segment, so no torn
line is left between records. Held records are lost if the process dies before the disk takes them.
"""

from __future__ import annotations

import contextlib
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
    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        segment_bytes: int = 0,
        memory_max: int = 10_000,
        first_seq: int = 1,
    ):
        """``first_seq``: the least sequence this process hands out. The node agent passes the clock's milliseconds:
        a sequence handed out to a record held in memory and lost with the process is then never handed out again
        after a restart, whatever the disk kept."""
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(4096, max_bytes // 16)
        self.memory_max = memory_max
        self.held: list[Record] = []  # the disk refused them: the newest sequences, above every record on disk
        self.unwritable: str | None = None  # why the disk last refused a write; None once it takes one again
        state = self._read_state()
        self.delivered: int = state.get("delivered", 0)
        self.dropped: int = state.get("dropped", 0)
        self.next_seq: int = max(state.get("next_seq", 1), first_seq)
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

    def _write_state(self) -> bool:
        """Persist the cursor; False when the disk refused (the cursor stays in memory, and is written next time)."""
        tmp = self.dir / (_STATE + ".tmp")
        body = json.dumps({"delivered": self.delivered, "next_seq": self.next_seq, "dropped": self.dropped})
        try:
            with open(tmp, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.dir / _STATE)
            _fsync_dir(self.dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._refused(exc)
            return False
        return True

    def _refused(self, exc: OSError) -> None:
        if self.unwritable is None:
            log.warning(
                "spool %s cannot be written (%s): what it holds is still delivered, new events are held in memory "
                "(at most %d, the oldest dropped beyond) until it can",
                self.dir,
                exc.strerror or exc,
                self.memory_max,
            )
        self.unwritable = exc.strerror or str(exc)

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
        self.next_seq = records[-1].seq + 1
        try:
            self._write(self.held + records)  # the held ones first: their sequences are the lower
        except OSError as exc:
            self._refused(exc)
            self._hold(records)
            return records
        if self.unwritable is not None:
            log.warning("spool %s can be written again; %d events held in memory are on disk", self.dir, len(self.held))
            self.unwritable = None
            self._write_state()  # the cursor kept in memory meanwhile
        self.held = []
        self._enforce_bound()
        return records

    def _write(self, records: list[Record]) -> None:
        """Append `records` in one write and one fsync; a write the disk refuses is cut off again, and raised."""
        body = b"".join(
            (json.dumps({"seq": r.seq, "event": r.event}, separators=(",", ":")) + "\n").encode() for r in records
        )
        segments = self._segments()
        path = segments[-1] if segments else None
        if path is None or path.stat().st_size + len(body) > self.segment_bytes:
            path = self.dir / f"{_PREFIX}{records[0].seq:016d}{_SUFFIX}"
        new = not path.exists()
        size = 0 if new else path.stat().st_size
        try:
            with open(path, "ab") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            if new:
                _fsync_dir(self.dir)
        except OSError:
            # Part of the body may be there: a torn line the next append would follow, which would be lost with it.
            with contextlib.suppress(OSError):
                if new:
                    path.unlink()
                else:
                    os.truncate(path, size)
            raise

    def _hold(self, records: list[Record]) -> None:
        self.held += records
        over = len(self.held) - self.memory_max
        if over > 0:
            lost, self.held = self.held[:over], self.held[over:]
            self.dropped += len(lost)
            log.warning(
                "spool %s unwritable, %d events held in memory: dropped the oldest %d (seq %d-%d), %d dropped in all",
                self.dir,
                self.memory_max,
                len(lost),
                lost[0].seq,
                lost[-1].seq,
                self.dropped,
            )

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
            # The cursor moves before the file goes, so nothing is resent; were the state refused, the drop is logged
            # above and the file goes all the same: the disk needs the room more.
            self._write_state()
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
        return out + [r for r in self.held if r.seq > self.delivered][: limit - len(out)]

    def mark_delivered(self, seq: int) -> None:
        """Move the cursor to ``seq`` (inclusive) and remove segments that are wholly delivered."""
        if seq <= self.delivered:
            return
        self.delivered = seq
        self.held = [r for r in self.held if r.seq > seq]
        # Delivered segments go first: on a full disk that is the room the state needs. A crash in between resends
        # the newest segment's delivered records, which the API answers as duplicates.
        segments = self._segments()
        for i, path in enumerate(segments[:-1]):
            if self._first_seq(segments[i + 1]) <= self.delivered + 1:
                path.unlink()
        # the newest segment stays (appends continue there) until a newer one exists
        self._write_state()

    def all_records(self) -> list[Record]:
        return [r for p in self._segments() for r in self._records(p)]
