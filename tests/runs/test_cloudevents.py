"""runs.domain.cloudevents: validation without a database."""

from datetime import UTC, datetime

import pytest

from runs.domain.cloudevents import SCHEMAS, parse_event, parse_events
from tests.stories import failure_and_restart


def good(**overrides):
    event = {
        "specversion": "1.0",
        "id": "1",
        "source": "s",
        "type": "run.step",
        "time": "2026-03-01T00:00:00Z",
        "data": {"run": "r1", "step": 5},
    }
    event.update(overrides)
    return event


def problems(raw):
    return [(p.field, p.reason) for p in parse_event(raw)[1]]


def test_it_accepts_every_event_of_the_scenario():
    events, found = parse_events(failure_and_restart(), max_batch=100)
    assert found == [] and len(events) == 19


def test_it_normalises_time_to_utc():
    event, _ = parse_event(good(time="2026-03-01T02:30:00.123456+02:30"))
    assert event.time == datetime(2026, 3, 1, 0, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize("value", ["2026-03-01T00:00:00", "2026-03-01", "1709251200", "2026-13-01T00:00:00Z", 5])
def test_it_rejects_times_without_zone_or_out_of_range(value):
    assert problems(good(time=value))[0][0] == "time"


@pytest.mark.parametrize("attribute", ["specversion", "id", "source", "type", "time", "data"])
def test_it_requires_each_attribute(attribute):
    raw = good()
    del raw[attribute]
    assert (attribute, "is required") in problems(raw)


def test_it_rejects_other_spec_versions():
    assert problems(good(specversion="0.3")) == [("specversion", "must be one of: 1.0")]


def test_it_names_each_bad_data_field():
    raw = good(type="checkpoint.completed", data={"run": "r1", "step": -1, "blocking_s": True, "tier": "tape"})
    assert problems(raw) == [
        ("data.step", "must be at least 0"),
        ("data.blocking_s", "must be a number"),
        ("data.bytes", "is required"),
        ("data.tier", "must be one of: memory, local, durable"),
    ]


def test_it_rejects_bools_posing_as_integers():
    assert problems(good(data={"run": "r1", "step": True})) == [("data.step", "must be an integer")]


def test_it_rejects_run_names_that_cannot_be_urls():
    assert problems(good(data={"run": "a/b", "step": 1}))[0][0] == "data.run"


def test_it_checks_categories_against_the_llama3_taxonomy():
    raw = good(type="run.failed", data={"run": "r1", "reason": "x", "category": "gremlins"})
    assert problems(raw)[0][0] == "data.category"
    raw["data"]["category"] = "gpu_hbm3"
    assert problems(raw) == []


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("Faulty GPU", "faulty_gpu"),
        ("faulty gpu", "faulty_gpu"),
        ("GPU HBM3 memory", "gpu_hbm3"),
        ("Network switch/cable", "network_switch_cable"),
        ("GPU thermal interface + sensor", "gpu_thermal"),
        ("NCCL watchdog timeouts", "nccl_watchdog"),
        ("  Silent Data Corruption ", "silent_data_corruption"),
        ("gpu-sram", "gpu_sram"),
    ],
)
def test_a_category_may_be_named_as_llama3_prints_it_and_is_kept_as_its_slug(sent, kept):
    (event,), found = parse_events(
        [good(type="run.failed", data={"run": "r1", "reason": "x", "category": sent})], max_batch=1
    )
    assert found == [] and event.data["category"] == kept


def test_an_unknown_category_names_the_choices():
    (reason,) = [
        r for f, r in problems(good(type="run.failed", data={"run": "r1", "reason": "x", "category": "Gremlins"}))
    ]
    assert "faulty_gpu" in reason and "or its label, as in 'Faulty GPU'" in reason


def test_it_keeps_unknown_data_fields_as_sent():
    event, _ = parse_event(good(data={"run": "r1", "step": 5, "loss": 2.5}))
    assert event.data == {"run": "r1", "step": 5, "loss": 2.5}


def test_it_refuses_an_empty_or_oversized_batch():
    assert parse_events([], max_batch=10)[1][0].reason == "the batch is empty"
    assert "at most 2 events" in parse_events([good(), good(id="2"), good(id="3")], max_batch=2)[1][0].reason


def test_it_stores_nothing_of_a_batch_with_one_bad_event():
    events, found = parse_events([good(), good(id="2", data={})], max_batch=10)
    assert events == [] and [(p.index, p.field) for p in found] == [(1, "data.run"), (1, "data.step")]


def test_every_type_has_a_required_subject_field():
    for type_, schema in SCHEMAS.items():
        assert {"run", "node"} & {name for name, (_, required) in schema.items() if required}, type_
