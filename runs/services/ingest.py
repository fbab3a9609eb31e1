"""The intake's store: validated events written once (all or nothing), then queued to be applied."""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from runs.domain import clocks, cloudevents, routes
from runs.domain.cloudevents import CloudEvent
from runs.models import ApiToken, Event, Node, Run
from runs.services.appliers import _create_missing, _name_of, _raw, _subjects
from runs.services.turns import apply_turn_take, turn_of

# Stored applied and seen by detection at once: nothing in the record or in the event-driven detectors changes with
# them (their applier has nothing to do but make their run and node, which the intake does), and the periodic
# detectors (stragglers, silent data corruption) read them from the log. At 131,072 ranks they are most of the
# stream; each row is written once, not three times (docs/PERFORMANCE.md, "A 131,072-GPU fleet"). A silent run's
# alert is cleared by the detectors' view of its next event; a restarted job's first events are its start and its
# restore, never a rank sample, so no alert waits on these.
LOGGED_AT_INTAKE = frozenset(routes.types_of(routes.Route.LOGGED))


@dataclass(frozen=True)
class IngestResult:
    accepted: list[CloudEvent]
    duplicates: list[CloudEvent]
    event_ids: list[int]


def events_ingest(*, events: list[CloudEvent], backfill: bool = False, token: ApiToken | None = None) -> IngestResult:
    """Store new events durably and queue their application; repeats of stored events are skipped.

    One transaction, all or nothing. On PostgreSQL the batch is one INSERT ... SELECT FROM unnest(...) ON CONFLICT
    DO NOTHING: no ORM object per event, no read before the write, and a concurrent request storing the same event
    first simply makes it a duplicate here. A `backfill` (a loaded history) is late by design: not flagged as late.
    `token`: who sent them (none: FleetOps itself). Rank samples are stored applied and detected
    (LOGGED_AT_INTAKE): a batch of nothing else queues no turn.
    """
    received_at = timezone.now()
    token_id = token.pk if token is not None else None
    turn = turn_of(token, len(events))
    rows = _event_rows(events, received_at, token_id, turn=turn, flag_late=not backfill)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            stored = _insert_postgresql(rows)
        else:
            stored = _insert_orm(rows)
        logged = {(e.source, e.id): e for e in events if e.type in LOGGED_AT_INTAKE and (e.source, e.id) in stored}
        if logged:
            _subjects_create(list(logged.values()))
        if len(stored) > len(logged):  # some have something to apply
            transaction.on_commit(lambda: apply_turn_take(sender=turn), robust=True)
    accepted = [e for e in events if (e.source, e.id) in stored]
    duplicates = [e for e in events if (e.source, e.id) not in stored]
    return IngestResult(accepted=accepted, duplicates=duplicates, event_ids=[stored[e.source, e.id] for e in accepted])


# The Event columns the intake writes, in the order of `_event_rows`' tuples.
INTAKE_COLUMNS = (
    "source",
    "event_id",
    "type",
    "subject",
    "time",
    "received_at",
    "data",
    "run_name",
    "node_name",
    "skew_s",
    "token_id",
    "applied_at",
    "detected_at",
    "turn",
)


def own_events_ingest(*, events: list[dict], backfill: bool = False) -> IngestResult:
    """FleetOps' own events (its watchdogs, playbooks, the demo's and the simulator's fleets) through the intake's
    path, validated as the API validates a sender's: one that fails is a programming error (ValueError), never a
    user's."""
    parsed, problems = cloudevents.parse_events(events, max_batch=max(len(events), 1))
    if problems:
        shown = "; ".join(f"event {p.index} {p.field}: {p.reason}" for p in problems[:3])
        raise ValueError(f"FleetOps wrote invalid events: {shown}")
    return events_ingest(events=parsed, backfill=backfill)


def _event_rows(
    events: list[CloudEvent], received_at: datetime, token_id: int | None, *, turn: int = 0, flag_late: bool = True
) -> list[tuple]:
    """The stored rows of a batch received at `received_at` (`turn`: the apply turn they wait in, `turn_of`).

    A time ahead of receipt cannot be true: the sender's clock is fast. Its lead is measured once a source a batch
    (`clocks.leads`), and each of that source's events, with the timestamps in its data, is moved back by it, so that
    they keep the order and spacing the sender gave them; skew_s keeps the lead on each. A time far behind may be a late
    delivery (a spool emptied after an outage) or a slow clock: kept as sent, and flagged in skew_s."""
    ahead = clocks.leads(events, received_at, settings.EVENTS_FUTURE_TOLERANCE_S)
    return [
        _event_row(e, received_at, token_id, turn=turn, flag_late=flag_late, lead=ahead.get(e.source)) for e in events
    ]


