"""Detectors (incidents/domain/detectors/): docs/DOMAIN.md section 4 signals as plain-data cases."""

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incidents.domain.detectors import (
    Finding,
    gpu_ecc,
    gpu_health,
    hang,
    heartbeat_lost,
    lemons,
    node_state,
    silent_data_corruption,
    stragglers,
    xids,
)
from incidents.domain.xid import Action, XidSample, dedupe_xids

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def assert_json_safe(finding: Finding) -> None:
    json.dumps(finding.evidence, allow_nan=False)
    assert finding.severity in ("critical", "error", "warning", "info")
    assert finding.explanation.endswith(".")


# -- Xids ----------------------------------------------------------------------------------------------------


def test_it_turns_a_storm_into_one_finding_with_the_count():
    storm = [XidSample(ago(100 - i * 0.001), "gpu-003", 3, 79, "GPU has fallen off the bus") for i in range(5_000)]
    [finding] = xids(dedupe_xids(storm, window_s=60))
    assert finding.fingerprint == "xid:gpu-003:3:79"
    assert (finding.count, finding.severity, finding.recommended_action) == (5_000, "critical", "reboot node, drain")
    assert "5,000 times" in finding.explanation
    assert "reboot node, drain" in finding.explanation
    assert_json_safe(finding)


def test_it_adds_separate_bursts_under_one_fingerprint():
    samples = [XidSample(ago(s), "gpu-003", 3, 48) for s in (3_000, 2_999, 10)]
    [finding] = xids(dedupe_xids(samples, window_s=60))
    assert finding.count == 3
    assert [b["count"] for b in finding.evidence["bursts"]] == [2, 1]
    assert finding.action is Action.RESET_GPU


def test_it_escalates_xid_43_only_when_repeated():
    once = xids(dedupe_xids([XidSample(ago(0), "n1", 0, 43)], window_s=60))
    assert (once[0].severity, once[0].action) == ("info", Action.NONE)
    repeated = [XidSample(ago(s), "n1", 0, 43) for s in (7_200, 3_600, 0)]  # three separate bursts
    [finding] = xids(dedupe_xids(repeated, window_s=60), repeated_after=3)
    assert (finding.severity, finding.action) == ("warning", Action.DRAIN_INVESTIGATE)
    assert "repeated in 3 separate bursts" in finding.explanation


def test_it_drains_and_rmas_a_double_bit_error_whose_remap_failed():
    faults = dedupe_xids([XidSample(ago(5), "n1", 2, 48), XidSample(ago(4), "n1", 2, 64)], window_s=60)
    by_xid = {f.evidence["xid"]: f for f in xids(faults)}
    assert (by_xid[48].severity, by_xid[48].action) == ("critical", Action.DRAIN_RMA)
    alone = xids(dedupe_xids([XidSample(ago(5), "n1", 2, 48)], window_s=60))
    assert alone[0].action is Action.RESET_GPU


# -- hangs ---------------------------------------------------------------------------------------------------


def test_it_finds_a_hang_past_k_times_the_usual_step():
    # usual 2 s, k = 10: threshold 20 s beats the 15 s floor; 25 s of silence is a hang, 19 s is not.
    args = dict(run="run-a", started_at=ago(3_600), step_intervals_s=[2.0, 2.0, 1.0, 3.0, 2.0], k=10, floor_s=15)
    assert hang(last_step_at=ago(19), now=NOW, **args) is None
    finding = hang(last_step_at=ago(25), now=NOW, **args)
    assert finding.fingerprint == "hang:run-a"
    assert finding.evidence["threshold_s"] == 20
    assert finding.evidence["usual_interval_s"] == 2
    assert "25 s" in finding.explanation and "max(10 x 2 s, floor 15 s) = 20 s" in finding.explanation
    assert_json_safe(finding)


def test_it_uses_the_floor_when_steps_are_fast():
    # usual 1 s x k 10 = 10 s, below the 300 s floor: 200 s of silence is still fine.
    args = dict(run="run-a", started_at=ago(3_600), step_intervals_s=[1.0] * 20, k=10, floor_s=300)
    assert hang(last_step_at=ago(200), now=NOW, **args) is None
    finding = hang(last_step_at=ago(301), now=NOW, **args)
    assert finding.evidence["threshold_s"] == 300


