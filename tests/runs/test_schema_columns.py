"""Accepted means appliable: every field of every event type is held to the column that stores it, so the intake and
the record cannot drift apart (issue 15). Then every type is posted with every field at the edge of what the intake
accepts, and must be applied without an error: on PostgreSQL under CI, where a too-narrow column refuses the row."""

import json
from datetime import datetime

import pytest
from django.apps import apps
from django.db.backends.base.operations import BaseDatabaseOperations

from runs.domain.cloudevents import (
    SCHEMAS,
    SUBJECT_MAX,
    TIME_MAX,
    TIME_MIN,
    Choice,
    Int,
    Name,
    Number,
    Text,
    parse_sane_time,
)
from runs.models import Event

# (type, field) -> the column that stores it ("Model.column", runs models), or why no column holds it.
EVENT_DATA = "kept in the event's data only"
COLUMNS = {
    ("run.started", "run"): "Run.name",
    ("run.started", "cluster"): "Cluster.name",
    ("run.started", "gpus"): "Run.gpu_count",
    ("run.started", "nodes"): "Node.hostname",
    ("run.started", "job_id"): "Attempt.job_id",
    ("run.started", "model_params"): "Run.model_params",
    ("run.started", "checkpoint_interval_s"): "Run.checkpoint_interval_s",
    ("run.step", "run"): "Run.name",
    ("run.step", "step"): "Run.last_step",
    ("run.heartbeat", "run"): "Run.name",
    ("run.heartbeat", "phase"): EVENT_DATA,
    ("checkpoint.started", "run"): "Run.name",
    ("checkpoint.started", "step"): "Checkpoint.step",
    ("checkpoint.completed", "run"): "Run.name",
    ("checkpoint.completed", "step"): "Checkpoint.step",
    ("checkpoint.completed", "blocking_s"): "Checkpoint.blocking_s",
    ("checkpoint.completed", "bytes"): "Checkpoint.bytes",
    ("checkpoint.completed", "tier"): "Checkpoint.tier",
    ("checkpoint.completed", "durable_at"): "Checkpoint.durable_at",
    ("checkpoint.failed", "run"): "Run.name",
    ("checkpoint.failed", "step"): "Checkpoint.step",
    ("checkpoint.failed", "reason"): "Checkpoint.failure_reason",
    ("run.failed", "run"): "Run.name",
    ("run.failed", "reason"): "Interruption.reason",
    ("run.failed", "node"): "Node.hostname",
    ("run.failed", "gpu"): "GPU.index",
    ("run.failed", "xid"): "Interruption.xid",
    ("run.failed", "category"): "Interruption.cause",
    ("run.failed", "detected_at"): "Interruption.detected_at",
    ("run.failed", "planned"): "Interruption.planned",
    ("run.failed", "kind"): "Interruption.kind",
    ("run.restored", "run"): "Run.name",
    ("run.restored", "from_step"): "Interruption.resumed_from_step",
    ("run.completed", "run"): "Run.name",
    ("run.cancelled", "run"): "Run.name",
    ("run.cancelled", "reason"): EVENT_DATA,
    ("node.heartbeat", "node"): "Node.hostname",
    ("node.heartbeat", "cluster"): "Cluster.name",
    ("node.state", "node"): "Node.hostname",
    ("node.state", "state"): "Node.state",
    ("node.state", "reason"): "Node.state_reason",
    ("node.state", "cluster"): "Cluster.name",
    ("gpu.xid", "node"): "Node.hostname",
    ("gpu.xid", "gpu"): "GPU.index",
    ("gpu.xid", "xid"): "GPU.last_xid",
    ("gpu.xid", "message"): "GPU.last_xid_message",
    ("gpu.xid", "uuid"): "GPU.uuid",
    ("gpu.xid", "count"): "GPU.xid_count",
    ("gpu.ecc", "node"): "Node.hostname",
    ("gpu.ecc", "gpu"): "GPU.index",
    ("gpu.ecc", "corrected"): "GPU.ecc_corrected",
    ("gpu.ecc", "uncorrected"): "GPU.ecc_uncorrected",
    ("gpu.ecc", "remapped_rows_corrected"): "GPU.remapped_rows_corrected",
    ("gpu.ecc", "remapped_rows_uncorrected"): "GPU.remapped_rows_uncorrected",
    ("gpu.ecc", "remapped_rows_pending"): "GPU.remapped_rows_pending",
    ("gpu.ecc", "remapped_rows_failure"): "GPU.remapped_rows_failure",
    ("gpu.ecc", "retired_pages"): "GPU.retired_pages",
    ("gpu.health", "node"): "Node.hostname",
    ("gpu.health", "gpu"): "GPU.index",
    ("gpu.health", "temperature_c"): "GPU.temperature_c",
    ("gpu.health", "throttle_reasons"): "GPU.throttle_reasons",
    ("gpu.health", "nvlink_errors"): "GPU.nvlink_errors",
    ("gpu.health", "recovery_action"): "GPU.recovery_action",
    ("rank.step_time", "run"): "Run.name",
    ("rank.step_time", "rank"): "EventRollup.rank",
    ("rank.step_time", "node"): "Node.hostname",
    ("rank.step_time", "step"): EVENT_DATA,
    ("rank.step_time", "seconds"): "EventRollup.value_sum",
    ("rank.grad_norm", "run"): "Run.name",
    ("rank.grad_norm", "rank"): "EventRollup.rank",
    ("rank.grad_norm", "node"): "Node.hostname",
    ("rank.grad_norm", "step"): EVENT_DATA,
    ("rank.grad_norm", "value"): "EventRollup.value_sum",
    ("healthcheck.result", "node"): "Node.hostname",
    ("healthcheck.result", "check"): EVENT_DATA,
    ("healthcheck.result", "passed"): EVENT_DATA,
    ("healthcheck.result", "details"): EVENT_DATA,
}
# Counters that add an event's value to a column: the column must hold many maximal events, not one.
SUMMED = {"GPU.xid_count": 10**9}
INTEGER_RANGES = BaseDatabaseOperations.integer_field_ranges  # PostgreSQL's: smallint, integer, bigint


