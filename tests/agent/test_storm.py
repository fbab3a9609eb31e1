from datetime import UTC, datetime

from fleetops_agent.storm import StormFolder

T = datetime(2026, 3, 1, tzinfo=UTC)


def test_identical_xids_in_a_window_are_one_count():
    folder = StormFolder(window_s=10)
    for i in range(100_000):
        assert folder.add(0, 79, "fell off the bus", T, now=i * 0.00005) is None
    folder.add(0, 48, "dbe", T, now=1)  # another Xid on the same GPU: its own window
    folder.add(1, 79, "fell off the bus", T, now=1)  # the same Xid on another GPU: its own window
    assert folder.due(now=9) == []
    closed = {(w.gpu, w.xid): w.count for w in folder.due(now=11)}
    assert closed == {(0, 79): 100_000, (0, 48): 1, (1, 79): 1}
    assert folder.open == {}


def test_a_repeat_after_the_window_starts_a_new_one_and_hands_back_the_old():
    folder = StormFolder(window_s=10)
    folder.add(0, 79, "m", T, now=0)
    folder.add(0, 79, "m", T, now=5)
    closed = folder.add(0, 79, "m", T, now=12)
    assert closed is not None and closed.count == 2
    assert [w.count for w in folder.flush_all()] == [1]
