"""Retention (runs.retention): raw high-rate events rolled up per series and UTC day, then deleted in batches.

Runs on SQLite and on PostgreSQL; the lock test needs PostgreSQL (SKIP LOCKED), skips without it, fails under CI.
"""

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.db.models import F
from django.utils import timezone

from runs.domain.cloudevents import parse_events
from runs.domain.retention import rank_age_check
from runs.models import GPU, Event, EventRollup, Node
from runs.retention import RANK_TYPES, RAW_TYPES, events_prune, rollups_fold
from runs.services import events_ingest, record_rebuild
from runs.tasks import prune_events

NOW = timezone.now().replace(microsecond=0)
OLD = (NOW - timedelta(days=20)).replace(hour=23, minute=50, second=0)  # ten minutes before a UTC midnight
RETAIN = timedelta(days=14)


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _event(n: int, type_: str, at: datetime, **data) -> dict:
    return {
        "specversion": "1.0",
        "id": f"e{n}",
        "source": "test/retention",
        "type": type_,
        "time": _ts(at),
        "data": data,
    }


def _minutes(m: float) -> datetime:
    return OLD + timedelta(minutes=m)


# Step times of rank 0 and 1 on n1 across the midnight (two UTC days), with everything around them.
STEP_TIMES = [(0, 0, 6.0), (0, 5, 6.5), (0, 15, 9.0), (1, 0, 6.1), (1, 5, 6.2)]  # (rank, minute, seconds)


def story() -> list[dict]:
    events = [
        _event(1, "run.started", _minutes(-60), run="r1", cluster="c1", gpus=16, nodes=["n1", "n2"], job_id="j1"),
        _event(2, "run.step", _minutes(-30), run="r1", step=100),
        _event(3, "checkpoint.started", _minutes(-20), run="r1", step=100),
        _event(4, "gpu.xid", _minutes(-10), node="n1", gpu=0, xid=79, message="fell off the bus"),
        _event(5, "gpu.ecc", _minutes(-9), node="n1", gpu=0, corrected=1, uncorrected=0),
        _event(6, "node.state", _minutes(-8), node="n2", state="in_service", reason="burn-in passed"),
        _event(7, "healthcheck.result", _minutes(-7), node="n1", check="dcgm", passed=True),
        _event(8, "run.failed", _minutes(30), run="r1", reason="Xid 79", node="n1", gpu=0),
    ]
    n = 100
    for rank, minute, seconds in STEP_TIMES:
        events.append(
            _event(n, "rank.step_time", _minutes(minute), run="r1", rank=rank, node="n1", step=minute, seconds=seconds)
        )
        events.append(
            _event(n + 1, "rank.grad_norm", _minutes(minute), run="r1", rank=rank, node="n1", step=minute, value=1.5)
        )
        n += 2
    for gpu, node in ((0, "n1"), (1, "n1")):
        for minute, temp in ((0, 60.0), (1, 64.0), (2, 62.0)):
            health = {"throttle_reasons": [], "nvlink_errors": 0, "recovery_action": 0, "temperature_c": temp}
            events.append(_event(n, "gpu.health", _minutes(minute), node=node, gpu=gpu, **health))
            n += 1
    for node in ("n1", "n2"):
        for minute in (0, 1, 2):
            events.append(_event(n, "node.heartbeat", _minutes(minute), node=node))
            n += 1
    # Recent samples: n1's heartbeat and GPU 0's health go on; n2 and GPU 1 fell silent 20 days ago.
    health = {"throttle_reasons": [], "nvlink_errors": 0, "recovery_action": 0, "temperature_c": 55.0}
    events.append(_event(900, "gpu.health", NOW - timedelta(hours=1), node="n1", gpu=0, **health))
    events.append(_event(901, "node.heartbeat", NOW - timedelta(hours=1), node="n1"))
    events.append(
        _event(902, "rank.step_time", NOW - timedelta(hours=1), run="r1", rank=0, node="n1", step=9, seconds=7.0)
    )
    return events


