"""Levers (runs/domain/levers.py, docs/DOMAIN.md section 3 "Levers"): each fix re-run through the goodput engine on
the counterfactual timeline it implies, checked against the simulation of the same seed with the fix applied."""

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from runs import selectors
from runs.domain import goodput, levers
from runs.domain.goodput import CheckpointSpan, InterruptionSpan, RunTimeline
from runs.domain.simulator import (
    LLAMA3_RATE_PER_GPU_HOUR,
    SimulationConfig,
    fault_hazard_per_s,
    simulate_timeline,
)
from runs.models import Run

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def whole(timeline: RunTimeline, now: datetime) -> goodput.Breakdown:
    return goodput.breakdown(timeline, since=timeline.started_at, until=timeline.end(now), now=now)


# --- the record the levers read is the simulator's truth ---------------------------------------------------


def test_the_record_built_from_the_stream_is_the_simulators_own_timeline(db, django_capture_on_commit_callbacks):
    """What the levers and their check rest on: the intake's record of a simulated stream gives the engine the same
    breakdown, to the microsecond, as the simulator's own account of what happened (simulate_timeline)."""
    config = SimulationConfig(gpus=64, days=2, rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * 150, planned_stops=1)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("simulate", "--gpus", "64", "--days", "2", "--rate", str(config.rate_per_gpu_hour),
                     "--planned", "1", "--start", config.start.isoformat(), "--apply",
                     stdout=open("/dev/null", "w"))  # fmt: skip
    record = selectors.run_timeline_get(run=Run.objects.get(name=config.run))
    truth = simulate_timeline(config)
    assert len(record.interruptions) == len(truth.interruptions) >= 5
    now = config.end
    assert whole(record, now) == whole(truth, now)
    assert goodput.interruption_costs(record, now=now) == goodput.interruption_costs(truth, now=now)


# --- the named check: each lever against the simulation with its fix -------------------------------------


@pytest.fixture(scope="module")
def llama3():
    """The 54-day, 16,384-GPU simulated run (seed 1), its truth and each lever at the record's own targets."""
    config = SimulationConfig()
    timeline = simulate_timeline(config)
    mtbf_s = 3600 / (config.gpus * config.rate_per_gpu_hour)
    targets = levers.default_targets(timeline, detection_s=60, async_blocking_s=20, mtbf_s=mtbf_s)
    # The simulator starts a write at its first whole minute of training past the interval: a whole-minute interval
    # makes that rounding nothing.
    targets = dataclasses.replace(targets, interval_s=math.ceil(targets.interval_s / 60) * 60)
    report = levers.levers(timeline, now=config.end, targets=targets, mtbf_s=mtbf_s, usd_per_gpu_hour=2.5)
    return config, timeline, targets, report


def fixed(config: SimulationConfig, timeline: RunTimeline, lever: levers.Lever) -> SimulationConfig:
    """The same seed with the lever's fix applied, and the same fault process: faults strike at the same hazard per
    second of training (the simulator otherwise derives it from the wall-clock rate, which a fix would change)."""
    target = lever.target_s
    capped = {
        "detection": {
            "detection_crash": dataclasses.replace(config.detection_crash, cap=target),
            "detection_hang": dataclasses.replace(config.detection_hang, cap=target),
        },
        # Automated rescheduling onto a ready spare: a spare is always there, and the requeue takes the target.
        "rescheduling": {
            "rescheduling": dataclasses.replace(config.rescheduling, cap=target),
            "spare_nodes": config.nodes,
        },
        "reload": {"reload": dataclasses.replace(config.reload, cap=target)},
        "checkpoint": {"checkpoint_blocking": dataclasses.replace(config.checkpoint_blocking, cap=target)},
        "interval": {"checkpoint_interval_s": target},
        "lemons": {"faults_avoided": lever.affected / sum(not s.planned for s in timeline.interruptions)},
    }[lever.name]
    return dataclasses.replace(config, hazard_per_s=fault_hazard_per_s(config), **capped)


def test_each_levers_goodput_is_the_simulation_of_the_same_seed_with_its_fix_within_half_a_point(llama3):
    config, timeline, targets, report = llama3
    assert [lever.name for lever in report.levers] != [] and len(report.levers) == len(levers.LEVERS)
    for lever in report.levers:
        counterfactual, _ = levers.apply(lever.name, timeline, now=config.end, target_s=lever.target_s)
        with_fix = fixed(config, timeline, lever)
        # Over the same span: a fix that shortens the stops does the run's work in less time, and the simulation
        # over that span has done the same work (the same faults at the same training times).
        span = counterfactual.end(config.end) - counterfactual.started_at
        simulated = simulate_timeline(with_fix)
        expected = goodput.breakdown(simulated, since=config.start, until=config.start + span, now=with_fix.end)
        assert lever.goodput == pytest.approx(expected.goodput, abs=0.005), lever.name
        assert lever.goodput > report.goodput and lever.returned_gpu_hours > 0, lever.name