def test_it_measures_a_run_without_steps_from_its_start():
    args = dict(run="run-b", last_step_at=None, step_intervals_s=[], k=10, floor_s=600)
    assert hang(started_at=ago(500), now=NOW, **args) is None
    finding = hang(started_at=ago(1_500), now=NOW, **args)
    assert finding.evidence["silence_s"] == 1_500
    assert finding.evidence["usual_interval_s"] is None
    assert "after it started" in finding.explanation
    assert "floor of 10.0 min" in finding.explanation


def test_it_ignores_broken_intervals():
    finding = hang(
        run="r",
        last_step_at=ago(50),
        started_at=ago(900),
        step_intervals_s=[math.nan, -1.0, 4.0],
        now=NOW,
        k=10,
        floor_s=1,
    )
    assert finding.evidence["usual_interval_s"] == 4


# -- nodes ---------------------------------------------------------------------------------------------------


def test_it_loses_a_heartbeat_only_after_the_timeout():
    assert heartbeat_lost(node="gpu-003", last_heartbeat_at=ago(60), now=NOW, timeout_s=120) is None
    assert heartbeat_lost(node="gpu-003", last_heartbeat_at=None, now=NOW, timeout_s=120) is None
    finding = heartbeat_lost(node="gpu-003", last_heartbeat_at=ago(300), now=NOW, timeout_s=120)
    assert (finding.fingerprint, finding.node) == ("heartbeat:gpu-003", "gpu-003")
    assert "5.0 min" in finding.explanation


@pytest.mark.parametrize("state", ["draining", "cordoned"])
def test_it_warns_when_the_scheduler_takes_a_node_out(state):
    finding = node_state(node="gpu-003", state=state, reason="Kill task failed")
    assert finding.severity == "warning"
    assert finding.summary == "node drained by the scheduler: Kill task failed"
    assert state in finding.explanation


@pytest.mark.parametrize("state", ["in_service", "in_repair", "burn_in", "hot_spare", "suspect", "retired"])
def test_it_ignores_other_node_states(state):
    assert node_state(node="gpu-003", state=state, reason="x") is None


# -- GPU readings --------------------------------------------------------------------------------------------


def ecc(**overrides):
    args = dict(
        node="gpu-003",
        gpu=3,
        uncorrected_delta=0,
        remapped_rows_failure=False,
        remapped_rows_pending=False,
        retired_pages=0,
        retired_pages_threshold=60,
    )
    return {f.fingerprint: f for f in gpu_ecc(**(args | overrides))}


def test_it_reads_ecc_signals():
    assert ecc() == {}
    assert ecc(uncorrected_delta=2)["ecc:gpu-003:3:double_bit"].severity == "error"
    failure = ecc(remapped_rows_failure=True)["ecc:gpu-003:3:remap_failure"]
    assert (failure.severity, failure.recommended_action) == ("critical", "drain and RMA")
    pending = ecc(remapped_rows_pending=True)["ecc:gpu-003:3:remap_pending"]
    assert (pending.severity, pending.action) == ("warning", Action.RESET_GPU)
    assert "next opportunity" in pending.explanation
    assert "ecc:gpu-003:3:retired_pages" not in ecc(retired_pages=59)
    assert ecc(retired_pages=60)["ecc:gpu-003:3:retired_pages"].severity == "error"


def health(**overrides):
    args = dict(
        node="gpu-003",
        gpu=3,
        recovery_action=0,
        temperature_c=70.0,
        slowdown_c=90.0,
        throttle_reasons=[],
        nvlink_errors_delta=0,
    )
    return {f.fingerprint.rsplit(":", 1)[1]: f for f in gpu_health(**(args | overrides))}


def test_it_reads_the_drivers_recovery_action():
    assert health() == {}
    finding = health(recovery_action=2)["recovery_action"]
    assert (finding.severity, finding.recommended_action) == ("critical", "reboot node, drain")
    assert "node reboot" in finding.explanation
    assert health(recovery_action=1)["recovery_action"].action is Action.RESET_GPU
    assert health(recovery_action=4)["recovery_action"].action is Action.DRAIN_RMA