def _column(path: str):
    model, column = path.split(".")
    return apps.get_model("runs", model)._meta.get_field(column)


def test_every_field_of_every_type_names_where_it_is_kept():
    fields = {(type_, name) for type_, schema in SCHEMAS.items() for name in schema}
    assert fields - set(COLUMNS) == set(), "new fields: say which column stores each (or EVENT_DATA)"
    assert set(COLUMNS) - fields == set(), "fields gone from the schemas"


@pytest.mark.parametrize(("type_", "name"), sorted(k for k, v in COLUMNS.items() if v != EVENT_DATA))
def test_what_the_intake_accepts_the_column_holds(type_, name):
    check, _required = SCHEMAS[type_][name]
    path = COLUMNS[(type_, name)]
    column = _column(path)
    kind = column.get_internal_type()
    if isinstance(check, Int):
        low, high = INTEGER_RANGES[kind]
        assert check.minimum >= (low or 0) if "Positive" in kind else check.minimum >= low, path
        assert check.maximum * SUMMED.get(path, 1) <= high, f"{type_}.{name} up to {check.maximum}: {path} is {kind}"
    elif isinstance(check, Text | Name | Choice):
        assert check.max_length <= column.max_length, (
            f"{type_}.{name}: {check.max_length} > {path}'s {column.max_length}"
        )
    elif isinstance(check, Number):
        assert kind == "FloatField", path
        assert abs(check.minimum) <= 1e12 and abs(check.maximum) <= 1e12, "bounded: sums and charts stay finite"
    elif check is parse_sane_time:
        assert kind == "DateTimeField", path
    else:
        assert kind in ("BooleanField", "JSONField", "CharField"), (path, kind)


def _at_the_edge(check, name: str):
    """The most extreme value the intake accepts for a field."""
    if isinstance(check, Int):
        return check.maximum
    if isinstance(check, Number):
        return check.maximum
    if isinstance(check, Name):
        return ("n" + name.replace("_", ""))[:8].ljust(check.max_length, "x")
    if isinstance(check, Text):
        return "t" * check.max_length
    if isinstance(check, Choice):
        return max(check.choices, key=len)
    if check is parse_sane_time:
        return "2099-12-31T23:59:59.999999Z"
    return None


BASE = {
    "run.started": {"nodes": ["edge-node"]},
    "gpu.health": {"throttle_reasons": ["hw_slowdown"]},
    "healthcheck.result": {"passed": True, "details": "ok"},
    "run.failed": {"planned": False},
    "gpu.ecc": {"remapped_rows_pending": True, "remapped_rows_failure": True},
}


