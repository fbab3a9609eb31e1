"""Validation of CloudEvents 1.0 (structured, batched and binary HTTP modes) and of FleetOps' event types, version 1.

Pure: no Django import. `parse_events` turns a decoded JSON body into validated events or a list of
problems, each naming the event's index, the field and the reason, so that a batch can be refused
whole with an answer the sender can act on. `binary_event` turns a binary-mode request's ce-* headers and
body into the same structured event, so every mode goes through the same checks.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from runs.domain.taxonomy import Cause, cause_named

SPECVERSION = "1.0"
NODE_STATES = ("in_service", "suspect", "cordoned", "draining", "in_repair", "burn_in", "hot_spare", "retired")
NODE_STATE_CHOICES = [(state, state.replace("_", " ")) for state in NODE_STATES]
CHECKPOINT_TIERS = ("memory", "local", "durable")
INTERRUPTION_KINDS = ("crash", "hang")  # a hang is found by the watchdog: no step for too long

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}\Z")  # \Z: "$" would let a trailing newline in
_NAMES = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}(?:\n[A-Za-z0-9][A-Za-z0-9._:-]{0,199})*\Z")  # "\n"-joined
_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})\Z"
)


@dataclass(frozen=True)
class Problem:
    index: int
    field: str
    reason: str

    def as_dict(self) -> dict:
        return {"index": self.index, "field": self.field, "reason": self.reason}


@dataclass(frozen=True)
class CloudEvent:
    source: str
    id: str
    type: str
    time: datetime
    data: dict = field(hash=False)
    subject: str = ""


class _Invalid(Exception):
    def __init__(self, reason: str):
        self.reason = reason


# Each checker takes the raw value and returns the value to store, or raises _Invalid. Checkers are small frozen
# objects whose bounds can be read (`maximum`, `max_length`), so tests/runs/test_schema_columns.py can hold every field
# to the column that stores it: what the intake accepts, the record can hold.
BIGINT_MAX = 2**63 - 1  # PostgreSQL's bigint
INT_MAX = 2**31 - 1  # PostgreSQL's integer: Django's IntegerField and PositiveIntegerField
SMALLINT_MAX = 2**15 - 1


@dataclass(frozen=True)
class Text:
    max_length: int = 1000

    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _Invalid("must be a non-empty string")
        if len(value) > self.max_length:
            raise _Invalid(f"must be at most {self.max_length} characters")
        return value


@dataclass(frozen=True)
class Name:
    max_length: int = 200

    def __call__(self, value: Any) -> str:
        if not isinstance(value, str) or not _NAME.match(value):
            raise _Invalid(
                "must be 1-200 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit"
            )
        return value


@dataclass(frozen=True)
class Int:
    minimum: int = 0
    maximum: int = BIGINT_MAX

    def __call__(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid("must be an integer")
        if value < self.minimum:
            raise _Invalid(f"must be at least {self.minimum}")
        if value > self.maximum:
            raise _Invalid(f"must be at most {self.maximum}")
        return value


@dataclass(frozen=True)
class Number:
    minimum: float = -1e9
    maximum: float = 1e9

    def __call__(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise _Invalid("must be a number")
        if value < self.minimum:
            raise _Invalid(f"must be at least {self.minimum:g}")
        if value > self.maximum:
            raise _Invalid(f"must be at most {self.maximum:g}")
        return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid("must be true or false")
    return value


@dataclass(frozen=True)
class Choice:
    choices: tuple[str, ...]

    @property
    def max_length(self) -> int:
        return max(len(choice) for choice in self.choices)

    def __call__(self, value: Any) -> str:
        if value not in self.choices:
            raise _Invalid(f"must be one of: {', '.join(self.choices)}")
        return value


@dataclass(frozen=True)
class CauseName(Choice):
    """A cause of Llama 3's Table 5 by its slug or as the paper prints it (case, spaces, "+" and "/" forgiven),
    kept as the slug (the parser stores what it returns)."""

    stores_its_value = True

    def __call__(self, value: Any) -> str:
        cause = cause_named(value) if isinstance(value, str) else None
        if cause is None:
            raise _Invalid(f"must be one of: {', '.join(self.choices)} (or its label, as in 'Faulty GPU')")
        return cause.value


_str = Text()
_name = Name()


@dataclass(frozen=True)
class Key(Text):
    """An event's source or id: a Text whose UTF-8 bytes are bounded too, so that (source, id) fits the unique index
    that deduplicates events (PostgreSQL's btree holds at most 2,704 bytes an entry: 1,000 four-byte characters would
    be 4,000 and fail the insert)."""

    max_bytes: int = 1000

    def __call__(self, value: Any) -> str:
        size = len(super().__call__(value).encode())
        if size > self.max_bytes:
            raise _Invalid(f"must be at most {self.max_bytes} bytes in UTF-8, not {size:,}")
        return value


def _choice(choices) -> Choice:
    return Choice(tuple(choices))


def _names(value: Any) -> list[str]:
    if not isinstance(value, list) or not value:
        raise _Invalid("must be a non-empty list of names")
    # A run's node list holds thousands of names: one match over them all, one a name only to say which is wrong.
    joined = "\n".join(value) if all(type(item) is str for item in value) else None
    if joined is None or joined.count("\n") != len(value) - 1 or not _NAMES.match(joined):
        for item in value:
            _name(item)
    if len(set(value)) != len(value):
        raise _Invalid("must not repeat a name")
    return value


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Invalid("must be a list of strings")
    if len(value) > 64 or any(len(v) > 100 for v in value):
        raise _Invalid("must be at most 64 strings of at most 100 characters")
    return value


def parse_time(value: Any) -> datetime:
    """An RFC 3339 timestamp with its offset, returned in UTC."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise _Invalid("must be an RFC 3339 timestamp with a time zone, e.g. 2026-01-31T23:59:00Z")
    try:
        return datetime.fromisoformat(value.replace("z", "Z")).astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise _Invalid("is outside the years a timestamp can hold") from None
    except ValueError as exc:
        raise _Invalid(f"is not a valid timestamp ({exc})") from None