def test_it_reads_heat_throttling_and_nvlink():
    assert "thermal" not in health(temperature_c=89.9)
    assert health(temperature_c=90.0)["thermal"].severity == "warning"
    assert health(throttle_reasons=["gpu_idle", "sw_power_cap"]) == {}
    throttled = health(throttle_reasons=["HwThermalSlowdown", "gpu_idle"])["throttle"]
    assert throttled.evidence["throttle_reasons"] == ["HwThermalSlowdown"]
    assert health(nvlink_errors_delta=5)["nvlink"].evidence["nvlink_errors_delta"] == 5


# -- stragglers ----------------------------------------------------------------------------------------------


def window(slow: float | None = None, *, ranks: int = 16, base: float = 1.31) -> dict[tuple[int, str], float]:
    """16 ranks on 2 ranks per node with a little spread; rank 5 on gpu-002 takes `slow` seconds if given."""
    times = {(r, f"gpu-{r // 2:03d}"): base + 0.01 * ((r * 7) % 5 - 2) for r in range(ranks)}
    if slow is not None:
        times[(5, "gpu-002")] = slow
    return times


def test_it_flags_a_straggler_only_after_n_consecutive_windows():
    args = dict(run="run-a", threshold_mads=4.0, consecutive=3)
    assert stragglers(windows=[window(1.92), window(1.92)], **args) == []
    assert stragglers(windows=[window(1.92), window(), window(1.92), window(1.92)], **args) == []
    [finding] = stragglers(windows=[window(), window(1.92), window(1.92), window(1.92)], **args)
    assert finding.fingerprint == "straggler:run-a:gpu-002"
    assert (finding.node, finding.run, finding.severity) == ("gpu-002", "run-a", "warning")
    assert finding.explanation.startswith("rank 5 on gpu-002 was ")
    assert "(1.92 s vs 1.31 s)" in finding.explanation and "3 consecutive windows" in finding.explanation
    assert_json_safe(finding)


def test_it_keeps_the_evidence_per_window():
    [finding] = stragglers(windows=[window(1.92), window(2.0)], run="run-a", threshold_mads=4.0, consecutive=2)
    first, second = finding.evidence["windows"]
    assert (first["rank"], first["seconds"], second["seconds"]) == (5, 1.92, 2.0)
    assert first["median_s"] == pytest.approx(1.31)
    # the ranks' median absolute deviation is 0.01 s, x 1.4826 = 0.0148 s, above the floor of 1% of the median
    assert first["mad_s"] == pytest.approx(0.0148, abs=1e-4)
    assert first["score"] == pytest.approx((1.92 - 1.31) / 0.0148, rel=0.01)
    assert finding.evidence["threshold_mads"] == 4


def test_it_leaves_a_nan_rank_out_of_the_statistics():
    windows = [window(1.92) | {(0, "gpu-000"): math.nan} for _ in range(3)]
    [finding] = stragglers(windows=windows, run="run-a", threshold_mads=4.0, consecutive=3)
    assert finding.node == "gpu-002"
    assert finding.evidence["windows"][0]["median_s"] == pytest.approx(1.31)
    assert_json_safe(finding)


def test_it_guards_a_zero_mad_with_a_relative_floor():
    same = {(r, f"n{r}"): 1.0 for r in range(8)}
    # every rank identical: MAD is 0, and 0.5% slower must not be "infinitely many MADs" slower
    barely = [same | {(7, "n7"): 1.005}] * 2
    assert stragglers(windows=barely, run="r", threshold_mads=3.0, consecutive=2) == []
    clearly = [same | {(7, "n7"): 1.2}] * 2
    [finding] = stragglers(windows=clearly, run="r", threshold_mads=3.0, consecutive=2)
    assert finding.evidence["windows"][0]["mad_s"] == 0
    assert finding.evidence["windows"][0]["score"] == pytest.approx(20.0)  # 0.2 s over a floor of 0.01 s


