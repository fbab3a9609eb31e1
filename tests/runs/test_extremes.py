"""No value the intake admits can take a page or an API down (issue 15): property tests drive the goodput engine, the
advisor and the charts with the extremes of what is accepted (times across 2000-2099, durations to 10^7 s, steps to
2^63 - 1, GPU counts to 2^31 - 1, in any order), and then the pages and APIs with such events stored."""

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs import charts
from runs.domain import advisor, goodput
from runs.domain.cloudevents import BIGINT_MAX, INT_MAX, TIME_MAX, TIME_MIN
from runs.models import Event, Run

LAST = TIME_MAX - timedelta(microseconds=1)
moments = st.one_of(
    st.sampled_from([TIME_MIN, LAST, datetime(2026, 3, 1, tzinfo=UTC)]),
    st.datetimes(min_value=TIME_MIN.replace(tzinfo=None), max_value=LAST.replace(tzinfo=None), timezones=st.just(UTC)),
)
durations = st.one_of(st.sampled_from([0.0, 1e-6, 1e7]), st.floats(0, 1e7))
steps = st.one_of(st.sampled_from([0, BIGINT_MAX]), st.integers(0, BIGINT_MAX))


@st.composite
def extreme_timelines(draw) -> goodput.RunTimeline:
    """A run whose every moment, duration, step and GPU count is anything the intake admits, in any order."""
    interruptions = tuple(
        goodput.InterruptionSpan(
            fault_at=draw(moments),
            detected_at=draw(moments),
            running_at=draw(st.none() | moments),
            resumed_at=draw(st.none() | moments),
            resumed_from_step=draw(st.none() | steps),
            planned=draw(st.booleans()),
        )
        for _ in range(draw(st.integers(0, 4)))
    )
    checkpoints = tuple(
        goodput.CheckpointSpan(step=draw(steps), started_at=draw(moments), blocking_s=draw(durations))
        for _ in range(draw(st.integers(0, 4)))
    )
    return goodput.RunTimeline(
        started_at=draw(moments),
        ended_at=draw(st.none() | moments),
        gpus=draw(st.sampled_from([0, 1, INT_MAX]) | st.integers(0, INT_MAX)),
        interruptions=interruptions,
        checkpoints=checkpoints,
    )


def _finite(b: goodput.Breakdown) -> None:
    for name, value in vars(b).items():
        if isinstance(value, float):
            assert math.isfinite(value), name
    assert 0.0 <= b.goodput <= 1.0
    assert b.productive_s >= 0 and b.lost_s >= 0


@settings(max_examples=300, deadline=None)
@given(run=extreme_timelines(), since=moments, until=moments, now=moments)
def test_the_engine_and_charts_are_total_over_every_admitted_value(run, since, until, now):
    since, until = sorted((since, until))
    total = goodput.breakdown(run, since=since, until=until, now=now)
    _finite(total)
    _finite(goodput.fleet([run, run], since=since, until=until, now=now))
    month = max(since, until - timedelta(days=30))  # the pages' daily series cover a window, not a century
    days = goodput.daily(run, since=month, until=until, now=now)
    assert len(days) <= 31
    for _day, b in days:
        _finite(b)
    for cost in goodput.interruption_costs(run, now=now):
        assert math.isfinite(cost.gpu_hours) and math.isfinite(cost.total_min)
    goodput.segments(run, now=now)
    json.dumps([charts.goodput_bar(total), charts.daily_goodput(days)], allow_nan=False)
    json.dumps(charts.goodput_by_run([("r", total)]), allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(delta=durations, mtbf=st.floats(1e-3, 1e12), restart=durations, current=st.none() | st.floats(1, 1e7))
def test_the_advisor_is_total_over_every_admitted_cost(delta, mtbf, restart, current):
    try:
        advice = advisor.advise(delta_s=delta, mtbf_s=mtbf, restart_s=restart, current_s=current)
    except ValueError as exc:  # a cost it cannot advise on (zero) is refused with a reason, never a crash
        assert str(exc)
        return
    json.dumps(charts.advisor_curve(advice), allow_nan=False)


@pytest.mark.reliability(
    "Stored events at the extremes of what the intake admits, drawn at random (Hypothesis)",
    how="per example: a run of up to 2^31 - 1 GPUs started, failed, restored from a step up to 2^63 - 1 and "
    "checkpointed with writes up to 10^7 s, at times anywhere in 2000-2099 and in any order, posted through "
    "POST /api/v1/events; then the overview, /fleet, the run page and both goodput APIs",
    outcome="every example 202 and every page and API 200 (before: one blocking_s of 1e11 took them all to 500)",
)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    gpus=st.sampled_from([1, INT_MAX]),
    start=moments,
    fail=moments,
    restored=moments,
    checkpoint=moments,
    blocking=durations,
    step=steps,
)
def test_pages_and_apis_answer_whatever_admitted_values_are_stored(
    post, admin_client, reader, gpus, start, fail, restored, checkpoint, blocking, step
):
    Event.objects.all().delete()
    Run.objects.all().delete()

    def e(type_, when, id_, **data):
        time = when.isoformat().replace("+00:00", "Z")
        return {"specversion": "1.0", "id": id_, "source": "x://hyp", "type": type_, "time": time, "data": data}

    post(
        [
            e("run.started", start, "s", run="x", cluster="c", gpus=gpus, nodes=["n1"], job_id="1"),
            e("checkpoint.completed", checkpoint, "c", run="x", step=step, blocking_s=blocking, bytes=1, tier="local"),
            e("run.failed", fail, "f", run="x", reason="boom", node="n1", detected_at=fail.isoformat()),
            e("run.restored", restored, "r", run="x", from_step=step),
        ]
    )
    assert not Event.objects.filter(applied_at__isnull=True).exists()
    assert not Event.objects.filter(quarantined_at__isnull=False).exists()
    for url in ("/", "/fleet", "/runs/x", "/nodes/n1"):
        assert admin_client.get(url).status_code == 200, url
    for url in ("/api/v1/runs/x/goodput", "/api/v1/fleet/goodput", "/api/v1/runs/x/advice"):
        assert reader.get(url).status_code == 200, url


def test_costs_no_clock_can_measure_leave_nothing_to_advise_on_rather_than_a_crash():
    # Found by the properties above: a write of 0 s (an asynchronous save) made delta 0, and the run page and its
    # advice API answered 500; one of 5e-324 s made Young's interval underflow to 0 and divide by zero.
    assert advisor.write_cost_s([0.0, 0.0]) is None and advisor.restart_cost_s([-5.0]) is None
    assert advisor.write_cost_s([5e-324]) == advisor.MIN_COST_S
    with pytest.raises(ValueError, match="at least"):
        advisor.advise(delta_s=5e-324, mtbf_s=1e-3, restart_s=0)