def edge_event(type_: str, i: int) -> dict:
    data = dict(BASE.get(type_, {}))
    for name, (check, _required) in SCHEMAS[type_].items():
        if name not in data:
            value = _at_the_edge(check, name)
            if value is not None:
                data[name] = value
    # One run and one node for all, so the lifecycle and the GPU rows see every edge value together.
    for key, value in (("run", "edge-run"), ("node", "edge-node"), ("cluster", "edge-cluster")):
        if key in data:
            data[key] = value
    if type_ == "run.failed":
        data["category"] = "faulty_gpu"
    return {
        "specversion": "1.0",
        "id": f"edge-{i}",
        "source": "edge://" + "s" * 990,
        "type": type_,
        "time": "2026-03-01T00:00:00+14:00",
        "subject": "u" * SUBJECT_MAX,
        "data": data,
    }


@pytest.mark.reliability(
    "Every event type with every field at the edge of what the intake accepts (largest integers, longest strings, "
    "times at the end of 2099, the longest subject and source)",
    how="one batch through POST /api/v1/events, applied in-process; under CI on PostgreSQL, whose columns refuse "
    "what they cannot hold",
    outcome="202, every event applied with no error, and every page and goodput API that shows them answers 200",
)
def test_every_type_at_the_edge_of_what_is_accepted_is_applied(post, admin_client, reader):
    events = [edge_event(type_, i) for i, type_ in enumerate(SCHEMAS)]
    post(events)
    stored = Event.objects.order_by("id")
    assert stored.count() == len(events)
    assert [(e.type, e.error) for e in stored if e.applied_at is None or e.error] == []
    for url in ("/", "/fleet", "/runs/edge-run", "/nodes/edge-node", "/incidents/"):
        assert admin_client.get(url).status_code == 200, url
    for url in ("/api/v1/runs/edge-run/goodput", "/api/v1/fleet/goodput", "/api/v1/runs/edge-run/advice"):
        assert reader.get(url).status_code == 200, url


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time", "0001-01-01T00:00:00+01:00"),
        ("time", "9999-12-31T23:59:59-01:00"),
        ("time", "1999-12-31T23:59:59Z"),
        ("time", "2100-01-01T00:00:00Z"),
        ("data.detected_at", "0001-01-01T00:00:00+01:00"),
        ("data.durable_at", "9999-12-31T23:59:59-01:00"),
        ("subject", "u" * (SUBJECT_MAX + 1)),
        ("data.gpus", 2**40),
        ("data.xid", 2**40),
        ("data.count", 2**40),
        ("data.retired_pages", 2**40),
        ("data.job_id", "j" * 500),
        ("data.uuid", "g" * 500),
        ("data.blocking_s", 1e11),
    ],
)
@pytest.mark.reliability(
    "Values the record cannot hold: times in years 1, 1999, 2100 and 9999 (in `time`, `detected_at`, `durable_at`), "
    "integers of 2^40 for narrow columns, a 500-character job id or GPU UUID, a subject over 1,000 characters, a "
    "checkpoint blocking for 1e11 s",
    how="one event each, posted to POST /api/v1/events",
    outcome="400 naming the field; nothing stored (before: 202, then a failed apply or pages down)",
)
def test_a_value_the_record_cannot_hold_is_refused_naming_the_field(writer, field, value):
    type_ = {
        "data.detected_at": "run.failed",
        "data.durable_at": "checkpoint.completed",
        "data.gpus": "run.started",
        "data.xid": "gpu.xid",
        "data.count": "gpu.xid",
        "data.retired_pages": "gpu.ecc",
        "data.job_id": "run.started",
        "data.uuid": "gpu.xid",
        "data.blocking_s": "checkpoint.completed",
    }.get(field, "run.step")
    event = edge_event(type_, 0)
    if field.startswith("data."):
        event["data"][field[5:]] = value
    else:
        event[field] = value
    response = writer.post("/api/v1/events", json.dumps(event), content_type="application/cloudevents+json")
    assert response.status_code == 400, response.content
    assert [e["field"] for e in response.json()["errors"]] == [field]
    assert not Event.objects.exists()


def test_the_window_of_times_is_the_one_the_docs_give():
    assert (TIME_MIN, TIME_MAX) == (
        datetime.fromisoformat("2000-01-01T00:00Z"),
        datetime.fromisoformat("2100-01-01T00:00Z"),
    )
