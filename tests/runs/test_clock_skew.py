"""Sources whose clocks are wrong: their events are accepted and flagged, and the goodput stays right.

Each event is posted at the moment it really happens (time-machine), stamped by a clock that is off.
"""

import json
from datetime import timedelta

import pytest
import time_machine

from runs import selectors
from runs.domain.cloudevents import parse_time
from runs.models import Event, Run
from tests.stories import T0, at, event, failure_and_restart, record_snapshot, ts

URL = "/api/v1/events"
DAYS = timedelta(days=3)
MINUTES = timedelta(minutes=10)
END = T0 + timedelta(hours=3)


def _stamped(raw: dict, clock_offset: timedelta) -> dict:
    """The event as a clock `clock_offset` off stamps it: its time and the times in its data."""
    raw = json.loads(json.dumps(raw))
    raw["time"] = ts(parse_time(raw["time"]) + clock_offset)
    for name in ("detected_at", "durable_at"):
        if name in raw["data"]:
            raw["data"][name] = ts(parse_time(raw["data"][name]) + clock_offset)
    return raw


def _post(client, events, capture, *, at):
    """Post the events as one batch, received at `at`, applied on commit."""
    with time_machine.travel(at, tick=False), capture(execute=True):
        response = client.post(URL, json.dumps(events), content_type="application/cloudevents-batch+json")
    assert response.status_code == 202, response.json()


def _post_live(client, events, capture, clock_offset=timedelta(0), skewed=lambda e: True):
    """Post each event when it happens; the events `skewed` picks are stamped by a clock `clock_offset` off."""
    for raw in events:
        true_time = parse_time(raw["time"])
        _post(client, [_stamped(raw, clock_offset) if skewed(raw) else raw], capture, at=true_time)


def _goodput():
    run = Run.objects.get(name="r1")
    report = selectors.run_goodput_get(run=run, since=None, until=None, now=END)
    return report.total, [(day, b) for day, b in report.daily]


@pytest.mark.reliability(
    "a trainer and scheduler whose clock runs 3 days fast",
    how="the failure-and-restart run posted live (time-machine), every time stamped +3 days",
    outcome="all accepted (202) and flagged (skew_s = +3 days); events kept at their receipt; record and goodput "
    "identical to the on-time run",
)
def test_a_fast_clock_is_flagged_and_the_record_is_as_if_on_time(writer, django_capture_on_commit_callbacks):
    _post_live(writer, failure_and_restart(), django_capture_on_commit_callbacks)
    on_time = record_snapshot(), _goodput()

    _reset()
    _post_live(writer, failure_and_restart(), django_capture_on_commit_callbacks, clock_offset=DAYS)

    skews = list(Event.objects.values_list("skew_s", flat=True))
    assert len(skews) == len(failure_and_restart()) and all(s == DAYS.total_seconds() for s in skews)
    assert all(e.time == e.received_at for e in Event.objects.all())
    assert (record_snapshot(), _goodput()) == on_time


@pytest.mark.reliability(
    "a node agent whose clock runs 3 days slow",
    how="its Xid and heartbeat events stamped -3 days, posted live among the on-time run events",
    outcome="accepted and flagged (skew_s = -3 days), kept as sent; the run's interruptions and goodput identical "
    "to the on-time run",
)
def test_a_slow_clock_is_flagged_and_the_goodput_is_untouched(writer, django_capture_on_commit_callbacks):
    _post_live(writer, failure_and_restart(), django_capture_on_commit_callbacks)
    on_time = record_snapshot()["interruptions"], _goodput()

    _reset()
    from_agent = {"gpu.xid", "node.heartbeat"}
    _post_live(
        writer,
        failure_and_restart(),
        django_capture_on_commit_callbacks,
        clock_offset=-DAYS,
        skewed=lambda e: e["type"] in from_agent,
    )

    flagged = Event.objects.filter(skew_s__isnull=False)
    assert sorted(flagged.values_list("type", flat=True)) == sorted(from_agent)
    assert all(e.skew_s == pytest.approx(-DAYS.total_seconds()) for e in flagged)
    assert (record_snapshot()["interruptions"], _goodput()) == on_time