def test_it_needs_enough_ranks_to_judge():
    few = [{(0, "a"): 1.0, (1, "b"): 1.0, (2, "c"): 9.0}] * 3
    assert stragglers(windows=few, run="r", threshold_mads=3.0, consecutive=3) == []


def test_it_never_calls_a_fast_rank_a_straggler():
    assert stragglers(windows=[window(0.5)] * 3, run="r", threshold_mads=3.0, consecutive=3) == []


# -- silent data corruption ----------------------------------------------------------------------------------


def grad_step(bad: float | None = None, *, replicas: int = 8, norm: float = 3.1) -> dict[tuple[int, str], float]:
    step = {(r, f"gpu-{r:03d}"): norm * (1 + 0.0001 * r) for r in range(replicas)}
    if bad is not None:
        step[(5, "gpu-005")] = bad
    return step


def test_it_isolates_the_host_that_keeps_disagreeing():
    steps = [grad_step(12.7), grad_step(), grad_step(12.9), grad_step(11.0)]
    [finding] = silent_data_corruption(steps=steps, rel_tolerance=0.01, repeats=3)
    assert (finding.fingerprint, finding.node, finding.severity) == ("sdc:gpu-005", "gpu-005", "critical")
    assert finding.count == 3
    assert [s["step_index"] for s in finding.evidence["steps"]] == [0, 2, 3]
    assert "3 of 4 steps" in finding.explanation
    assert_json_safe(finding)


def test_it_needs_repeats_before_blaming_a_host():
    steps = [grad_step(12.7), grad_step(), grad_step(), grad_step()]
    assert silent_data_corruption(steps=steps, rel_tolerance=0.01, repeats=2) == []


def test_it_counts_nan_and_infinity_as_disagreeing():
    steps = [grad_step(math.nan), grad_step(math.inf)]
    [finding] = silent_data_corruption(steps=steps, rel_tolerance=0.5, repeats=2)
    assert [s["value"] for s in finding.evidence["steps"]] == ["nan", "inf"]
    assert_json_safe(finding)


def test_it_blames_no_host_when_the_whole_model_diverged():
    steps = [{(r, f"gpu-{r:03d}"): math.nan for r in range(8)}] * 3
    assert silent_data_corruption(steps=steps, rel_tolerance=0.01, repeats=1) == []


def test_it_tolerates_small_differences():
    assert silent_data_corruption(steps=[grad_step(3.12)] * 5, rel_tolerance=0.01, repeats=1) == []


@settings(max_examples=100, deadline=None)
@given(
    norm=st.floats(1e-3, 1e3),
    bad_factor=st.floats(1.5, 100),
    replicas=st.integers(3, 32),
    repeats=st.integers(1, 5),
)
def test_it_finds_exactly_the_bad_host_wherever_the_scale(norm, bad_factor, replicas, repeats):
    steps = [{(r, f"h{r}"): (norm * bad_factor if r == 0 else norm) for r in range(replicas)}] * repeats
    findings = silent_data_corruption(steps=steps, rel_tolerance=0.05, repeats=repeats)
    assert [f.node for f in findings] == ["h0"]


# -- lemons --------------------------------------------------------------------------------------------------

WEEK = 7 * 86_400


def test_it_finds_lemons_inside_the_window_only():
    interruptions = [
        ("gpu-003", ago(3_600)),
        ("gpu-003", ago(86_400)),
        ("gpu-003", ago(WEEK - 1)),
        ("gpu-004", ago(3_600)),
        ("gpu-004", ago(86_400)),
        ("gpu-004", ago(WEEK + 1)),  # outside the week
        ("gpu-004", NOW + timedelta(minutes=5)),  # after now
    ]
    [finding] = lemons(interruptions=interruptions, now=NOW, window_s=WEEK, threshold=3)
    assert (finding.fingerprint, finding.count) == ("lemon:gpu-003", 3)
    assert "3 interruptions in the last 7.0 days (threshold 3)" in finding.explanation
    assert len(finding.evidence["fault_at"]) == 3
    assert_json_safe(finding)
    assert lemons(interruptions=interruptions, now=NOW, window_s=WEEK, threshold=4) == []