def ingest(raw: list[dict], *, arrived_when_sent: bool = True) -> None:
    events, problems = parse_events(raw, max_batch=len(raw))
    assert problems == []
    stored = events_ingest(events=events)  # applied and detected in-process (tests run Celery eagerly)
    if arrived_when_sent:  # as an agent's samples do; else they arrive now, late
        Event.objects.filter(pk__in=stored.event_ids).update(received_at=F("time"))


def by_type() -> Counter:
    return Counter(Event.objects.values_list("type", flat=True))


@pytest.fixture
def stored(db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ingest(story())
    assert not Event.objects.filter(applied_at__isnull=True).exists()
    assert not Event.objects.filter(detected_at__isnull=True).exists()
    return by_type()


def test_rollups_fold_sums_each_series_per_utc_day():
    day1 = datetime(2026, 3, 1, 23, 50, tzinfo=UTC)
    rows = [
        ("rank.step_time", "r1", "n1", day1, {"rank": 0, "seconds": 6.0}),
        ("rank.step_time", "r1", "n1", day1 + timedelta(minutes=5), {"rank": 0, "seconds": 8.0}),
        ("rank.step_time", "r1", "n1", day1 + timedelta(minutes=15), {"rank": 0, "seconds": 9.0}),  # next UTC day
        ("rank.step_time", "r1", "n1", day1, {"rank": 1, "seconds": 7.0}),
        ("node.heartbeat", "", "n1", day1, {"node": "n1"}),
        ("node.heartbeat", "", "n1", day1 + timedelta(minutes=1), {"node": "n1"}),
        ("gpu.health", "", "n1", day1, {"gpu": 3, "temperature_c": 70.5}),
    ]
    folded = rollups_fold(rows)
    first = folded["rank.step_time", day1.date(), "r1", "n1", -1, 0]
    assert (first.count, first.value_min, first.value_max, first.value_sum) == (2, 6.0, 8.0, 14.0)
    assert (first.first_at, first.last_at) == (day1, day1 + timedelta(minutes=5))
    assert folded["rank.step_time", datetime(2026, 3, 2).date(), "r1", "n1", -1, 0].count == 1
    assert folded["rank.step_time", day1.date(), "r1", "n1", -1, 1].value_sum == 7.0
    heartbeats = folded["node.heartbeat", day1.date(), "", "n1", -1, -1]
    assert (heartbeats.count, heartbeats.value_min, heartbeats.value_sum) == (2, None, 0.0)
    assert folded["gpu.health", day1.date(), "", "n1", 3, -1].value_max == 70.5
    with pytest.raises(ValueError, match="run.failed events are not rolled up"):
        rollups_fold([("run.failed", "r1", "", day1, {})])


def test_it_rolls_up_and_deletes_only_old_raw_samples(stored):
    result = events_prune(now=NOW, older_than=RETAIN)
    after = by_type()
    # Every lifecycle, checkpoint, Xid, ECC, state, step and health-check event stays.
    for type_ in set(stored) - set(RAW_TYPES):
        assert after[type_] == stored[type_], type_
    # Old rank samples all go; the recent step time stays.
    assert after["rank.grad_norm"] == 0
    assert list(Event.objects.filter(type="rank.step_time").values_list("event_id", flat=True)) == ["e902"]
    # The newest heartbeat of silent n2 and the newest health of silent GPU 1 stay; n1 and GPU 0 have recent ones.
    kept = Event.objects.filter(type__in=("node.heartbeat", "gpu.health"))
    assert {(e.type, e.node_name, e.data.get("gpu"), e.time) for e in kept} == {
        ("node.heartbeat", "n2", None, _minutes(2)),
        ("gpu.health", "n1", 1, _minutes(2)),
        ("gpu.health", "n1", 0, NOW - timedelta(hours=1)),
        ("node.heartbeat", "n1", None, NOW - timedelta(hours=1)),
    }
    assert (
        result.deleted == sum(stored.values()) - sum(after.values()) == 10 + 5 + 5
    )  # rank samples, health, heartbeats
    day1, day2 = OLD.date(), (OLD + timedelta(days=1)).date()
    rank0 = EventRollup.objects.get(type="rank.step_time", day=day1, run_name="r1", node_name="n1", rank=0)
    assert (rank0.count, rank0.value_min, rank0.value_max, rank0.value_sum) == (2, 6.0, 6.5, 12.5)
    assert (rank0.first_at, rank0.last_at, rank0.gpu) == (_minutes(0), _minutes(5), -1)
    assert EventRollup.objects.get(type="rank.step_time", day=day2, rank=0).value_sum == 9.0
    assert EventRollup.objects.get(type="rank.grad_norm", day=day1, rank=1).count == 2
    gpu0 = EventRollup.objects.get(type="gpu.health", gpu=0)
    assert (gpu0.count, gpu0.value_min, gpu0.value_max, gpu0.value_mean) == (3, 60.0, 64.0, 62.0)
    assert EventRollup.objects.get(type="gpu.health", gpu=1).count == 2  # its newest sample is still raw
    assert EventRollup.objects.get(type="node.heartbeat", node_name="n2").count == 2
    assert EventRollup.objects.get(type="node.heartbeat", node_name="n1").value_min is None


def test_pruning_twice_counts_nothing_twice_and_later_samples_add_up(stored, django_capture_on_commit_callbacks):
    first = events_prune(now=NOW, older_than=RETAIN)
    rollups = list(EventRollup.objects.values_list("type", "day", "rank", "gpu", "count", "value_sum", "value_min"))
    again = events_prune(now=NOW, older_than=RETAIN)
    assert first.deleted > 0 and (again.deleted, again.batches) == (0, 0)
    assert (
        list(EventRollup.objects.values_list("type", "day", "rank", "gpu", "count", "value_sum", "value_min"))
        == rollups
    )
    # A sample of an already rolled day arriving late is kept for the retention age after its arrival ...
    with django_capture_on_commit_callbacks(execute=True):
        late = _event(950, "rank.step_time", _minutes(1), run="r1", rank=0, node="n1", step=1, seconds=3.0)
        ingest([late], arrived_when_sent=False)
    assert events_prune(now=NOW, older_than=RETAIN).deleted == 0
    # ... then added to the same rollup (with e902, the step time of an hour ago, into its own day).
    assert events_prune(now=timezone.now() + RETAIN + timedelta(hours=1), older_than=RETAIN).deleted == 2
    rank0 = EventRollup.objects.get(type="rank.step_time", day=OLD.date(), rank=0)
    assert (rank0.count, rank0.value_min, rank0.value_max, rank0.value_sum) == (3, 3.0, 6.5, 15.5)


def test_it_deletes_at_most_a_batch_a_transaction(stored):
    # Each batch is an atomic block: a savepoint inside the test's transaction. Count the events as each one is
    # released (committed); the differences are what each batch deleted.
    counts = [Event.objects.count()]

    def record(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith("RELEASE SAVEPOINT"):
            counts.append(Event.objects.count())
        return result

    with connection.execute_wrapper(record):
        result = events_prune(now=NOW, older_than=RETAIN, batch_size=4)
    deleted = [before - after for before, after in zip(counts, counts[1:], strict=False)]
    assert result.deleted == sum(deleted) == 20
    assert max(deleted) <= 4 and len([n for n in deleted if n]) == result.batches > 4
    assert not Event.objects.filter(type="rank.grad_norm").exists()


def test_max_batches_bounds_one_call_and_the_next_goes_on(stored):
    # Three batches of four stored rows: the eight lifecycle and fault events first, then four rank samples.
    first = events_prune(now=NOW, older_than=RETAIN, batch_size=4, max_batches=3)
    assert first.deleted == 4
    rest = events_prune(now=NOW, older_than=RETAIN, batch_size=4)
    assert first.deleted + rest.deleted == 20


def test_it_leaves_events_not_yet_applied_or_detected(stored):
    Event.objects.filter(event_id="e101").update(detected_at=None)  # rank 0's first grad norm, undetected
    Event.objects.filter(event_id="e100").update(applied_at=None)
    events_prune(now=NOW, older_than=RETAIN)
    assert set(Event.objects.filter(type__in=RANK_TYPES).values_list("event_id", flat=True)) == {"e100", "e101", "e902"}


def test_the_record_rebuilds_the_same_after_pruning(stored):
    events_prune(now=NOW, older_than=RETAIN)
    record_rebuild()
    assert Node.objects.get(hostname="n2").last_heartbeat_at == _minutes(2)
    assert GPU.objects.get(node__hostname="n1", index=1).temperature_c == 62.0
    assert GPU.objects.get(node__hostname="n1", index=0).temperature_c == 55.0


def test_it_refuses_a_retention_shorter_than_a_day(db):
    with pytest.raises(ValueError, match="at least a day"):
        events_prune(now=NOW, older_than=timedelta(hours=23))
    with pytest.raises(CommandError, match="--days must be at least 1"):
        call_command("prune_events", "--days", "0")


def test_the_command_prunes_what_is_older_than_its_days(stored, capsys):
    call_command("prune_events", "--days", "30", "--batch", "7")
    assert capsys.readouterr().out.startswith("Pruned 0 raw events older than 30 days in 0 batches")
    call_command("prune_events", "--days", "14", "--batch", "7")
    out = capsys.readouterr().out
    assert out.startswith("Pruned 20 raw events older than 14 days in ") and "daily rollups written" in out
    assert by_type()["rank.grad_norm"] == 0


def test_the_task_prunes_by_the_settings(stored, settings):
    settings.EVENTS_RAW_RETENTION_DAYS, settings.EVENTS_RANK_RETENTION_HOURS = 30, 30 * 24
    assert prune_events() == 0
    settings.EVENTS_RANK_RETENTION_HOURS = 6  # the 20-day-old rank samples go; heartbeats and health keep 30 days
    assert prune_events() == 10
    settings.EVENTS_RAW_RETENTION_DAYS, settings.EVENTS_PRUNE_BATCH = 14, 7
    assert prune_events() == 10
    assert prune_events() == 0


RANK_AGE = timedelta(hours=6)


def test_rank_samples_go_at_their_own_age_and_heartbeats_keep_theirs(db, django_capture_on_commit_callbacks):
    def ago(hours: float) -> datetime:
        return NOW - timedelta(hours=hours)

    # In order of arrival (ids grow with it), between the story's old samples and its last three, an hour ago.
    between = [
        _event(960, "rank.step_time", ago(8), run="r1", rank=0, node="n1", step=2, seconds=7.5),
        _event(961, "rank.grad_norm", ago(8), run="r1", rank=0, node="n1", step=2, value=2.5),
        _event(962, "node.heartbeat", ago(8), node="n1"),  # not n1's newest: that one came an hour ago
        _event(963, "rank.step_time", ago(5), run="r1", rank=1, node="n1", step=3, seconds=6.5),
    ]
    raw = story()
    with django_capture_on_commit_callbacks(execute=True):
        ingest(raw[:-3] + between + raw[-3:])
    result = events_prune(now=NOW, older_than=RETAIN, rank_older_than=RANK_AGE)
    # The 20 old raw samples as with one age, and the two rank samples of 8 hours ago.
    assert result.deleted == 20 + 2
    kept = set(Event.objects.filter(type__in=RAW_TYPES).values_list("event_id", flat=True))
    assert {"e960", "e961"}.isdisjoint(kept) and {"e962", "e963", "e902"} <= kept
    day = ago(8).astimezone(UTC).date()
    steps = EventRollup.objects.get(type="rank.step_time", day=day, run_name="r1", node_name="n1", rank=0)
    assert (steps.count, steps.value_min, steps.value_max, steps.value_sum) == (1, 7.5, 7.5, 7.5)
    assert (steps.first_at, steps.last_at) == (ago(8), ago(8))
    norms = EventRollup.objects.get(type="rank.grad_norm", day=day, rank=0)
    assert (norms.count, norms.value_sum) == (1, 2.5)
    assert not EventRollup.objects.filter(type="node.heartbeat", day=day).exists()


def test_it_refuses_rank_samples_kept_shorter_than_the_detectors_read(db, settings):
    with pytest.raises(ValueError, match="rank samples must be kept at least 1 h, not 0.5 h"):
        events_prune(now=NOW, older_than=RETAIN, rank_older_than=timedelta(minutes=30))
    settings.STRAGGLER_WINDOW_S, settings.STRAGGLER_CONSECUTIVE = 1800.0, 3
    with pytest.raises(ValueError, match=r"at least 1.5 h, not 1 h: .* 3 windows of 1800 s \(1.5 h\)"):
        events_prune(now=NOW, older_than=RETAIN, rank_older_than=timedelta(hours=1))
    assert events_prune(now=NOW, older_than=RETAIN, rank_older_than=timedelta(hours=2)).deleted == 0
    with pytest.raises(CommandError, match="--rank-hours 1: rank samples must be kept at least 1.5 h"):
        call_command("prune_events", "--rank-hours", "1")


def test_the_settings_refuse_a_rank_age_shorter_than_the_detectors_read():
    # fleetops/settings.py turns this ValueError into ImproperlyConfigured for EVENTS_RANK_RETENTION_HOURS.
    rank_age_check(timedelta(hours=1), straggler_window_s=300.0, straggler_consecutive=3)
    with pytest.raises(ValueError, match=r"at least 1 h, not 0 h: the detectors read back an hour at least"):
        rank_age_check(timedelta(hours=0), straggler_window_s=300.0, straggler_consecutive=3)
    rank_age_check(timedelta(hours=3), straggler_window_s=3600.0, straggler_consecutive=3)
    with pytest.raises(ValueError, match=r"at least 3 h, not 2 h: .* 3 windows of 3600 s \(3 h\)"):
        rank_age_check(timedelta(hours=2), straggler_window_s=3600.0, straggler_consecutive=3)


def test_the_command_prunes_rank_samples_by_their_hours(stored, capsys):
    call_command("prune_events", "--days", "30", "--rank-hours", "6")
    assert capsys.readouterr().out.startswith("Pruned 10 raw events older than 30 days (rank samples 6 hours) in ")
    assert not Event.objects.filter(type="rank.grad_norm").exists()
    assert Event.objects.filter(type="node.heartbeat").count() == stored["node.heartbeat"]


def test_the_node_page_shows_the_rolled_up_days(stored, client, django_user_model):
    events_prune(now=NOW, older_than=RETAIN)
    client.force_login(django_user_model.objects.create_user("oncall"))
    page = client.get("/nodes/n1").content.decode()
    assert 'id="node-rollups"' in page and "raw samples are kept 14 days, then summed" in page
    row = page.split(f'id="rollup-{OLD.date():%Y-%m-%d}-gpuhealth"')[1].split("</tr>")[0]
    # GPU 0's three samples and GPU 1's two older ones: 60, 64, 62, 60, 64 °C; whole, so no decimals.
    assert [cell.split(">")[-1] for cell in row.split("</td>")[:-1]][2:] == ["5", "60", "62", "64"]
    assert client.get("/nodes/n2").content.decode().count('id="rollup-') == 1  # heartbeats only


def test_the_node_page_says_the_rank_samples_own_age(stored, client, django_user_model, settings):
    settings.EVENTS_RANK_RETENTION_HOURS = 6
    client.force_login(django_user_model.objects.create_user("oncall"))
    events_prune(now=NOW, older_than=RETAIN, rank_older_than=timedelta(hours=6))
    page = client.get("/nodes/n1").content.decode()
    assert "rank samples are kept 6 hours, heartbeats and health 14 days, then summed here" in page


@pytest.mark.django_db(transaction=True)
def test_a_row_another_transaction_holds_is_skipped_and_pruned_later(postgres):
    ingest(story())
    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def hold():
        with transaction.atomic():
            list(Event.objects.select_for_update().filter(event_id="e100").values_list("id"))
            held.set()
            release.wait(10)
        connections.close_all()
        done.set()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    try:
        first = events_prune(now=NOW, older_than=RETAIN)
    finally:
        release.set()
        thread.join(10)
    assert Event.objects.filter(event_id="e100").exists()
    assert events_prune(now=NOW, older_than=RETAIN).deleted == 1
    rank0 = EventRollup.objects.get(type="rank.step_time", day=OLD.date(), rank=0)
    assert first.deleted > 0 and (rank0.count, rank0.value_sum) == (2, 12.5)