# Times the record can hold and the goodput engine can add a day or a week to: an event dated outside these years is a
# broken clock or a forgery, refused with the field named (years 1 and 9999 took pages down).
TIME_MIN = datetime(2000, 1, 1, tzinfo=UTC)
TIME_MAX = datetime(2100, 1, 1, tzinfo=UTC)


def format_time(moment: datetime, timespec: str = "milliseconds") -> str:
    """An event's `time` as producers here write it: UTC, milliseconds (or `timespec`), a Z (parse_time reads it
    back)."""
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_sane_time(value: Any) -> datetime:
    """parse_time, and within [TIME_MIN, TIME_MAX): what the intake accepts (in UTC, whatever offset it came in)."""
    moment = parse_time(value)
    if not TIME_MIN <= moment < TIME_MAX:
        raise _Invalid(f"must be between {TIME_MIN:%Y-%m-%d} and {TIME_MAX:%Y-%m-%d} (UTC)")
    return moment


def _details(value: Any) -> Any:
    if not isinstance(value, str | dict):
        raise _Invalid("must be a string or an object")
    return value


_CAUSES = tuple(c.value for c in Cause)
_step = Int(0, BIGINT_MAX)
_gpu = Int(0, 255)
_duration = Number(0, 1e7)  # seconds: about 115 days, more than any checkpoint write, step or interval

