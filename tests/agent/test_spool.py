import json

from fleetops_client.spool import Spool


def _event(seq):
    return {"id": f"n:node.heartbeat:-:{seq}", "seq_copy": seq}


def test_appends_survive_a_crash_and_the_cursor_is_kept(tmp_path):
    spool = Spool(tmp_path, segment_bytes=200)
    for _ in range(10):
        spool.append(_event)
    first = spool.pending(4)
    spool.mark_delivered(first[-1].seq)
    del spool  # the "crash": no close, no flush beyond what append and mark_delivered did

    reopened = Spool(tmp_path, segment_bytes=200)
    pending = reopened.pending()
    assert [r.seq for r in pending] == list(range(5, 11))
    assert [r.event["id"] for r in pending] == [f"n:node.heartbeat:-:{s}" for s in range(5, 11)]
    assert reopened.append(_event).seq == 11  # the sequence goes on, ids are never reused


def test_sequence_is_not_reused_when_everything_was_delivered_and_removed(tmp_path):
    spool = Spool(tmp_path, segment_bytes=100)
    for _ in range(6):
        spool.append(_event)
    spool.mark_delivered(6)
    spool.append(_event)  # seq 7 opens a segment, the older wholly delivered ones go
    spool.mark_delivered(7)
    assert len(list(tmp_path.glob("seg-*"))) <= 2
    assert Spool(tmp_path).append(_event).seq == 8


def test_a_torn_last_line_is_cut_off(tmp_path):
    spool = Spool(tmp_path)
    spool.append(_event)
    spool.append(_event)
    segment = next(tmp_path.glob("seg-*"))
    with open(segment, "ab") as f:
        f.write(b'{"seq": 3, "event": {"id": "hal')  # killed mid-write
    reopened = Spool(tmp_path)
    assert [r.seq for r in reopened.pending()] == [1, 2]
    assert reopened.append(_event).seq == 3
    assert all(json.loads(line) for line in segment.read_text().splitlines())


def test_over_the_bound_the_oldest_are_dropped_and_counted(tmp_path):
    spool = Spool(tmp_path, max_bytes=2000, segment_bytes=500)
    for _ in range(100):
        spool.append(_event)
    assert spool.size() <= 2000 + 500
    pending = spool.pending(1000)
    assert spool.dropped > 0
    assert spool.dropped + len(pending) == 100
    assert pending[-1].seq == 100  # the newest are kept
    reopened = Spool(tmp_path, max_bytes=2000, segment_bytes=500)
    assert reopened.dropped == spool.dropped
    assert [r.seq for r in reopened.pending(1000)] == [r.seq for r in pending]


def _big(seq):
    return {"id": f"n:gpu.health:0:{seq}", "note": "x" * 6000}  # more than the room a block of a segment has left


def _lines_parse(directory) -> bool:
    return all(json.loads(line) for seg in directory.glob("seg-*") for line in seg.read_text().splitlines())


def test_on_a_full_disk_new_records_are_held_in_memory_and_everything_is_still_delivered(small_disk):
    spool = Spool(small_disk.path)
    for _ in range(5):
        spool.append(_event)
    small_disk.fill()
    held = [spool.append(_big), spool.append(_event), spool.append(_event)]
    assert spool.unwritable and [r.seq for r in held] == [6, 7, 8]
    assert _lines_parse(small_disk.path)  # the refused append was cut off: no torn line for the next to follow
    assert [r.seq for r in Spool(small_disk.path).pending()] == [1, 2, 3, 4, 5]  # on disk: what was spooled before

    assert [r.seq for r in spool.pending(6)] == [1, 2, 3, 4, 5, 6]
    spool.mark_delivered(6)  # the state cannot be written: the cursor is kept in memory
    assert [r.seq for r in spool.pending()] == [7, 8]
    spool.mark_delivered(8)
    assert spool.pending() == [] and spool.held == []

    small_disk.free()
    assert spool.append(_event).seq == 9 and spool.unwritable is None
    reopened = Spool(small_disk.path)
    assert [r.seq for r in reopened.pending()] == [9]  # the cursor reached the disk with the first write it took
    assert _lines_parse(small_disk.path)


def test_records_held_in_memory_are_bounded_the_oldest_dropped_and_counted(small_disk):
    spool = Spool(small_disk.path, memory_max=3)
    spool.append(_event)
    small_disk.fill()
    for _ in range(5):
        spool.append(_big)
    assert spool.dropped == 2
    assert [r.seq for r in spool.pending()] == [1, 4, 5, 6]
    small_disk.free()
    spool.append(_event)  # the disk takes the held ones with the next
    reopened = Spool(small_disk.path)
    assert [r.seq for r in reopened.pending()] == [1, 4, 5, 6, 7] and reopened.dropped == 2


def test_the_sequence_starts_at_first_seq_and_never_goes_back(tmp_path):
    assert Spool(tmp_path, first_seq=1000).append(_event).seq == 1000
    assert Spool(tmp_path, first_seq=1).append(_event).seq == 1001