def test_the_levers_are_sorted_by_return_and_priced_and_together_they_reach_further(llama3):
    config, _timeline, _targets, report = llama3
    returns = [lever.returned_gpu_hours for lever in report.levers]
    assert returns == sorted(returns, reverse=True)
    for lever in report.levers:
        assert lever.returned_usd == pytest.approx(lever.returned_gpu_hours * 2.5)
        assert lever.returned_gpu_hours <= report.lost_gpu_hours
    # All but fewer failures together return more than any one of them, and leave a floor above zero badput.
    together = report.together
    best_single = max(lever.goodput for lever in report.levers if lever.name != "lemons")
    assert best_single < together.goodput < 1


# --- the counterfactuals by hand ------------------------------------------------------------------------------


def two_stops() -> RunTimeline:
    """10 h on 8 GPUs: writes at 30 and 90 min blocking 60 s (durable a minute later); a crash at 100 min detected
    at 110, running at 130, training at 140 from the 90-minute write; a planned stop at 300 min after a save."""
    writes = (
        CheckpointSpan(1, at(30), 60.0, at(32)),
        CheckpointSpan(2, at(90), 60.0, at(92)),
        CheckpointSpan(3, at(290), 600.0, at(300)),
    )
    stops = (
        InterruptionSpan(at(100), at(110), at(130), at(140), 2, cause="faulty_gpu", node="n1"),
        InterruptionSpan(at(300), at(300), at(330), at(335), 3, planned=True, cause="planned_maintenance"),
    )
    return RunTimeline(T0, at(600), 8, stops, writes)


def test_a_stage_lever_cuts_the_time_it_saves_out_of_the_run():
    run = two_stops()
    faster, changed = levers.apply("detection", run, now=at(600), target_s=120)
    assert changed == 1  # the planned stop has no detection to shorten
    stop = faster.interruptions[0]
    assert stop.detected_at - stop.fault_at == timedelta(minutes=2)
    assert faster.ended_at == at(592) and faster.interruptions[1].fault_at == at(292)
    before, after = whole(run, at(600)), whole(faster, at(600))
    assert before.detection_s - after.detection_s == 8 * 60
    assert after.rewound_s == before.rewound_s and after.productive_s == before.productive_s


def test_the_reload_lever_shortens_every_stop_and_rescheduling_only_the_unplanned():
    run = two_stops()
    _, reloads = levers.apply("reload", run, now=at(600), target_s=60)
    _, requeues = levers.apply("rescheduling", run, now=at(600), target_s=60)
    assert (reloads, requeues) == (2, 1)


def test_lemon_nodes_lose_their_later_faults_and_the_time_to_training_again():
    stops = (
        InterruptionSpan(at(100), at(101), at(110), at(115), None, node="n1"),
        InterruptionSpan(at(200), at(201), at(210), at(215), None, node="n2"),
        InterruptionSpan(at(300), at(301), at(310), at(315), None, node="n1"),
        InterruptionSpan(at(400), at(401), at(410), at(415), None, node=None),
    )
    run = RunTimeline(T0, at(600), 8, stops, ())
    assert levers.lemon_repeats(run) == [2]
    fewer, removed = levers.apply("lemons", run, now=at(600), target_s=None)
    assert removed == 1 and len(fewer.interruptions) == 3
    assert fewer.ended_at == at(585) and fewer.interruptions[2].fault_at == at(385)


def test_faster_writes_keep_the_planned_save_and_start_later_writes_sooner():
    run = two_stops()
    faster, changed = levers.apply("checkpoint", run, now=at(600), target_s=20)
    assert changed == 2  # the planned stop's 10-minute save stays: the stop waits for it to be durable
    writes = sorted(faster.checkpoints, key=lambda c: c.started_at)
    assert [w.blocking_s for w in writes[:2]] == [20, 20]
    assert writes[1].started_at == at(90) - timedelta(seconds=40)  # the first write's saving, in training
    assert 600.0 in [w.blocking_s for w in writes]


def test_the_interval_lever_lays_the_writes_again_and_the_stops_restore_the_newest_durable():
    run = two_stops()
    relaid, count = levers.apply("interval", run, now=at(600), target_s=600)
    # Every 10 min of training, each blocking for the usual write's 60 s (the planned stop's 10-minute save left out
    # of that mean and kept where it was) and durable a minute after: 10, 21, 32 ... 98 min before the crash.
    starts = [c.started_at for c in relaid.checkpoints if c.blocking_s == 60.0]
    assert starts[:3] == [at(10), at(21), at(32)] and at(98) in starts
    assert any(c.blocking_s == 600.0 and c.started_at == at(290) for c in relaid.checkpoints)
    restored = {c.step: c for c in relaid.checkpoints}[relaid.interruptions[0].resumed_from_step]
    assert restored.started_at == at(98) and count > 20
    # The crash rewinds 1 min (from 99 to 100) instead of 9 (from 91).
    assert whole(relaid, at(600)).rewound_s < whole(run, at(600)).rewound_s