# type -> {field: (checker, required)}; fields not listed are kept as sent, unchecked.
SCHEMAS: dict[str, dict[str, tuple[Any, bool]]] = {
    "run.started": {
        "run": (_name, True),
        "cluster": (_name, True),
        "gpus": (Int(1, INT_MAX), True),
        "nodes": (_names, True),
        "job_id": (Text(200), True),
        "model_params": (Int(1, BIGINT_MAX), False),
        "checkpoint_interval_s": (Number(1, 1e7), False),
    },
    "run.step": {"run": (_name, True), "step": (_step, True)},
    "run.heartbeat": {"run": (_name, True), "phase": (Text(200), False)},
    "checkpoint.started": {"run": (_name, True), "step": (_step, True)},
    "checkpoint.completed": {
        "run": (_name, True),
        "step": (_step, True),
        "blocking_s": (_duration, True),
        "bytes": (Int(0, BIGINT_MAX), True),
        "tier": (_choice(CHECKPOINT_TIERS), True),
        "durable_at": (parse_sane_time, False),
    },
    "checkpoint.failed": {"run": (_name, True), "step": (_step, True), "reason": (_str, True)},
    "run.failed": {
        "run": (_name, True),
        "reason": (_str, True),
        "node": (_name, False),
        "gpu": (_gpu, False),
        "xid": (Int(0, INT_MAX), False),
        "category": (CauseName(_CAUSES), False),
        "detected_at": (parse_sane_time, False),
        "planned": (_bool, False),
        "kind": (_choice(INTERRUPTION_KINDS), False),
    },
    "run.restored": {"run": (_name, True), "from_step": (_step, True)},
    "run.completed": {"run": (_name, True)},
    "run.cancelled": {"run": (_name, True), "reason": (_str, False)},
    "node.heartbeat": {"node": (_name, True), "cluster": (_name, False)},
    "node.state": {
        "node": (_name, True),
        "state": (_choice(NODE_STATES), True),
        "reason": (_str, True),
        "cluster": (_name, False),
    },
    "gpu.xid": {
        "node": (_name, True),
        "gpu": (_gpu, True),
        "xid": (Int(0, INT_MAX), True),
        "message": (_str, True),
        "uuid": (Text(100), False),
        "count": (Int(1, 1_000_000), False),  # a storm folded by the agent: this many identical Xids
    },
    "gpu.ecc": {
        "node": (_name, True),
        "gpu": (_gpu, True),
        "corrected": (Int(0, BIGINT_MAX), True),
        "uncorrected": (Int(0, BIGINT_MAX), True),
        "remapped_rows_corrected": (Int(0, INT_MAX), False),
        "remapped_rows_uncorrected": (Int(0, INT_MAX), False),
        "remapped_rows_pending": (_bool, False),
        "remapped_rows_failure": (_bool, False),
        "retired_pages": (Int(0, INT_MAX), False),
    },
    "gpu.health": {
        "node": (_name, True),
        "gpu": (_gpu, True),
        "temperature_c": (Number(-273.15, 1000), True),
        "throttle_reasons": (_strings, True),
        "nvlink_errors": (Int(0, BIGINT_MAX), True),
        "recovery_action": (Int(0, 4), True),
    },
    "rank.step_time": {
        "run": (_name, True),
        "rank": (Int(0, INT_MAX), True),
        "node": (_name, True),
        "step": (_step, True),
        "seconds": (_duration, True),
    },
    "rank.grad_norm": {
        "run": (_name, True),
        "rank": (Int(0, INT_MAX), True),
        "node": (_name, True),
        "step": (_step, True),
        "value": (Number(-1e12, 1e12), True),
    },
    "healthcheck.result": {
        "node": (_name, True),
        "check": (_str, True),
        "passed": (_bool, True),
        "details": (_details, False),
    },
}
EVENT_TYPES = tuple(SCHEMAS)
# The data fields that are timestamps, by type: the sender's clock is in them too.
TIME_FIELDS = {
    type_: tuple(name for name, (check, _required) in fields.items() if check is parse_sane_time)
    for type_, fields in SCHEMAS.items()
}


SUBJECT_MAX = 1000  # Event.subject's column
# The data fields that name a run or nodes: only the types whose schema has them may carry them.
SUBJECT_FIELDS = ("run", "node", "nodes")


def named_subjects(type_: str, data: dict) -> tuple[Any, Any, list]:
    """(data.run, data.node, data.nodes) of an event, each read only where its type's schema has the field (None, None
    and [] where not). The runs and nodes made for an event are read here, by the intake where it stores one applied
    and by the apply and the rebuild alike, so a rebuild makes what the live path made: a validated event carries no
    other field (`parse_event` refuses them), but a row an older FleetOps stored may, e.g. a rank sample with
    data.nodes, which made no node when the intake stored it applied."""
    schema = SCHEMAS[type_]
    nodes = data.get("nodes") if "nodes" in schema else None
    run, node = (data.get("run") if "run" in schema else None), (data.get("node") if "node" in schema else None)
    return run, node, nodes if isinstance(nodes, list) else []


_ATTRIBUTES = {
    "specversion": _choice((SPECVERSION,)),
    "id": Key(),
    "source": Key(),
    "type": _choice(EVENT_TYPES),
    "time": parse_sane_time,
}


