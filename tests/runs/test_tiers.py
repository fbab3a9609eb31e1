"""Two checkpoint tiers (runs/domain/tiers.py, docs/DOMAIN.md section 3 "Checkpoint tiers"): the model's best pair
of intervals against the simulator's, which simulates both tiers, from 1,024 to 131,072 GPUs."""

import dataclasses
import math

import pytest

from runs.domain import advisor, goodput, tiers
from runs.domain.simulator import LLAMA3_RATE_PER_GPU_HOUR, SimulationConfig, Triangular, simulate_timeline
from runs.domain.simulator import fault_hazard_per_s as hazard


def tiered(gpus: int, faults: int) -> SimulationConfig:
    """A run with automated restarts (minutes, not Llama 3's tens of minutes: at 131,072 GPUs a fault comes every
    22 minutes), host-memory copies blocking 3 s that a fault leaves usable 85% of the time, durable writes blocking
    30 s, long enough for about `faults` faults at Llama 3's rate per GPU. Faults keep one hazard per second of
    training whatever the intervals, so every configuration of the grid meets the same faults."""
    mtbf_h = 1 / (gpus * LLAMA3_RATE_PER_GPU_HOUR)
    config = SimulationConfig(
        gpus=gpus,
        days=faults * mtbf_h / 24,
        planned_stops=0,
        detection_crash=Triangular(5, 20, 60),
        detection_hang=Triangular(30, 60, 120),
        rescheduling=Triangular(60, 120, 240),
        reload=Triangular(120, 180, 300),
        fast_reload=Triangular(10, 20, 40),
        checkpoint_blocking=Triangular(20, 30, 40),
        checkpoint_drain=Triangular(30, 60, 90),
        fast_blocking=Triangular(2, 3, 4),
        fast_survives=0.85,
        # Intervals of a minute or two at 131,072 GPUs: checkpoints on a 10-second grain there.
        step_event_s=10.0 if gpus > 20_000 else 60.0,
    )
    return dataclasses.replace(config, hazard_per_s=hazard(config))


def waste(config: SimulationConfig, interval_s: float, every: int) -> float:
    run = dataclasses.replace(config, checkpoint_interval_s=interval_s, durable_every=every)
    timeline = simulate_timeline(run)
    return 1 - goodput.breakdown(timeline, since=run.start, until=run.end, now=run.end).goodput


@pytest.mark.parametrize("gpus, faults", [(1024, 200), (16_384, 300), (131_072, 2000)])
def test_the_models_best_pair_is_the_simulated_optimum_within_half_a_point(gpus, faults):
    config = tiered(gpus, faults)
    grain = config.step_event_s
    # What the record of a first run (a write every 30 grains, every 4th durable) says, as FleetOps would read it.
    first = dataclasses.replace(config, checkpoint_interval_s=30 * grain, durable_every=4)
    timeline = simulate_timeline(first)
    total = goodput.breakdown(timeline, since=first.start, until=first.end, now=first.end)
    record = tiers.measured(timeline)
    assert record.survive == pytest.approx(0.85, abs=0.06) and record.at_stake > 150
    mtbf_s = total.wall_clock_s / total.interruptions
    plan = tiers.tier_optimum(
        fast_s=record.fast_s,
        durable_s=record.durable_s,
        survive=record.survive,
        mtbf_s=mtbf_s,
        fast_restart_s=record.fast_restart_s,
        durable_restart_s=record.durable_restart_s,
    )
    # The simulator starts a write on its grain: the plan's interval rounded up to it.
    interval = max(grain, math.ceil(plan.fast_interval_s / grain) * grain)
    grid = {
        (max(grain, round(interval * f / grain) * grain), max(1, round(plan.every * g))): None
        for f in (0.5, 0.7, 1, 1.4, 2)
        for g in (0.5, 1, 2)
    }
    simulated = {point: waste(config, *point) for point in grid}
    at_plan = simulated[(interval, plan.every)]
    best = min(simulated.values())
    assert at_plan - best <= 0.005, (plan, at_plan, best)
    # And the model's expected waste is the simulation's within a point and a half (31.5% at 131,072 GPUs).
    assert plan.waste == pytest.approx(at_plan, abs=0.015)
    # Two tiers beat the best one-tier plan (every write durable, at its best interval).
    one, _ = advisor.optimum(delta_s=record.durable_s, mtbf_s=mtbf_s, restart_s=record.durable_restart_s)
    assert at_plan < waste(config, max(grain, round(one / grain) * grain), 1)


def test_one_tier_is_the_case_of_every_write_durable():
    costs = {"fast_s": 3, "durable_s": 30, "mtbf_s": 3 * 3600, "fast_restart_s": 60, "durable_restart_s": 600}
    # A fast copy that never survives is worth nothing: the plan writes only durable checkpoints.
    assert tiers.tier_optimum(survive=0.0, **costs).every == 1
    # With m = 1 (tau between durable writes) it is the advisor's W(tau) but for the writes' share: the rewound and
    # restart terms are (tau/2 + R)/M exactly, the writes cost A/(tau + A) of the training, (M - R)/M of the time.
    one = tiers.tier_waste(900, 1, survive=0.5, **costs)
    first_order = advisor.waste(900, delta_s=30, mtbf_s=3 * 3600, restart_s=600)
    writes = 30 / 930 * (3 * 3600 - 600) / (3 * 3600)
    assert one == pytest.approx(writes + (450 + 600) / (3 * 3600), rel=1e-12)
    assert one == pytest.approx(first_order, rel=0.05)
    # A fast copy that always survives: durable writes become rare, and the waste falls towards the fast tier's own.
    always = tiers.tier_optimum(survive=1.0, **costs)
    assert always.every > 20 and always.waste < tiers.tier_optimum(survive=0.9, **costs).waste