def _event_row(
    event: CloudEvent,
    received_at: datetime,
    token_id: int | None,
    *,
    turn: int,
    flag_late: bool,
    lead: timedelta | None,
) -> tuple:
    """One event's row; `lead`: how far ahead its source's clock runs (None: not past the tolerance)."""
    if lead is not None:
        event = clocks.shifted(event, -lead)
        skew_s = lead.total_seconds()
    else:
        skew_s = (event.time - received_at).total_seconds()
        if skew_s > -settings.EVENTS_LATE_FLAG_S or not flag_late:
            skew_s = None
    data = event.data
    done = received_at if event.type in LOGGED_AT_INTAKE else None
    return (
        event.source,
        event.id,
        event.type,
        event.subject,
        event.time,
        received_at,
        data,
        _name_of(data.get("run")),
        _name_of(data.get("node")),
        skew_s,
        token_id,
        done,
        done,
        turn,
    )


def _insert_postgresql(rows: list[tuple]) -> dict[tuple[str, str], int]:
    """Insert the rows in one statement; returns {(source, id): pk} of those that were new.

    The batch travels as one JSON array that PostgreSQL unpacks (json_to_recordset): one json.dumps in C, where
    binding a parameter a value, or Django's client-side quoting of 10,000 values, costs more than the insert itself.
    """
    # INTAKE_COLUMNS; received_at, token_id and turn bound once, detected_at the same as applied_at (LOGGED_AT_INTAKE)
    keys = ("s", "i", "t", "u", "w", None, "d", "r", "n", "k", None, "a", None, None)
    batch = json.dumps(
        [{key: value for key, value in zip(keys, row, strict=True) if key} for row in rows],
        ensure_ascii=False,
        allow_nan=False,
        default=datetime.isoformat,  # the event's time
    )
    statement = f"""
        INSERT INTO {Event._meta.db_table}
            (source, event_id, type, subject, time, received_at, data, run_name, node_name, skew_s, token_id,
             applied_at, detected_at, turn, error)
        SELECT s, i, t, u, w, %s, d, r, n, k, %s, a, a, %s, ''
        FROM json_to_recordset(%s::json)
            AS batch(s text, i text, t text, u text, w timestamptz, d jsonb, r text, n text, k float8, a timestamptz)
        ON CONFLICT (source, event_id) DO NOTHING
        RETURNING source, event_id, id
    """
    received_at, token_id, turn = (rows[0][5], rows[0][10], rows[0][13]) if rows else (timezone.now(), None, 0)
    return {(source, event_id): pk for source, event_id, pk in _raw(statement, [received_at, token_id, turn, batch])}


def _insert_orm(rows: list[tuple]) -> dict[tuple[str, str], int]:
    """The embedded default (SQLite, one writer at a time): skip what is stored, insert the rest in bulk."""
    keys = {(row[0], row[1]) for row in rows}
    known = set(
        Event.objects.filter(event_id__in={event_id for _source, event_id in keys}).values_list("source", "event_id")
    )
    new = [Event(**dict(zip(INTAKE_COLUMNS, row, strict=True))) for row in rows if (row[0], row[1]) not in known]
    try:
        with transaction.atomic():
            Event.objects.bulk_create(new, batch_size=500)
    except IntegrityError:  # a concurrent request stored some of these first: one insert each
        for event in new:
            event.pk = None  # the rolled-back bulk insert may have numbered it
            try:
                with transaction.atomic():
                    event.save(force_insert=True)
            except IntegrityError:
                event.pk = None
    return {(event.source, event.event_id): event.pk for event in new if event.pk is not None}


def _subjects_create(events: list[CloudEvent]) -> None:
    """The runs and nodes of events stored applied (LOGGED_AT_INTAKE), made in the intake's transaction."""
    runs, nodes = _subjects(events)
    _create_missing(Run, "name", runs)
    _create_missing(Node, "hostname", nodes)