def parse_event(raw: Any, index: int = 0) -> tuple[CloudEvent | None, list[Problem]]:
    """One event: the validated event, or None and every problem found in it."""
    if not isinstance(raw, dict):
        return None, [Problem(index, "", "each event must be a JSON object")]
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    for name, check in _ATTRIBUTES.items():
        if name not in raw or raw[name] is None:
            problems.append(Problem(index, name, "is required"))
            continue
        try:
            values[name] = check(raw[name])
        except _Invalid as exc:
            reason = exc.reason
            if name == "type":
                reason = f"unknown event type {raw[name]!r}; known types: {', '.join(EVENT_TYPES)}"
            problems.append(Problem(index, name, reason))
    subject = raw.get("subject", "")
    if subject is not None and not isinstance(subject, str):
        problems.append(Problem(index, "subject", "must be a string"))
    elif subject and len(subject) > SUBJECT_MAX:
        problems.append(Problem(index, "subject", f"must be at most {SUBJECT_MAX} characters"))
    data = raw.get("data")
    if not isinstance(data, dict):
        problems.append(Problem(index, "data", "is required" if data is None else "must be a JSON object"))
    elif "type" in values:
        cleaned = dict(data)
        for name, (check, required) in SCHEMAS[values["type"]].items():
            if data.get(name) is None:
                if required:
                    problems.append(Problem(index, f"data.{name}", "is required"))
                cleaned.pop(name, None)
                continue
            try:
                value = check(data[name])
            except _Invalid as exc:
                problems.append(Problem(index, f"data.{name}", exc.reason))
                continue
            if getattr(check, "stores_its_value", False):  # the value is kept as sent, but for a cause's label
                cleaned[name] = value
        for name in SUBJECT_FIELDS:
            if name in data and name not in SCHEMAS[values["type"]]:
                # Refused, not ignored: the intake reads the run and nodes an event names from these fields, so one
                # that no schema checks would name subjects nobody validated or bounded.
                problems.append(Problem(index, f"data.{name}", f"is not a field of {values['type']}"))
        data = cleaned
    if problems:
        return None, problems
    event = CloudEvent(
        source=values["source"],
        id=values["id"],
        type=values["type"],
        time=values["time"],
        data=data,
        subject=subject or "",
    )
    return event, []


def parse_events(body: Any, *, max_batch: int) -> tuple[list[CloudEvent], list[Problem]]:
    """A decoded body, one event (an object) or a batch (an array): all events, or all problems."""
    raws = body if isinstance(body, list) else [body]
    if isinstance(body, list) and not body:
        return [], [Problem(0, "", "the batch is empty")]
    if len(raws) > max_batch:
        return [], [Problem(0, "", f"a batch holds at most {max_batch} events, this one {len(raws)}")]
    events: list[CloudEvent] = []
    problems: list[Problem] = []
    seen: dict[tuple[str, str], int] = {}
    for index, raw in enumerate(raws):
        event, found = parse_event(raw, index)
        problems.extend(found)
        if event is None:
            continue
        key = (event.source, event.id)
        if key in seen:
            problems.append(Problem(index, "id", f"repeats the source and id of event {seen[key]} in this batch"))
            continue
        seen[key] = index
        events.append(event)
    return (events if not problems else []), problems


# --- The HTTP binding's binary content mode (CloudEvents HTTP Protocol Binding 1.0.2, section 3.1) -------------------

CE_HEADER_PREFIX = "ce-"
_BODY_ATTRIBUTES = ("data", "data_base64", "datacontenttype")  # never from a header: the body and Content-Type say
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]*\Z")


def binary_event(headers: Iterable[tuple[str, str]], data: Any, content_type: str) -> tuple[dict, list[Problem]]:
    """The structured form of a binary-mode event, and the problems of its headers: each `ce-<name>` header is the
    attribute <name>, its value percent-decoded (section 3.1.3.2: a sender percent-encodes space, '"', '%' and every
    character beyond printable ASCII, as its UTF-8 bytes), the decoded body is `data` (absent when the body was empty)
    and Content-Type is `datacontenttype`.

    `headers` are (name, value) pairs, names in any case. The event goes through `parse_events` like a structured
    one, so both modes refuse the same things with the same problems."""
    event: dict[str, Any] = {}
    problems: list[Problem] = []
    for name, value in headers:
        name = name.lower()
        attribute = name[len(CE_HEADER_PREFIX) :] if name.startswith(CE_HEADER_PREFIX) else ""
        if not attribute or attribute in _BODY_ATTRIBUTES:
            continue
        if not _HEADER_VALUE.match(value):
            problems.append(Problem(0, attribute, f"the {name} header must be percent-encoded printable ASCII"))
            continue
        try:
            event[attribute] = unquote(value, errors="strict")
        except UnicodeDecodeError:
            problems.append(Problem(0, attribute, f"the {name} header's percent-encoded bytes are not UTF-8"))
    if data is not None:
        event["data"] = data
    if content_type:
        event["datacontenttype"] = content_type
    return event, problems
