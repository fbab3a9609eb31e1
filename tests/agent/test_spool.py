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
