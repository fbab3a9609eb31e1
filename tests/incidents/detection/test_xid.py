"""The Xid table and storm dedupe (incidents/domain/xid.py): docs/DOMAIN.md section 4."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incidents.domain.xid import (
    XIDS,
    Action,
    XidSample,
    classify,
    dedupe_xids,
    recovery_action_from_message,
    recovery_action_info,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_it_recommends_reboot_node_drain_for_xid_79():
    info = classify(79)
    assert info.action is Action.REBOOT_NODE
    assert info.recommended == "reboot node, drain"
    assert info.severity == "critical"
    assert info.meaning == "GPU has fallen off the bus"


@pytest.mark.parametrize(
    ("xid", "action", "label"),
    [
        (13, Action.RESTART_JOB, "restart job"),
        (31, Action.RESTART_JOB, "restart job"),
        (43, Action.NONE, "none"),
        (45, Action.NONE, "none"),
        (48, Action.RESET_GPU, "reset GPU"),
        (62, Action.RESET_GPU, "reset GPU"),
        (63, Action.NONE, "none"),
        (64, Action.DRAIN_RMA, "drain and RMA"),
        (74, Action.DRAIN_INVESTIGATE, "drain, investigate"),
        (92, Action.WATCH, "watch"),
        (94, Action.RESTART_JOB, "restart job"),
        (95, Action.RESET_GPU, "reset GPU"),
        (109, Action.RESET_GPU, "reset GPU"),
        (119, Action.RESET_GPU, "reset GPU"),
        (120, Action.RESET_GPU, "reset GPU"),
        (140, Action.RESET_GPU, "reset GPU"),
    ],
)
def test_it_follows_the_catalog(xid, action, label):
    assert classify(xid).action is action
    assert classify(xid).recommended == label


def test_it_covers_the_xids_of_domain_md():
    assert {13, 31, 43, 45, 48, 62, 63, 64, 74, 79, 92, 94, 95, 109, 119, 120, 140, 154} <= set(XIDS)
    assert {info.severity for info in XIDS.values()} <= {"critical", "error", "warning", "info"}
    assert all(code == info.code for code, info in XIDS.items())


def test_it_stores_action_values_and_shows_labels():
    assert [a.value for a in Action] == [
        "none",
        "restart_job",
        "reset_gpu",
        "reboot_node",
        "drain_rma",
        "drain_investigate",
        "watch",
    ]
    assert Action("drain_rma").label == "drain and RMA"


@pytest.mark.parametrize(
    ("recovery", "action", "severity"),
    [
        (0, Action.NONE, "info"),
        (1, Action.RESET_GPU, "error"),
        (2, Action.REBOOT_NODE, "critical"),
        (3, Action.DRAIN_INVESTIGATE, "critical"),
        (4, Action.DRAIN_RMA, "critical"),
    ],
)
def test_it_takes_xid_154s_action_from_the_recovery_action(recovery, action, severity):
    info = classify(154, recovery_action=recovery)
    assert (info.action, info.severity) == (action, severity)
    assert recovery_action_info(recovery) is action


def test_it_watches_xid_154_without_a_recovery_action():
    assert classify(154).action is Action.WATCH
    assert classify(154, recovery_action=9).action is Action.WATCH
    assert recovery_action_info(9) is Action.WATCH


def test_it_calls_an_unknown_xid_unknown():
    info = classify(999)
    assert (info.code, info.meaning, info.severity, info.action) == (999, "unknown Xid 999", "warning", Action.WATCH)


def test_it_reads_the_recovery_action_from_an_xid_154_line():
    line = "NVRM: Xid (PCI:0000:1b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    assert recovery_action_from_message(line) == 2
    assert recovery_action_from_message("GPU has fallen off the bus") is None
    faults = dedupe_xids([XidSample(T0, "gpu-003", 3, 154, line)], window_s=60)
    assert faults[0].info.action is Action.REBOOT_NODE


def test_it_dedupes_a_storm_of_100000_samples_into_one_fault():
    storm = [XidSample(at(i * 0.001), "gpu-003", 3, 79, "GPU has fallen off the bus") for i in range(100_000)]
    random.Random(7).shuffle(storm)  # events arrive out of order
    faults = dedupe_xids(storm, window_s=60)
    assert len(faults) == 1
    fault = faults[0]
    assert (fault.node, fault.gpu, fault.xid, fault.count) == ("gpu-003", 3, 79, 100_000)
    assert (fault.first_at, fault.last_at) == (at(0), at(99.999))
    assert fault.info.recommended == "reboot node, drain"


def test_it_starts_a_new_fault_after_a_gap_longer_than_the_window():
    samples = [XidSample(at(s), "gpu-003", 3, 48) for s in (0, 30, 60, 121, 150)]
    faults = dedupe_xids(samples, window_s=60)
    assert [(f.first_at, f.last_at, f.count) for f in faults] == [(at(0), at(60), 3), (at(121), at(150), 2)]


def test_it_keeps_a_gap_of_exactly_the_window_in_one_fault():
    faults = dedupe_xids([XidSample(at(0), "n", 0, 48), XidSample(at(60), "n", 0, 48)], window_s=60)
    assert [f.count for f in faults] == [2]


def test_it_keeps_different_gpus_and_xids_apart_and_orders_by_first_seen():
    samples = [
        XidSample(at(5), "gpu-003", 3, 79),
        XidSample(at(0), "gpu-003", 3, 45),
        XidSample(at(1), "gpu-003", 4, 79),
        XidSample(at(2), "gpu-004", 3, 79),
        XidSample(at(6), "gpu-003", 3, 79),
    ]
    faults = dedupe_xids(reversed(samples), window_s=60)
    assert [(f.node, f.gpu, f.xid, f.count) for f in faults] == [
        ("gpu-003", 3, 45, 1),
        ("gpu-003", 4, 79, 1),
        ("gpu-004", 3, 79, 1),
        ("gpu-003", 3, 79, 2),
    ]


def test_it_refuses_a_negative_window():
    with pytest.raises(ValueError):
        dedupe_xids([], window_s=-1)


samples = st.lists(
    st.builds(
        XidSample,
        time=st.integers(0, 3_600).map(at),
        node=st.sampled_from(["gpu-001", "gpu-002"]),
        gpu=st.integers(0, 1),
        xid=st.sampled_from([48, 79, 154]),
        message=st.just(""),
        recovery_action=st.one_of(st.none(), st.integers(0, 4)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(samples=samples, window_s=st.integers(0, 600))
def test_it_conserves_every_sample_and_splits_only_at_gaps(samples, window_s):
    faults = dedupe_xids(samples, window_s=window_s)
    assert sum(f.count for f in faults) == len(samples)
    window = timedelta(seconds=window_s)
    by_key: dict = {}
    for fault in faults:
        by_key.setdefault((fault.node, fault.gpu, fault.xid), []).append(fault)
        # No sample of the same kind fell between faults without being counted in one of them.
        inside = [s for s in samples if (s.node, s.gpu, s.xid) == (fault.node, fault.gpu, fault.xid)]
        assert fault.count == sum(fault.first_at <= s.time <= fault.last_at for s in inside)
    for same in by_key.values():
        same.sort(key=lambda f: f.first_at)
        for before, after in zip(same, same[1:], strict=False):
            assert after.first_at - before.last_at > window


def test_a_folded_count_is_a_weight_never_expanded():
    """An agent folds a storm into one event with its count (up to 1,000,000): the fault counts it as that many."""
    storm = [XidSample(at(0), "gpu-003", 3, 79, count=1_000_000), XidSample(at(10), "gpu-003", 3, 79, count=5)]
    (fault,) = dedupe_xids(storm, window_s=60)
    assert (fault.count, fault.first_at, fault.last_at) == (1_000_005, at(0), at(10))
