"""Checkpoint I/O (runs/domain/checkpoint_io.py): the write designs priced by hand (docs/DOMAIN.md section 3,
"Checkpoint I/O") and a run's writes measured."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from runs.domain import advisor, checkpoint_io
from runs.domain.checkpoint_io import Hops, WriteRow

# The documented defaults (fleetops/settings.py): GB/s per GPU to pinned host memory, per node to local NVMe, the
# shared storage's aggregate, per node to a peer.
DEFAULTS = Hops(gpu_host=50.0, nvme=6.5, storage=2000.0, peer=400.0)


def test_it_prices_a_70b_state_over_2048_ranks_by_hand():
    """1.13 TB over 2,048 ranks of 8 a node, M = 24 h, R = 10 min (docs/DOMAIN.md section 3's vector)."""
    p = checkpoint_io.price(state_bytes=1.13e12, ranks=2048, hops=DEFAULTS, mtbf_s=86_400, restart_s=600)
    designs = {d.name: d for d in p.designs}
    # Bytes per rank: 1.13e12 / 2,048 = 551,757,812.5 (0.552 GB).
    assert p.bytes_per_rank == pytest.approx(551_757_812.5)
    # Synchronous: the storage's share per rank is 2,000 / 2,048 = 0.9766 GB/s, below the GPU's 50 GB/s, so
    # 0.5518 / 0.9766 = 0.565 s (= 1.13 TB / 2 TB/s), limited by shared storage.
    assert designs["sync"].blocking_s == pytest.approx(0.565)
    assert designs["sync"].limit == "storage"
    # Asynchronous sharded: the copy to host memory 0.5518 GB / 50 GB/s = 0.011035 s; the drain 1.13 / 2,000 =
    # 0.565 s in the background.
    assert designs["async"].blocking_s == pytest.approx(0.01103515625)
    assert designs["async"].background_s == pytest.approx(0.565)
    # Local NVMe: the same copy, then 0.5518 GB at 6.5 / 8 = 0.8125 GB/s a rank = 0.6791 s.
    assert designs["local"].blocking_s == pytest.approx(0.01103515625)
    assert designs["local"].background_s == pytest.approx(0.551_757_812_5 / 0.8125)
    # Peer: 400 / 8 = 50 GB/s a rank: 0.011035 s to the peer's memory.
    assert designs["peer"].background_s == pytest.approx(0.01103515625)
    # Daly for delta = 0.565 s, M = 86,400 s: sqrt(2 x 0.565 x 86,400) = sqrt(97,632) = 312.461 s, times
    # 1 + sqrt(3.2697e-6)/3 + 3.2697e-6/9 = 1.000603, less 0.565: 312.085 s. The writes' share 0.565 / 312.085 =
    # 0.181%, under 1%: synchronous writes, the most durable design, meet the target.
    assert designs["sync"].interval_s == pytest.approx(312.0846, abs=1e-3)
    assert designs["sync"].overhead == pytest.approx(0.0018104, abs=1e-6)
    assert p.chosen is designs["sync"] and p.shortfall == 0
    # W at that interval: 0.0018104 + (156.042 + 600) / 86,400 = 0.010561; the interval for exactly 1% is
    # 0.565 / 0.01 = 56.5 s, where W = 0.01 + (28.25 + 600) / 86,400 = 0.017271.
    assert designs["sync"].waste == pytest.approx(0.010561, abs=1e-6)
    assert designs["sync"].target_interval_s == pytest.approx(56.5)
    assert designs["sync"].waste_at_target == pytest.approx(0.0172714, abs=1e-6)
    # Both follow from the advisor itself.
    costs = {"delta_s": 0.565, "mtbf_s": 86_400, "restart_s": 600}
    assert designs["sync"].interval_s == pytest.approx(advisor.daly(delta_s=0.565, mtbf_s=86_400))
    assert designs["sync"].waste == pytest.approx(advisor.waste(designs["sync"].interval_s, **costs))
    # Storage load at that interval: 1.13e12 bytes / 312.085 s = 3.62 GB/s.
    assert designs["sync"].storage_gb_s == pytest.approx(1130 / 312.0846, rel=1e-5)
    assert designs["local"].storage_gb_s == designs["peer"].storage_gb_s == 0


def test_it_says_the_shortfall_and_the_limiting_hop_when_no_design_meets_the_target():
    """6.5 TB (405B) over 16,384 ranks, a 1 GB/s copy to host memory (pageable, not pinned), 1 TB/s storage, M = 30
    min, R = 5 min."""
    hops = Hops(gpu_host=1.0, nvme=6.5, storage=1000.0, peer=50.0)
    p = checkpoint_io.price(state_bytes=6.5e12, ranks=16_384, hops=hops, mtbf_s=1800, restart_s=300)
    designs = {d.name: d for d in p.designs}
    # Synchronous: 6.5e12 / 1e12 = 6.5 s; Daly 148.67 s; 6.5 / 148.67 = 4.37%.
    assert designs["sync"].blocking_s == pytest.approx(6.5)
    assert designs["sync"].overhead == pytest.approx(0.043722, abs=1e-5)
    # Asynchronous: 6.5e12 / 16,384 = 396,728,515.6 bytes a rank at 1 GB/s = 0.3967 s; Daly: sqrt(2 x 0.3967 x
    # 1,800) = 37.792, x (1 + sqrt(1.102e-4)/3 + 1.102e-4/9) = 37.924, less 0.3967 = 37.528 s; 0.3967 / 37.528 =
    # 1.057%: over by 0.057 points. The drain (6.5 s) is shorter than that interval and does not set it.
    assert designs["async"].blocking_s == pytest.approx(0.396728515625)
    assert designs["async"].interval_s == pytest.approx(37.5278, abs=1e-3)
    assert designs["async"].overhead == pytest.approx(0.0105716, abs=1e-6)
    assert p.chosen is None
    assert p.best is designs["async"]  # as fast as local and peer, and durable
    assert p.shortfall == pytest.approx(0.0005716, abs=1e-6)
    assert p.best.limit == "gpu_host" and p.best.limit_label == "GPU to pinned host memory"


def test_a_drain_longer_than_daly_sets_the_interval_and_the_limit():
    # 6.5 TB at 100 GB/s drains in 65 s; with a 0.3967 s copy Daly's 37.5 s would start a write before the last is
    # durable, so the interval is the drain's 65 s and its share 0.3967 / 65 = 0.61%.
    hops = Hops(gpu_host=1.0, nvme=6.5, storage=100.0, peer=50.0)
    p = checkpoint_io.price(state_bytes=6.5e12, ranks=16_384, hops=hops, mtbf_s=1800, restart_s=300)
    design = next(d for d in p.designs if d.name == "async")
    assert design.interval_s == pytest.approx(65.0)
    assert design.overhead == pytest.approx(0.396728515625 / 65)
    assert design.limit == "storage"
    assert p.chosen is design


def test_the_front_is_the_advisors_pareto_front_of_the_designs_write_costs():
    p = checkpoint_io.price(state_bytes=1.13e12, ranks=2048, hops=DEFAULTS, mtbf_s=86_400, restart_s=600)
    expected = advisor.pareto_front(write_costs_s=[0.565, 0.01103515625], mtbf_s=86_400, restart_s=600)
    assert [round(point.delta_s, 9) for point in p.front] == [round(point.delta_s, 9) for point in expected]
    assert len(p.front) == 2  # the three designs that copy to host memory block alike: one point


@pytest.mark.parametrize("field", ["gpu_host", "nvme", "storage", "peer"])
def test_a_hop_without_bandwidth_is_refused_by_name(field):
    hops = Hops(**{**{"gpu_host": 1.0, "nvme": 1.0, "storage": 1.0, "peer": 1.0}, field: 0.0})
    with pytest.raises(ValueError, match=field):
        checkpoint_io.price(state_bytes=1e9, ranks=8, hops=hops, mtbf_s=3600, restart_s=0)


def test_storage_the_fleets_writes_would_saturate_is_said():
    p = checkpoint_io.price(state_bytes=1.13e12, ranks=2048, hops=DEFAULTS, mtbf_s=86_400, restart_s=600)
    # Asynchronous writes every 43.7 s put 1,130 / 43.66 = 25.9 GB/s on storage: beside 1,980 GB/s of other runs,
    # over 2,000; synchronous ones (3.62 GB/s) are not.
    notes = checkpoint_io.storage_notes(p, others_gb_s=1980.0)
    assert [note.code for note in notes] == ["storage_saturated"]
    assert "Asynchronous sharded" in notes[0].text
    assert checkpoint_io.storage_notes(p, others_gb_s=0.0) == ()


T = datetime(2026, 3, 1, tzinfo=UTC)


def _write(step, minute, *, blocking=2.0, drain=0.0, bytes_=8 * 10**9, tier="durable", status="completed"):
    """A write as the record keeps it: a durable-tier write durable at its completion unless `drain` says later;
    a memory or local one (drain=None) never durable."""
    drain = None if tier != "durable" else drain
    started = T + timedelta(minutes=minute)
    done = started + timedelta(seconds=blocking)
    durable = done + timedelta(seconds=drain) if drain is not None else None
    return WriteRow(step, status, tier, started, done, durable, blocking, bytes_)


def test_it_measures_bytes_per_rank_bandwidth_and_drain():
    rows = [_write(s, 10 * s, drain=30.0) for s in range(1, 4)]
    record = checkpoint_io.measure(rows, ranks=16, interval_s=600.0)
    # 8 GB over 16 ranks: 0.5 GB a rank; blocked 2 s: 0.25 GB/s a rank.
    assert record.bytes_per_rank == 5e8
    assert record.bandwidth_gb_s == pytest.approx(0.25)
    assert record.drain_s == 30.0 and record.drains_over_interval == ()
    assert record.warnings == () and record.findings == ()


def test_a_drain_longer_than_the_interval_is_a_warning_naming_its_steps():
    rows = [_write(1, 0, drain=30.0), _write(2, 10, drain=900.0), _write(3, 20, drain=30.0)]
    record = checkpoint_io.measure(rows, ranks=16, interval_s=600.0)
    assert record.drains_over_interval == (2,)
    (warning,) = record.warnings
    assert warning.code == "drain_behind" and warning.steps == (2,)
    assert "real rewind point is older" in warning.text


def test_without_a_policy_the_interval_is_the_median_gap_between_writes():
    rows = [_write(1, 0, drain=700.0), _write(2, 10, drain=1.0), _write(3, 20, drain=1.0)]
    record = checkpoint_io.measure(rows, ranks=16)
    assert (record.interval_s, record.interval_source) == (600.0, "record")
    assert record.drains_over_interval == (1,)


def test_blocking_that_grows_over_the_run_is_a_warning():
    rows = [_write(s, s, blocking=2.0 if s <= 3 else 2.5 if s <= 6 else 3.0) for s in range(1, 10)]
    record = checkpoint_io.measure(rows, ranks=16, interval_s=60.0)
    assert record.trend == (2.0, 3.0)  # first third's median, last third's: 1.5 x
    assert [w.code for w in record.warnings] == ["blocking_grows"]
    steady = checkpoint_io.measure([_write(s, s) for s in range(1, 10)], ranks=16, interval_s=60.0)
    assert steady.warnings == ()


def test_failed_lost_and_never_durable_writes_are_counted_and_said():
    rows = [
        _write(1, 0, drain=10.0),
        _write(2, 10, status="failed"),
        WriteRow(3, "started", "", T + timedelta(minutes=20), None, None, None, None),  # a later write began: lost
        _write(4, 30, tier="memory"),
        WriteRow(5, "started", "", T + timedelta(minutes=40), None, None, None, None),  # in flight
    ]
    record = checkpoint_io.measure(rows, ranks=8, interval_s=600.0)
    assert (record.completed, record.failed, record.lost, record.never_durable) == (2, 1, 1, 1)
    assert {w.code: w.steps for w in record.warnings} == {"failed": (2,), "lost": (3,), "never_durable": (4,)}
    assert record.last_durable_step == 1


def test_inconsistent_data_is_named_beside_the_figures_never_dropped_silently():
    early = _write(2, 10)
    early = WriteRow(2, "completed", "durable", early.started_at, early.completed_at, early.started_at, 2.0, 8 * 10**9)
    rows = [_write(1, 0, drain=5.0), early, _write(3, 20, bytes_=0, drain=5.0), _write(4, 30, blocking=0.0, drain=5.0)]
    record = checkpoint_io.measure(rows, ranks=16, interval_s=600.0)
    findings = {note.code: note.steps for note in record.findings}
    assert findings == {"bytes_missing": (3,), "no_blocking": (4,), "durable_before_completion": (2,)}
    assert record.drain_s == 5.0  # the early one left out of the drains, and said
    assert record.completed == 4
    assert math.isclose(record.bytes, 8e9)


def test_writes_far_slower_than_the_priced_hops_are_said_with_the_bandwidth_they_imply():
    """The demo's case: 1.12 TB written synchronously by 256 ranks, blocking 35 s (drained in no time), priced on the
    default 2,000 GB/s storage."""
    rows = [_write(s, 30 * s, blocking=35.0, bytes_=1.12e12, drain=0.0) for s in range(1, 4)]
    record = checkpoint_io.measure(rows, ranks=256, interval_s=1800.0)
    # 1.12e12 / 256 = 4.375 GB a rank, in 35 s: 0.125 GB/s a rank.
    assert record.bandwidth_gb_s == pytest.approx(0.125)
    p = checkpoint_io.price(state_bytes=1.12e12, ranks=256, hops=DEFAULTS, mtbf_s=86_400, restart_s=600)
    # Synchronous at the defaults: storage's share 2,000 / 256 = 7.8125 GB/s a rank (GPU to host: 50), 0.56 s.
    (note,) = checkpoint_io.model_notes(record, p)
    assert note.code == "hops_disagree"
    assert "0.125 GB/s a rank" in note.text and "7.812 GB/s a rank: 62.5x faster" in note.text
    assert "host to shared storage" in note.text and "imply 32.0 GB/s" in note.text  # 0.125 x 256
    # Writes as fast as the model (within 2x) say nothing.
    quick = [_write(s, 30 * s, blocking=1.0, bytes_=1.12e12, drain=0.0) for s in range(1, 4)]
    assert checkpoint_io.model_notes(checkpoint_io.measure(quick, ranks=256, interval_s=1800.0), p) == ()
