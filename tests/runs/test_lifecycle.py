"""runs.domain.lifecycle: attempts and interruptions from lifecycle events, in any order."""

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from runs.domain.cloudevents import parse_events
from runs.domain.lifecycle import LIFECYCLE_TYPES, LifecycleEvent, derive
from tests.stories import at, failure_and_restart

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def lifecycle_events(raws):
    events, problems = parse_events(raws, max_batch=1000)
    assert problems == []
    return [LifecycleEvent(e.time, e.type, e.data, e.source, e.id) for e in events if e.type in LIFECYCLE_TYPES]


def started(minute, job, nodes=("n1",)):
    return LifecycleEvent(
        T0 + timedelta(minutes=minute), "run.started", {"job_id": job, "nodes": list(nodes)}, "s", job
    )


def failed(minute, id_, **data):
    return LifecycleEvent(T0 + timedelta(minutes=minute), "run.failed", {"reason": "boom", **data}, "s", id_)


def test_it_derives_attempts_and_the_interruption():
    result = derive(lifecycle_events(failure_and_restart()))
    assert result.state == "completed" and (result.started_at, result.ended_at) == (at(0), at(120))
    assert [(a.number, a.job_id, a.end_reason) for a in result.attempts] == [
        (1, "100", "failed"),
        (2, "101", "completed"),
    ]
    (i,) = result.interruptions
    assert (i.fault_at, i.detected_at, i.running_at, i.resumed_at) == (at(45), at(46), at(55), at(58))
    assert (i.attempt_number, i.restart_attempt_number, i.resumed_from_step, i.cause) == (1, 2, 3, "faulty_gpu")


def test_a_run_waiting_for_its_restart_is_restarting():
    result = derive([started(0, "1"), failed(10, "f")])
    assert result.state == "restarting" and result.interruptions[0].running_at is None


def test_a_second_report_of_the_same_fault_merges_into_one_interruption():
    result = derive([started(0, "1"), failed(10, "sched"), failed(11, "agent", node="n7", xid=79), started(20, "2")])
    (i,) = result.interruptions
    assert (i.fault_at, i.node, i.xid, i.cause, i.running_at) == (
        T0 + timedelta(minutes=10),
        "n7",
        79,
        "faulty_gpu",
        T0 + timedelta(minutes=20),
    )


def test_two_reporters_of_one_fault_give_the_earliest_fault_and_the_earliest_detection():
    # Issue 16, case 3: the agent saw the fault at 01:00:00 and reported it at 01:02; the scheduler saw it at
    # 01:00:30 and noticed it at 01:00:40. The fault is the agent's, the detection the scheduler's: 40 s, not 120 s.
    def report(seconds, detected_s, id_):
        detected = (T0 + timedelta(seconds=detected_s)).isoformat()
        return LifecycleEvent(
            T0 + timedelta(seconds=seconds), "run.failed", {"reason": "boom", "detected_at": detected}, id_, id_
        )

    reports = [report(3600, 3720, "agent"), report(3630, 3640, "sched")]
    for order in (reports, reports[::-1]):
        result = derive([started(0, "1"), *order, started(65, "2")])
        (i,) = result.interruptions
        assert (i.fault_at, i.detected_at) == (T0 + timedelta(seconds=3600), T0 + timedelta(seconds=3640))


def test_a_start_without_a_failure_supersedes_the_open_attempt():
    result = derive([started(0, "1"), started(30, "2")])
    assert [(a.end_reason, a.ended_at) for a in result.attempts] == [
        ("superseded", T0 + timedelta(minutes=30)),
        ("", None),
    ]
    assert result.state == "running" and result.interruptions == []


def test_planned_maintenance_is_marked_planned():
    result = derive([started(0, "1"), failed(10, "m", planned=True)])
    assert (result.interruptions[0].planned, result.interruptions[0].cause) == (True, "planned_maintenance")


def test_a_detection_time_before_the_fault_is_clamped_to_the_fault():
    event = failed(10, "f", detected_at="2026-03-01T00:05:00Z")
    assert derive([started(0, "1"), event]).interruptions[0].detected_at == T0 + timedelta(minutes=10)


@settings(max_examples=60, deadline=None)
@given(st.permutations(lifecycle_events(failure_and_restart())))
def test_it_gives_the_same_lifecycle_in_any_order(events):
    assert derive(events) == derive(lifecycle_events(failure_and_restart()))


def restored(minute, id_, step):
    return LifecycleEvent(T0 + timedelta(minutes=minute), "run.restored", {"from_step": step}, "s", id_)


def test_the_events_no_attempt_fits_count_nothing_and_are_said():
    # A failure stamped before the run's first start; a start while attempt 1 still ran; a restore in that attempt,
    # which restarted nothing; then a real fault, its restart, its restore and a second restore in the same attempt.
    result = derive(
        [
            failed(-5, "early"),
            started(0, "1"),
            restored(1, "warm", 0),  # the first attempt may start from a checkpoint: fine
            started(10, "2"),
            restored(11, "stray", 5),
            failed(20, "f"),
            started(25, "3"),
            restored(27, "r", 5),
            restored(28, "again", 9),
        ]
    )
    assert [(a.number, a.end_reason) for a in result.attempts] == [(1, "superseded"), (2, "failed"), (3, "")]
    (i,) = result.interruptions  # the early failure opened none: nothing ran yet
    assert (i.fault_at, i.resumed_at, i.resumed_from_step) == (
        T0 + timedelta(minutes=20),
        T0 + timedelta(minutes=27),
        5,
    )
    assert [(code, e.id) for code, e in result.odd] == [
        ("failure_before_start", "early"),
        ("attempt_superseded", "2"),
        ("restore_unmatched", "stray"),
        ("restore_repeated", "again"),
    ]


def test_a_failure_without_detected_at_is_noticed_when_it_happened():
    (i,) = derive([started(0, "1"), failed(10, "f")]).interruptions
    assert i.detected_at == i.fault_at == T0 + timedelta(minutes=10)  # detection 0 s