def test_faults_faster_than_a_restart_leave_nothing_to_plan():
    assert tiers.tier_waste(60, 5, fast_s=3, durable_s=30, survive=0.9, mtbf_s=100, fast_restart_s=60,
                            durable_restart_s=600) == math.inf  # fmt: skip


def test_the_record_measures_each_tier_and_what_the_fast_one_survived():
    config = tiered(16_384, 60)
    timeline = simulate_timeline(dataclasses.replace(config, checkpoint_interval_s=600, durable_every=3))
    record = tiers.measured(timeline)
    assert record.fast_s == pytest.approx(3, abs=0.5) and record.durable_s == pytest.approx(30, abs=3)
    assert record.fast_restart_s < record.durable_restart_s
    assert 0 < record.survive <= 1
    # A run with durable writes only has no fast tier to measure.
    plain = tiers.measured(simulate_timeline(SimulationConfig(gpus=64, days=2, rate_per_gpu_hour=1e-3)))
    assert plain.fast_s is None and plain.survive is None and plain.fast_restart_s is None


@pytest.fixture
def tiered_run(db, django_capture_on_commit_callbacks):
    from runs.domain.simulator import simulate
    from runs.management.commands.simulate import ingest

    config = dataclasses.replace(
        tiered(64, 1), days=2, rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * 150, hazard_per_s=None, planned_stops=1,
        checkpoint_interval_s=600, durable_every=3,
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        ingest(simulate(config))
    return config


def test_the_record_of_a_tiered_stream_is_the_simulators_own_timeline(tiered_run):
    """Memory-tier completions through the intake: the record gives the engine what the simulator says happened."""
    from runs import selectors
    from runs.models import Run

    config = tiered_run
    record = selectors.run_timeline_get(run=Run.objects.get(name=config.run))
    truth = simulate_timeline(config)
    assert {c.tier for c in record.checkpoints} == {"memory", "durable"}
    assert len(record.interruptions) == len(truth.interruptions) >= 5
    whole = {"since": config.start, "until": config.end, "now": config.end}
    assert goodput.breakdown(record, **whole) == goodput.breakdown(truth, **whole)
    # The record keeps one write a step: a step written again after the run went back past it keeps only its later
    # write, so the record can see a fast copy fewer at stake than the simulator wrote. The rest is the same.
    mine, told = tiers.measured(record), tiers.measured(truth)
    assert dataclasses.replace(mine, survive=None, at_stake=0) == dataclasses.replace(told, survive=None, at_stake=0)
    assert told.at_stake - 1 <= mine.at_stake <= told.at_stake and mine.survive == pytest.approx(told.survive, abs=0.2)


# --- on the run page and in the advice API, from one source --------------------------------------------------------


def test_the_advice_api_plans_two_tiers_from_the_records_own_tiers(reader, tiered_run):
    body = reader.get(f"/api/v1/runs/{tiered_run.run}/advice").json()
    plan = body["tiers"]
    assert plan["sources"] == {
        "fast_s": "record", "durable_s": "record", "survive": "record", "fast_restart_s": "record",
        "durable_restart_s": "record",
    }  # fmt: skip
    assert plan["fast_s"] == pytest.approx(3, abs=0.5) and plan["durable_s"] == pytest.approx(30, abs=3)
    expected = tiers.tier_optimum(**{k: plan[k] for k in ("fast_s", "durable_s", "survive", "fast_restart_s",
                                                          "durable_restart_s", "mtbf_s")})  # fmt: skip
    assert plan["plan"]["fast_interval_s"] == pytest.approx(expected.fast_interval_s)
    assert plan["plan"]["durable_every"] == expected.every and plan["plan"]["waste"] < plan["one_tier"]["waste"]
    assert plan["mtbf_s"] == body["advice"]["mtbf_s"]
    # Overridden, and refused naming the field.
    body = reader.get(f"/api/v1/runs/{tiered_run.run}/advice?survive=0").json()
    assert body["tiers"]["sources"]["survive"] == "override" and body["tiers"]["plan"]["durable_every"] == 1
    response = reader.get(f"/api/v1/runs/{tiered_run.run}/advice?survive=1.5")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "survive"


def test_the_run_page_shows_the_apis_two_tier_plan(oncall, reader, tiered_run):
    page = oncall.get(f"/runs/{tiered_run.run}").content.decode()
    plan = reader.get(f"/api/v1/runs/{tiered_run.run}/advice").json()["tiers"]["plan"]
    section = page.split('id="advice-tiers"')[1].split("</p>")[0]
    assert f"{plan['waste'] * 100:.1f}%" in section


def test_a_run_without_a_fast_tier_gets_a_plan_from_stated_defaults(reader, db, django_capture_on_commit_callbacks):
    from django.core.management import call_command

    with django_capture_on_commit_callbacks(execute=True):
        call_command("simulate", "--gpus", "64", "--days", "2", "--rate", str(LLAMA3_RATE_PER_GPU_HOUR * 150),
                     "--planned", "1", "--start", "2026-01-05T00:00:00Z", "--apply",
                     stdout=open("/dev/null", "w"))  # fmt: skip
    body = reader.get("/api/v1/runs/llama3-405b-sim/advice").json()
    sources = body["tiers"]["sources"]
    assert sources["fast_s"] == sources["survive"] == sources["fast_restart_s"] == "default"
    assert body["tiers"]["survive"] == tiers.FAST_SURVIVES
    assert body["tiers"]["fast_s"] == pytest.approx(body["advice"]["delta_s"] * tiers.FAST_WRITE_SHARE)