def test_a_run_with_nothing_to_fix_returns_nothing():
    run = RunTimeline(T0, at(600), 8, (), (CheckpointSpan(1, at(30), 10.0, at(31)),))
    report = levers.levers(run, now=at(600), targets=levers.Targets(blocking_s=20), mtbf_s=None, usd_per_gpu_hour=2)
    assert [(lever.name, lever.returned_gpu_hours) for lever in report.levers] == [("checkpoint", 0.0), ("lemons", 0.0)]


# --- one source: the API, the run page and the weekly report ---------------------------------------------------

TINY = SimulationConfig(gpus=64, days=2, rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * 150, planned_stops=1)


@pytest.fixture
def simulated(db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("simulate", "--gpus", "64", "--days", "2", "--rate", str(TINY.rate_per_gpu_hour),
                     "--planned", "1", "--start", TINY.start.isoformat(), "--apply",
                     stdout=open("/dev/null", "w"))  # fmt: skip
    return Run.objects.get(name=TINY.run)


def test_the_api_answers_each_lever_from_the_runs_record(reader, simulated):
    body = reader.get(f"/api/v1/runs/{TINY.run}/levers").json()
    assert body["sources"]["detection_s"] == "setting" and body["sources"]["rescheduling_s"] == "record"
    names = [row["lever"] for row in body["levers"]]
    assert set(names) == set(levers.LEVERS) - ({"interval"} if body["mtbf_s"] is None else set())
    returns = [row["returned_gpu_hours"] for row in body["levers"]]
    assert returns == sorted(returns, reverse=True)
    # The same figures as the engine on the simulator's own account of the run, at the targets the API states.
    truth = simulate_timeline(TINY)
    targets = levers.Targets(**{name: value for name, value in body["targets"].items()})
    expected = levers.levers(truth, now=TINY.end, targets=targets, mtbf_s=body["mtbf_s"], usd_per_gpu_hour=2.5)
    assert body["goodput"] == pytest.approx(expected.goodput, abs=1e-12)
    by_name = {lever.name: lever for lever in expected.levers}
    for row in body["levers"]:
        assert row["goodput"] == pytest.approx(by_name[row["lever"]].goodput, abs=1e-12), row["lever"]
    assert body["floor"] == pytest.approx(1 - body["together"]["goodput"])
    assert body["until"].startswith(TINY.end.isoformat()[:19].replace("+00:00", ""))


def test_a_target_can_be_overridden_and_a_bad_one_is_refused_naming_the_field(reader, simulated):
    body = reader.get(f"/api/v1/runs/{TINY.run}/levers?detection_s=1&lemons=false").json()
    assert body["targets"]["detection_s"] == 1 and body["sources"]["detection_s"] == "override"
    assert "lemons" not in [row["lever"] for row in body["levers"]]
    response = reader.get(f"/api/v1/runs/{TINY.run}/levers?reload_s=-5")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "reload_s"
    assert reader.get("/api/v1/runs/nope/levers").status_code == 404


def test_the_run_page_loads_the_levers_and_shows_the_apis_figures(oncall, reader, simulated):
    page = oncall.get(f"/runs/{TINY.run}").content.decode()
    assert f'hx-get="/runs/{TINY.run}/levers"' in page
    section = oncall.get(f"/runs/{TINY.run}/levers").content.decode()
    body = reader.get(f"/api/v1/runs/{TINY.run}/levers").json()
    top = body["levers"][0]
    assert f'id="lever-{top["lever"]}"' in section and top["label"] in section
    assert f"{top['goodput'] * 100:.1f}%" in section
    assert f"{body['floor'] * 100:.1f}%" in section.split('id="levers-floor"')[1]


def test_the_weekly_report_carries_each_runs_levers_from_the_same_source(reader, simulated):
    from incidents.reports.rendering import report_csv_rows
    from incidents.reports.selectors import report_build

    data = report_build(since=TINY.start, until=TINY.end, now=TINY.end)
    (row,) = data["levers"]
    body = reader.get(f"/api/v1/runs/{TINY.run}/levers").json()
    assert row["run"] == TINY.run and row["goodput"] == pytest.approx(body["goodput"])
    # The report weighs the record up to when it was made; the run ended before, so its figures are the API's.
    assert [(x["lever"], round(x["goodput"], 12)) for x in row["levers"]] == [
        (x["lever"], round(x["goodput"], 12)) for x in body["levers"]
    ]
    csv = [r for r in report_csv_rows(data) if r[0] == "levers"]
    assert ("levers", f"{TINY.run}:{body['levers'][0]['lever']}", "goodput", row["levers"][0]["goodput"]) in csv
