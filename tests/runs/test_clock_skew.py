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
from tests.stories import T0, failure_and_restart, record_snapshot, ts

URL = "/api/v1/events"
DAYS = timedelta(days=3)
END = T0 + timedelta(hours=3)


def _post_live(client, events, capture, clock_offset=timedelta(0), skewed=lambda e: True):
    """Post each event when it happens; the events `skewed` picks are stamped by a clock `clock_offset` off."""
    for raw in events:
        true_time = parse_time(raw["time"])
        if skewed(raw):
            raw = json.loads(json.dumps(raw))
            raw["time"] = ts(true_time + clock_offset)
            if "detected_at" in raw["data"]:
                raw["data"]["detected_at"] = ts(parse_time(raw["data"]["detected_at"]) + clock_offset)
        with time_machine.travel(true_time, tick=False), capture(execute=True):
            response = client.post(URL, json.dumps([raw]), content_type="application/cloudevents-batch+json")
        assert response.status_code == 202, response.json()


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