@pytest.mark.reliability(
    "a scheduler whose clock runs 10 minutes fast delivers a whole run in one batch (its spool emptied at the end)",
    how="the failure-and-restart run, every time stamped +10 min, posted as one batch when its last event happens",
    outcome="accepted (202); the batch's skew measured once and every event moved back by it (skew_s = +600 s on "
    "each): they land at their true times in the sender's order, and the record and goodput are the on-time run's "
    "(before: only the run.completed, dated past the tolerance, was moved back; the other 18 kept their fast dates, "
    "so every time in the record but the end was 10 minutes late and the restarted attempt 10 minutes short)",
)
def test_a_fast_clock_s_batch_keeps_its_order_and_spacing(writer, django_capture_on_commit_callbacks):
    story = failure_and_restart()
    last = parse_time(story[-1]["time"])
    _post(writer, story, django_capture_on_commit_callbacks, at=last)
    on_time = record_snapshot(), _goodput()

    _reset()
    _post(writer, [_stamped(e, MINUTES) for e in story], django_capture_on_commit_callbacks, at=last)

    stored = dict(Event.objects.values_list("event_id", "time"))
    assert stored == {e["id"]: parse_time(e["time"]) for e in story}
    assert set(Event.objects.values_list("skew_s", flat=True)) == {MINUTES.total_seconds()}
    assert (record_snapshot(), _goodput()) == on_time


@pytest.mark.reliability(
    "a batch whose sender's clock runs 90 s fast, its earlier event inside the 60 s tolerance and its later one past "
    "it, with another source's on-time event in the same batch",
    how="run.started (stamped +30 s) and run.failed (stamped +85 s) of one source and a gpu.xid of an agent's source "
    "(on time) posted as one batch",
    outcome="the source's two events both moved back by its one measured skew (85 s, flagged on each), the failure "
    "after the start as sent: attempt 1 ended failed, one interruption, the run restarting; the other source's event "
    "kept as sent, unflagged (before: the start kept at +30 s and the failure moved to the receipt, before it: the run "
    "still running, its failure counted as one before any start)",
)
def test_a_batch_straddling_the_tolerance_keeps_its_sender_s_order(writer, django_capture_on_commit_callbacks):
    received, fast = at(60), timedelta(seconds=90)
    start = {"run": "r1", "cluster": "c1", "gpus": 16, "nodes": ["n1", "n2"], "job_id": "100"}
    xid = {"node": "n2", "gpu": 3, "xid": 79, "message": "GPU has fallen off the bus"}
    failed = {"run": "r1", "reason": "Xid 79", "node": "n2", "gpu": 3, "xid": 79}
    batch = [
        _stamped(event("run.started", received - timedelta(seconds=60), "start", **start), fast),
        event("gpu.xid", received - timedelta(seconds=10), "xid", source="dcgm://n2", **xid),  # an agent, on time
        _stamped(event("run.failed", received - timedelta(seconds=5), "failed", **failed), fast),
    ]
    _post(writer, batch, django_capture_on_commit_callbacks, at=received)

    rows = {e: (t, skew) for e, t, skew in Event.objects.values_list("event_id", "time", "skew_s")}
    assert rows == {
        "start": (received - timedelta(seconds=55), 85.0),
        "failed": (received, 85.0),
        "xid": (received - timedelta(seconds=10), None),
    }
    run = Run.objects.get(name="r1")
    assert run.state == "restarting"
    assert list(run.attempts.values_list("number", "end_reason", "ended_at")) == [(1, "failed", received)]
    assert list(run.interruptions.values_list("fault_at", "node__hostname")) == [(received, "n2")]


def test_the_flag_shows_in_the_node_api(writer, django_capture_on_commit_callbacks):
    fast = {**failure_and_restart()[-2], "time": ts(T0 + DAYS)}  # node.heartbeat of n3, 3 days ahead
    with time_machine.travel(T0, tick=False), django_capture_on_commit_callbacks(execute=True):
        assert writer.post(URL, json.dumps(fast), content_type="application/cloudevents+json").status_code == 202
    node = writer.get("/api/v1/nodes/n3").json()
    assert [e["skew_s"] for e in node["recent_events"]] == [DAYS.total_seconds()]


def _reset():
    from runs.models import GPU, Cluster, Node

    for model in (Event, Run, Node, GPU, Cluster):
        model.objects.all().delete()


def test_the_flag_shows_on_the_node_page(writer, client, django_capture_on_commit_callbacks, django_user_model):
    fast = {**failure_and_restart()[-2], "time": ts(T0 + DAYS)}
    with time_machine.travel(T0, tick=False), django_capture_on_commit_callbacks(execute=True):
        assert writer.post(URL, json.dumps(fast), content_type="application/cloudevents+json").status_code == 202
    client.force_login(django_user_model.objects.create_user("viewer"))
    page = client.get("/nodes/n3").content.decode()
    assert 'class="badge clock-skew"' in page and "clock +259,200 s" in page


def test_a_loaded_history_is_not_flagged_late(db):
    from runs.domain.simulator import SimulationConfig, simulate
    from runs.management.commands.simulate import ingest

    config = SimulationConfig(gpus=64, days=2, seed=3, start=T0)  # months before today
    delivery = ingest(simulate(config))
    assert delivery.stored > 0
    assert not Event.objects.filter(skew_s__isnull=False).exists()
