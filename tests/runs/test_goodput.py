"""The goodput engine (runs/domain/goodput/): worked examples of docs/DOMAIN.md section 2, then properties."""

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.domain.goodput import (
    STAGES,
    Breakdown,
    CheckpointSpan,
    InterruptionSpan,
    RunTimeline,
    breakdown,
    breakdown_and_daily,
    daily,
    fleet,
    interruption_costs,
    weekly,
)

T0 = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday
FAR = T0 + timedelta(days=400)
TOLERANCE_S = 1e-6


def at(minutes: float, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def restart(fault_min, detected_min, running_min, resumed_min, step=None, **extra) -> InterruptionSpan:
    def moment(m):
        return None if m is None else at(m)

    return InterruptionSpan(
        fault_at=at(fault_min),
        detected_at=at(detected_min),
        running_at=moment(running_min),
        resumed_at=moment(resumed_min),
        resumed_from_step=step,
        **extra,
    )


def whole(timeline: RunTimeline, now: datetime = FAR) -> Breakdown:
    return breakdown(timeline, since=T0 - timedelta(days=1), until=FAR, now=now)


def assert_balanced(b: Breakdown) -> None:
    assert all(value >= 0 for value in b.stages_s.values()), b
    assert b.productive_s >= -TOLERANCE_S, b
    assert abs(b.productive_s + b.lost_s - b.wall_clock_s) <= TOLERANCE_S, b
    assert 0 <= b.goodput <= 1


def assert_close(left: Breakdown, right: Breakdown) -> None:
    assert left.interruptions == right.interruptions
    for name in ("wall_clock_s", "productive_s", *(f"{stage}_s" for stage in STAGES)):
        assert getattr(left, name) == pytest.approx(getattr(right, name), abs=TOLERANCE_S), name


# The record tests/stories.py builds: fault at +45 (Xid 79), noticed +46, running +55, training +58
# from the step-3 checkpoint written at +30 (20 s blocking), completed at +120.
SCENARIO = RunTimeline(
    started_at=at(0),
    ended_at=at(120),
    gpus=16,
    interruptions=(restart(45, 46, 55, 58, step=3, cause="gpu"),),
    checkpoints=(CheckpointSpan(step=3, started_at=at(30), blocking_s=20.0),),
)


def test_it_reproduces_two_restarts_a_day_of_fifteen_minutes():
    # docs/DOMAIN.md section 2: a 4,096-GPU run, 2 restarts a day at 15 minutes each: 30 / 1,440 = 2.08% lost.
    # The example has no rewound work, so each restart resumes from a zero-cost checkpoint taken at the
    # fault itself; with no checkpoint at all the engine would count everything since the start as lost.
    day = RunTimeline(
        started_at=at(0),
        ended_at=at(24 * 60),
        gpus=4096,
        interruptions=(restart(360, 361, 370, 375, step=1), restart(1080, 1081, 1090, 1095, step=2)),
        checkpoints=(CheckpointSpan(1, at(360), 0.0), CheckpointSpan(2, at(1080), 0.0)),
    )
    b = breakdown(day, since=at(0), until=at(24 * 60), now=at(24 * 60))

    assert b.wall_clock_s == 86_400
    assert b.lost_s == 30 * 60
    assert round(100 * b.lost_s / b.wall_clock_s, 2) == 2.08
    assert round(100 * b.goodput, 1) == 97.9
    assert (b.detection_s, b.rescheduling_s, b.reload_s, b.rewound_s) == (120, 1080, 600, 0)
    assert b.interruptions == 2
    assert b.weighted(day.gpus).gpu_hours()["productive"] == pytest.approx(4096 * 23.5)


def test_it_charges_hourly_six_minute_sync_checkpoints_ten_percent():
    # docs/DOMAIN.md section 2, production example: synchronous checkpoints of 6 minutes every hour = 10% overhead.
    checkpoints = tuple(CheckpointSpan(hour, at(60 * hour + 54), 360.0) for hour in range(24))
    run = RunTimeline(started_at=at(0), ended_at=at(24 * 60), gpus=1024, checkpoints=checkpoints)
    b = whole(run)

    assert b.checkpoint_s == 24 * 360
    assert b.lost_s == b.checkpoint_s
    assert b.goodput == pytest.approx(0.90)


def test_it_splits_the_failure_and_restart_scenario_into_stages():
    b = whole(SCENARIO)

    assert b.wall_clock_s == 7200
    assert (b.detection_s, b.rescheduling_s, b.reload_s) == (60, 540, 180)
    assert b.rewound_s == 45 * 60 - (30 * 60 + 20)  # from the end of the step-3 write to the fault
    assert b.checkpoint_s == 20
    assert b.other_s == 0
    assert b.productive_s == 7200 - 60 - 540 - 180 - 880 - 20
    assert b.interruptions == 1


def test_a_second_failure_during_the_reload_of_the_first_rewinds_to_the_restore_that_succeeds():
    # Issue 16, case 1: a two-hour run, a durable checkpoint at step 30 written 00:30:00-00:30:30; fault at 01:00
    # (noticed at once), running again 01:05; a second fault 01:08 during the reload, running 01:12, training again
    # from step 30 at 01:15. By hand, in minutes: rescheduling 5 + 4 = 9; reload 3 (01:05-01:08, cut by the second
    # fault) + 3 = 6; rewound 00:30:30-01:00 = 29.5 (the second fault rewinds nothing new: no training since);
    # checkpoint 0.5; productive 30 + 45 = 75 of 120: goodput 0.625.
    run = RunTimeline(
        started_at=at(0),
        ended_at=at(120),
        gpus=8,
        interruptions=(restart(60, 60, 65, None), restart(68, 68, 72, 75, step=30)),
        checkpoints=(CheckpointSpan(step=30, started_at=at(30), blocking_s=30),),
    )
    b = whole(run)
    minutes = {stage: getattr(b, f"{stage}_s") / 60 for stage in STAGES}
    assert minutes == {
        "detection": 0, "rescheduling": 9, "reload": 6, "other": 0, "rewound": 29.5, "checkpoint": 0.5, "shrunk": 0,
    }  # fmt: skip
    assert b.productive_s == 75 * 60 and b.goodput == 0.625  # the engine said 0.375: the first hour all rewound
    first, second = interruption_costs(run, now=FAR)
    assert (first.rewound_min, second.rewound_min) == (29.5, 0)


def test_a_restore_whose_own_checkpoint_is_not_known_rewinds_to_the_latest_earlier_one():
    # Issue 16, case 2: checkpoints at steps 30 and 60 written at 00:30 and 01:00 (30 s each); a fault at 01:20,
    # running again 01:25, training from step 70 at 01:30, but step 70's checkpoint.completed never arrived. The run
    # kept every step up to 70, so at most the work since step 60's write (01:00:30, durable from 01:01) is lost:
    # 19.5 min, not the 80 min since the run started. The same when step 70's write is stamped after the fault (a
    # fast clock).
    durable = (CheckpointSpan(30, at(30), 30, at(31)), CheckpointSpan(60, at(60), 30, at(61)))
    for extra in ((), (CheckpointSpan(step=70, started_at=at(85), blocking_s=30),)):
        run = RunTimeline(
            started_at=at(0),
            ended_at=at(120),
            gpus=8,
            interruptions=(restart(80, 80, 85, 90, step=70),),
            checkpoints=(*durable, *extra),
        )
        (cost,) = interruption_costs(run, now=FAR)
        assert cost.rewound_min == 19.5
    # Step 60 only in memory: lost with the node the fault named, so step 30's durable copy bounds the loss (49.5
    # min); a fault that named no node spared it (19.5 min).
    memory = (durable[0], CheckpointSpan(60, at(60), 30, None, "memory"))
    for node, lost in (("n2", 49.5), (None, 19.5)):
        run = RunTimeline(
            started_at=at(0),
            ended_at=at(120),
            interruptions=(replace(restart(80, 80, 85, 90, step=70), node=node),),
            checkpoints=memory,
        )
        assert interruption_costs(run, now=FAR)[0].rewound_min == lost
    # Restoring from an earlier step again: never before where the previous interruption ended.
    again = RunTimeline(
        started_at=at(0),
        ended_at=at(200),
        interruptions=(restart(50, 50, 55, 60, step=30), restart(100, 100, 105, 110, step=45)),
        checkpoints=(CheckpointSpan(30, at(30), 30),),
    )
    assert interruption_costs(again, now=FAR)[1].rewound_min == 100 - 60


def test_it_counts_a_stage_split_by_the_window_in_part():
    first = breakdown(SCENARIO, since=at(0), until=at(50), now=FAR)
    second = breakdown(SCENARIO, since=at(50), until=at(120), now=FAR)

    assert (first.detection_s, first.rescheduling_s, first.reload_s) == (60, 240, 0)
    assert (second.detection_s, second.rescheduling_s, second.reload_s) == (0, 300, 180)
    assert (first.interruptions, second.interruptions) == (1, 0)
    assert_close(first + second, whole(SCENARIO))
    # A fault on the edge belongs to the window that starts there, never to both.
    assert breakdown(SCENARIO, since=at(0), until=at(45), now=FAR).interruptions == 0
    assert breakdown(SCENARIO, since=at(45), until=at(120), now=FAR).interruptions == 1


def test_it_runs_an_open_restart_until_now_but_not_past_the_window():
    restarting = RunTimeline(started_at=at(0), gpus=8, interruptions=(restart(30, 32, None, None),))

    until_now = breakdown(restarting, since=at(0), until=at(600), now=at(90))
    assert until_now.wall_clock_s == 90 * 60
    assert (until_now.detection_s, until_now.rescheduling_s) == (120, 58 * 60)
    assert until_now.rewound_s == 30 * 60  # no checkpoint known: all work since the start is lost

    cut = breakdown(restarting, since=at(0), until=at(60), now=at(90))
    assert (cut.wall_clock_s, cut.rescheduling_s) == (3600, 28 * 60)


def test_a_run_still_down_counts_the_work_since_its_last_surviving_checkpoint_as_lost():
    """The demo's live fault claimed 265 min rewound (all since the last restore) with a durable checkpoint 18 min
    before it: until the restore says where it loaded from, the rewind point is the last checkpoint the fault left."""
    durable = CheckpointSpan(4, at(20), 30.0, durable_at=at(21))
    in_memory = CheckpointSpan(5, at(25), 10.0, tier="memory")  # on the run's nodes: a fault on a node takes it
    down = RunTimeline(
        started_at=at(0), gpus=8, interruptions=(restart(30, 32, None, None),), checkpoints=(durable, in_memory)
    )
    assert whole(down, now=at(40)).rewound_s == 30 * 60 - 25 * 60 - 10  # the memory copy survives a crash
    on_node = replace(down, interruptions=(replace(down.interruptions[0], node="n2"),))
    assert whole(on_node, now=at(40)).rewound_s == 30 * 60 - 20 * 60 - 30  # the durable one survives a dead node
    restored = replace(down, interruptions=(restart(30, 32, 35, 38, step=4),))
    assert whole(restored, now=at(40)).rewound_s == 30 * 60 - 20 * 60 - 30  # the restore says where it was


def test_it_runs_an_open_reload_until_the_next_fault():
    # The restarted job crashed again while loading: the first reload ends where the second fault begins.
    twice = RunTimeline(
        started_at=at(0),
        ended_at=at(100),
        interruptions=(restart(20, 21, 25, None), restart(30, 31, 40, 45)),
    )
    costs = interruption_costs(twice, now=FAR)

    assert costs[0].reload_min == 5
    assert costs[1].reload_min == 5
    assert costs[1].rewound_min == 0  # the first restart never trained again, so nothing more was lost


def test_it_falls_back_to_the_previous_resume_when_the_checkpoint_is_unknown():
    run = RunTimeline(
        started_at=at(0),
        ended_at=at(200),
        interruptions=(restart(50, 51, 55, 60, step=7), restart(100, 101, 105, 110, step=99)),
        checkpoints=(CheckpointSpan(7, at(40), 30.0),),
    )
    first, second = interruption_costs(run, now=FAR)

    assert first.rewound_min == 50 - 40.5
    assert second.rewound_min == 100 - 60  # step 99 has no checkpoint: lost since training resumed at +60


def test_a_restore_of_a_write_the_fault_cut_or_never_completed_rewinds_to_its_start():
    # The run restored step 7, whose write began at +49: it kept the state it had then, whether the write's blocking
    # ran past the fault at +50 or its completion never came. Only the minute since is lost, not the 49 before.
    for write in (CheckpointSpan(7, at(49), 120.0), CheckpointSpan(7, at(49), None)):
        run = RunTimeline(
            started_at=at(0),
            ended_at=at(100),
            interruptions=(restart(50, 51, 55, 60, step=7),),
            checkpoints=(write,),
        )
        assert interruption_costs(run, now=FAR)[0].rewound_min == 1
        assert whole(run).checkpoint_s == 0  # the cut write's blocking is the fault's; an unknown one counts nothing


def test_it_starts_detection_at_the_fault_when_clocks_disagree():
    # The detector's clock ran behind: noticed "before" the fault. Training before the fault stays productive.
    run = RunTimeline(
        started_at=at(0),
        ended_at=at(100),
        interruptions=(restart(50, 45, 60, 70, step=1),),
        checkpoints=(CheckpointSpan(1, at(50), 0.0),),  # nothing rewound, to isolate the stages
    )
    b = whole(run)

    assert (b.detection_s, b.rescheduling_s, b.reload_s) == (0, 600, 600)
    assert b.productive_s == 80 * 60


def test_it_charges_blocking_only_while_training():
    run = RunTimeline(
        started_at=at(0),
        ended_at=at(100),
        interruptions=(restart(50, 52, 60, 70, step=1),),
        checkpoints=(
            CheckpointSpan(1, at(10), 60.0),  # training: counts
            CheckpointSpan(2, at(40), 60.0),  # in the work later lost: rewound, not checkpoint
            CheckpointSpan(3, at(49, 30), 120.0),  # straddles the fault: only the 30 s before it, as rewound
            CheckpointSpan(4, at(65), 60.0),  # inside the downtime: reload owns it
            CheckpointSpan(5, at(80), 60.0),  # training: counts
        ),
    )
    b = whole(run)

    assert b.checkpoint_s == 120
    assert b.rewound_s == (50 - 11) * 60
    assert b.reload_s == 600
    assert_balanced(b)


def test_it_charges_downtime_it_cannot_split_to_other():
    # Training resumed at +70 but the restart time never arrived: [+52, +70) is neither stage for sure.
    run = RunTimeline(started_at=at(0), ended_at=at(100), interruptions=(restart(50, 52, None, 70, step=None),))
    b = whole(run)

    assert (b.detection_s, b.rescheduling_s, b.reload_s, b.other_s) == (120, 0, 0, 18 * 60)
    assert b.productive_s == (100 - 70) * 60


def test_it_gives_zero_goodput_for_an_empty_window():
    assert breakdown(SCENARIO, since=at(200), until=at(300), now=FAR) == Breakdown()
    assert breakdown(SCENARIO, since=at(60), until=at(30), now=FAR) == Breakdown()
    assert Breakdown().goodput == 0
    not_yet = RunTimeline(started_at=at(0), gpus=8)
    assert breakdown(not_yet, since=at(-60), until=at(60), now=at(-5)) == Breakdown()  # starts after `now`


def test_it_gives_daily_and_weekly_breakdowns_that_add_up():
    # Sunday 18:00 to Tuesday 06:00, with a restart across midnight on Monday.
    run = RunTimeline(
        started_at=at(-6 * 60),
        ended_at=at(30 * 60),
        gpus=8,
        interruptions=(restart(24 * 60 - 10, 24 * 60 - 5, 24 * 60 + 5, 24 * 60 + 10, step=1),),
        checkpoints=(CheckpointSpan(1, at(24 * 60 - 20), 10.0),),
    )
    since, until = at(-2 * 24 * 60), at(3 * 24 * 60)
    days = daily(run, since=since, until=until, now=FAR)
    weeks = weekly(run, since=since, until=until, now=FAR)

    assert [d for d, _ in days] == [date(2026, 2, 28) + timedelta(days=n) for n in range(5)]
    assert [b.wall_clock_s / 3600 for _, b in days] == [0, 6, 24, 6, 0]
    assert days[2][1].rescheduling_s == 5 * 60 and days[3][1].rescheduling_s == 5 * 60
    assert days[2][1].interruptions == 1 and days[3][1].interruptions == 0
    assert [d for d, _ in weeks] == [date(2026, 2, 23), date(2026, 3, 2)]
    total = breakdown(run, since=since, until=until, now=FAR)
    assert_close(sum((b for _, b in days), Breakdown()), total)
    assert_close(sum((b for _, b in weeks), Breakdown()), total)


def test_it_weights_fleet_goodput_by_gpu_hours():
    big = RunTimeline(started_at=at(0), ended_at=at(60), gpus=1000, checkpoints=(CheckpointSpan(1, at(0), 360.0),))
    small = RunTimeline(started_at=at(0), ended_at=at(60), gpus=10, interruptions=(restart(0, 30, 60, 60),))
    b = fleet([big, small], since=at(0), until=at(60), now=FAR)

    assert b.goodput == pytest.approx((1000 * 0.9 + 10 * 0) / 1010)  # a time-weighted mean would say 0.45
    assert b.wall_clock_s == 1010 * 3600
    assert b.interruptions == 1
    assert b.gpu_hours()["checkpoint"] == 100


def test_it_prices_each_interruption():
    (cost,) = interruption_costs(SCENARIO, now=FAR)

    assert (cost.number, cost.cause, cost.planned) == (1, "gpu", False)
    assert (cost.detection_min, cost.rescheduling_min, cost.reload_min) == (1, 9, 3)
    assert cost.rewound_min == pytest.approx(880 / 60)
    assert cost.gpu_hours == pytest.approx((60 + 540 + 180 + 880) * 16 / 3600)
    assert cost.total_min == pytest.approx((60 + 540 + 180 + 880) / 60)


# -- properties --------------------------------------------------------------------------------------------

seconds = st.integers(min_value=0, max_value=4 * 3600)


@st.composite
def valid_timelines(draw) -> RunTimeline:
    """Training spans with checkpoints inside, separated by interruptions with monotone timestamps."""
    moment, interruptions, checkpoints = T0, [], []
    count = draw(st.integers(0, 4))
    for number in range(count + 1):
        training = draw(seconds)
        for offset in sorted(draw(st.lists(st.integers(0, training), max_size=3))):
            blocking = draw(st.floats(0, 900, allow_nan=False))
            checkpoints.append(CheckpointSpan(len(checkpoints), moment + timedelta(seconds=offset), blocking))
        moment += timedelta(seconds=training)
        if number == count:
            break
        fault = moment
        detected = fault + timedelta(seconds=draw(seconds))
        running = detected + timedelta(seconds=draw(seconds))
        resumed = running + timedelta(seconds=draw(seconds))
        # Only the last restart may still be open; an earlier one may have died during its reload.
        states = ["resumed", "loading", "waiting"] if number == count - 1 else ["resumed", "loading"]
        state = draw(st.sampled_from(states))
        step = draw(st.sampled_from([None, *range(len(checkpoints))]))
        interruptions.append(
            InterruptionSpan(
                fault_at=fault,
                detected_at=detected,
                running_at=running if state != "waiting" else None,
                resumed_at=resumed if state == "resumed" else None,
                resumed_from_step=step if state == "resumed" else None,
            )
        )
        moment = resumed if state == "resumed" else running
        if state == "waiting":
            break
    ended_at = moment + timedelta(seconds=draw(seconds)) if draw(st.booleans()) else None
    return RunTimeline(T0, ended_at, draw(st.integers(0, 4096)), tuple(interruptions), tuple(checkpoints))


@st.composite
def messy_timelines(draw) -> RunTimeline:
    """Any timestamps at all: out of order, overlapping, before the start, after the end."""

    def moment():
        return T0 + timedelta(seconds=draw(st.integers(-3600, 12 * 3600)))

    def maybe():
        return moment() if draw(st.booleans()) else None

    interruptions = tuple(
        InterruptionSpan(moment(), moment(), maybe(), maybe(), draw(st.sampled_from([None, 0, 1, 2])))
        for _ in range(draw(st.integers(0, 4)))
    )
    checkpoints = tuple(
        CheckpointSpan(draw(st.integers(0, 2)), moment(), draw(st.floats(-10, 7200, allow_nan=False)))
        for _ in range(draw(st.integers(0, 4)))
    )
    return RunTimeline(T0, maybe(), draw(st.integers(0, 64)), interruptions, checkpoints)


offsets = st.integers(min_value=-3600, max_value=40 * 3600)


@settings(max_examples=200, deadline=None)
@given(run=st.one_of(valid_timelines(), messy_timelines()), a=offsets, b=offsets, now=offsets)
def test_it_balances_every_window(run, a, b, now):
    since, until = sorted((T0 + timedelta(seconds=a), T0 + timedelta(seconds=b)))
    result = breakdown(run, since=since, until=until, now=T0 + timedelta(seconds=now))

    assert_balanced(result)
    assert result.wall_clock_s <= (until - since).total_seconds()


@settings(max_examples=200, deadline=None)
@given(run=st.one_of(valid_timelines(), messy_timelines()), cuts=st.lists(offsets, min_size=3, max_size=3), now=offsets)
def test_it_adds_windows_up(run, cuts, now):
    a, b, c = (T0 + timedelta(seconds=s) for s in sorted(cuts))
    moment = T0 + timedelta(seconds=now)
    left = breakdown(run, since=a, until=b, now=moment)
    right = breakdown(run, since=b, until=c, now=moment)
    both = breakdown(run, since=a, until=c, now=moment)

    assert_close(left + right, both)
    runs = [run, SCENARIO]
    split = fleet(runs, since=a, until=b, now=moment) + fleet(runs, since=b, until=c, now=moment)
    assert split.goodput == pytest.approx(fleet(runs, since=a, until=c, now=moment).goodput, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(run=valid_timelines())
def test_it_loses_only_checkpoint_blocking_without_failures(run):
    run = RunTimeline(run.started_at, run.ended_at, run.gpus, (), run.checkpoints)
    result = whole(run)

    end = run.ended_at or FAR
    spans = sorted((c.started_at, min(c.blocked_until, end)) for c in run.checkpoints if c.started_at < end)
    union, reach = timedelta(), None
    for start, stop in spans:  # merge overlapping writes by hand, independently of the engine
        start = max(start, reach) if reach else start
        union += max(stop - start, timedelta())
        reach = max(stop, reach) if reach else stop
    assert result.checkpoint_s == pytest.approx(union.total_seconds(), abs=TOLERANCE_S)
    assert result.lost_s == result.checkpoint_s
    assert result.productive_s == pytest.approx(result.wall_clock_s - union.total_seconds(), abs=TOLERANCE_S)


@settings(max_examples=200, deadline=None)
@given(run=st.one_of(valid_timelines(), messy_timelines()))
def test_it_prices_interruptions_to_the_whole_run_total(run):
    total = whole(run)
    costs = interruption_costs(run, now=FAR)

    assert len(costs) == len(run.interruptions)
    assert sum(c.total_min for c in costs) * 60 == pytest.approx(total.lost_s - total.checkpoint_s, abs=1e-5)
    assert sum(c.rewound_min for c in costs) * 60 == pytest.approx(total.rewound_s, abs=1e-5)
    assert sum(c.gpu_hours for c in costs) == pytest.approx(
        (total.lost_s - total.checkpoint_s) * run.gpus / 3600, rel=1e-9, abs=1e-9
    )


@settings(max_examples=200, deadline=None)
@given(run=st.one_of(valid_timelines(), messy_timelines()), a=offsets, b=offsets, now=offsets)
def test_it_gives_the_total_and_the_days_in_one_pass(run, a, b, now):
    since, until = sorted((T0 + timedelta(seconds=a), T0 + timedelta(seconds=b)))
    moment = T0 + timedelta(seconds=now)
    total, days = breakdown_and_daily(run, since=since, until=until, now=moment)

    # Exactly, not approximately: the total is the days' sum in whole microseconds, divided once.
    assert total == breakdown(run, since=since, until=until, now=moment)
    assert days == daily(run, since=since, until=until, now=moment)
    assert_close(sum((b for _, b in days), Breakdown()), total)


@settings(max_examples=300, deadline=None)
@given(blocking=st.floats(-1, 1e6, allow_nan=False), offset=st.integers(0, 10**6))
def test_it_charges_blocking_to_the_microsecond_blocked_until_names(blocking, offset):
    # The engine rounds seconds to microseconds itself; it must land where timedelta does.
    checkpoint = CheckpointSpan(1, T0 + timedelta(microseconds=offset), blocking)
    run = RunTimeline(T0, FAR, 8, (), (checkpoint,))

    assert whole(run).checkpoint_s == (checkpoint.blocked_until - checkpoint.started_at).total_seconds()
