"""Writes to the fleet record. Views, tasks and commands call these; nothing else writes.

The path of an event: `events_ingest` stores validated events (one transaction, all or nothing) and, on commit,
takes its sender a turn (`apply_turn_take`: at most one queued per sender); the turn (`runs.tasks.apply_turn`,
`turn_apply`) claims the sender's oldest events a chunk at a time and folds each into the record, and gives way to
the next sender after each chunk when one is waiting. Every applier is safe to run twice and in any order.
"""

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import Case, DateTimeField, F, Func, JSONField, Q, Value, When
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from fleetops.celery import task_named
from runs.domain import cloudevents, lifecycle, quality, trust
from runs.domain.cloudevents import CloudEvent, parse_time
from runs.models import GPU, ApiToken, ApplyTurn, Attempt, Checkpoint, Cluster, Event, Interruption, Node, Run

log = logging.getLogger(__name__)

APPLY_CHUNK = 500
# Stored applied and seen by detection at once: nothing in the record or in the event-driven detectors changes with
# them (their applier has nothing to do but make their run and node, which the intake does), and the periodic
# detectors (stragglers, silent data corruption) read them from the log. At 131,072 ranks they are most of the
# stream; each row is written once, not three times (docs/PERFORMANCE.md, "A 131,072-GPU fleet"). A silent run's
# alert is cleared by the detectors' view of its next event; a restarted job's first events are its start and its
# restore, never a rank sample, so no alert waits on these.
LOGGED_AT_INTAKE = frozenset({"rank.step_time", "rank.grad_norm"})
# A turn queued this long ago lost its message (a broker restart): the sender's next batch queues another.
TURN_STALE = timedelta(minutes=1)
# The node agents' small batches wait in one turn together (`turn_of`): at 16,384 nodes they are 546 POSTs a second,
# each from its own node-bound token, and a turn each would be a task each. A batch this small is a poll's worth (a
# heartbeat and two readings a GPU; an Xid); larger ones (a spool emptied after an outage) keep their token's own turn.
AGENTS_TURN = -1
AGENT_POLL_MAX = 100


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
    rows = [_event_row(e, received_at, token_id, turn=turn, flag_late=not backfill) for e in events]
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


# The Event columns the intake writes, in the order of `_event_row`'s tuples.
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


def turn_of(token: ApiToken | None, count: int) -> int:
    """The apply turn a batch of `count` events from `token` waits in: its token's own (0: FleetOps itself), but a
    node agent's poll (a token bound to one node, AGENT_POLL_MAX events or fewer) waits in the agents' shared turn.

    Turns are the unit of fairness: a flood from one token delays another turn's events by about a chunk. The agents'
    polls give that up among themselves for a turn a chunk of 500 polls rather than a task a poll; a node-bound token
    speaks for one node only, and a flood of its own in large batches still gets a turn of its own."""
    if token is None:
        return 0
    if token.role == trust.AGENT and token.node and count <= AGENT_POLL_MAX:
        return AGENTS_TURN
    return token.pk


def _event_row(
    event: CloudEvent, received_at: datetime, token_id: int | None, *, turn: int = 0, flag_late: bool = True
) -> tuple:
    """The stored row of an event (`turn`: the apply turn it waits in, `turn_of`). A time ahead of
    receipt cannot be true: the sender's clock is fast, so the event (and the timestamps in its data) are moved back to
    the receipt, and skew_s keeps by how much. A time far behind may be a late delivery (a spool emptied after an
    outage) or a slow clock: kept as sent, and flagged in skew_s."""
    skew_s = (event.time - received_at).total_seconds()
    if skew_s > settings.EVENTS_FUTURE_TOLERANCE_S:
        event = cloudevents.shifted(event, received_at - event.time)
    elif skew_s > -settings.EVENTS_LATE_FLAG_S or not flag_late:
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


def _name_of(value) -> str:
    """The run or node an event names, for the indexed columns; types that do not check the field may carry anything."""
    return value if isinstance(value, str) and len(value) <= 200 else ""


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


def _raw(statement: str, params: list) -> list[tuple]:
    """One statement through psycopg itself on Django's connection (PostgreSQL): its parameters bound server-side,
    where Django would quote a large JSON array into the statement. The intake's insert and the appliers' bulk
    updates; returns the rows it answers, if any."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


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


def apply_turn_take(*, sender: int, gather: bool = True) -> None:
    """Queue the sender's turn to have its events applied, unless one is queued already (`sender`: a turn, `turn_of`).
    A broker that is down loses only the turn, never an event: the sweeper (runs.tasks.apply_pending_events) applies
    what was left, and the sender's next batch queues a turn again.

    The turn is made, or taken over when its message was lost (queued TURN_STALE ago), or left as it is; a row comes
    back only in the first two cases, and only then is a task queued. Neither statement locks a queued turn's row
    when it is left as it is (an upsert would, and the agents' 546 POSTs a second would queue on it). The agents' turn
    starts EVENTS_AGENTS_TURN_GATHER_S after its first poll (`gather`; not when a turn gives way with a backlog left),
    so that it applies the polls of that while in one go: at 546 a second, a turn a poll would be a task a poll."""
    now = timezone.now()
    adapt = connection.ops.adapt_datetimefield_value
    table = ApplyTurn._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (sender, queued_at) VALUES (%s, %s) ON CONFLICT (sender) DO NOTHING RETURNING sender",
            [sender, adapt(now)],
        )
        if cursor.fetchone() is None:
            cursor.execute(
                f"UPDATE {table} SET queued_at = %s WHERE sender = %s AND queued_at < %s RETURNING sender",
                [adapt(now), sender, adapt(now - TURN_STALE)],
            )
            if cursor.fetchone() is None:
                return
    try:
        countdown = settings.EVENTS_AGENTS_TURN_GATHER_S if sender == AGENTS_TURN and gather else None
        task_named("runs.tasks.apply_turn").apply_async((sender,), countdown=countdown)  # by name: no import cycle
    except BaseException:
        ApplyTurn.objects.filter(sender=sender).delete()
        raise


def turn_apply(*, sender: int, on_chunk=lambda ids: None, slice_s: float | None = None) -> int:
    """A sender's turn: apply its oldest pending events, a chunk (APPLY_CHUNK) a transaction, calling `on_chunk` with
    each chunk's ids, until none is left. With a `slice_s`, the turn gives way after a chunk when another sender
    waits for a turn or the slice is spent: it queues its next turn and stops.

    So the apply queue holds one turn per sender with events waiting, and a flood from one token delays another
    sender's event by about one chunk a turn ahead of it (docs/PERFORMANCE.md, "Fair applying"); the slice lets a
    worker that also serves other queues (detection) take their tasks between a flood's chunks. Run in-process (the
    embedded default, no slice) there is no queue to be fair in: the turn applies everything.
    """
    ApplyTurn.objects.filter(sender=sender).delete()  # from here on, a new batch of this sender queues a new turn
    applied, started = 0, time.monotonic()
    while ids := _apply_next(sender):
        applied += len(ids)
        on_chunk(ids)
        if (
            slice_s is not None
            and len(ids) == APPLY_CHUNK  # a chunk short of full: most likely the last, so no turn to queue
            and (time.monotonic() - started >= slice_s or ApplyTurn.objects.exclude(sender=sender).exists())
        ):
            apply_turn_take(sender=sender, gather=False)
            break
    return applied


def _apply_next(sender: int) -> list[int]:
    """Apply the sender's oldest pending events (a chunk, rows other workers hold skipped); returns their ids."""
    pending = Event.objects.filter(applied_at__isnull=True, turn=sender)
    ids: list[int] = []
    try:
        with transaction.atomic():
            events = list(pending.select_for_update(skip_locked=True).order_by("id")[:APPLY_CHUNK])
            ids = [event.pk for event in events]
            if events:
                _apply_selected(events)
    except TRANSIENT:
        raise
    except Exception:
        if not ids:
            raise
        _apply_isolating(ids)  # rolled back: the same events, halved down to the one that fails alone
    return ids


def events_apply(*, event_ids: list[int]) -> int:
    """Fold stored events into the record; returns how many this call applied.

    Events another worker holds or has applied are skipped. Claim and effects share one transaction,
    so a crash leaves the event unapplied for the sweeper, never half-applied.
    """
    applied = 0
    for start in range(0, len(event_ids), APPLY_CHUNK):
        applied += _apply_isolating(event_ids[start : start + APPLY_CHUNK])
    return applied


# Errors that say nothing about the events: the database went away or a lock timed out. The task retries them.
TRANSIENT = (OperationalError, InterfaceError)


def _apply_isolating(event_ids: list[int]) -> int:
    """Apply a chunk; when it fails for a reason of its own (a bug, or a value the database refuses), apply its halves
    apart, down to the one event that fails alone, which is quarantined. So one bad event costs a few more
    transactions, never its chunk-mates or the events after it, and the sweeper never stops on it."""
    try:
        return _apply_chunk(event_ids)
    except TRANSIENT:
        raise
    except Exception as exc:
        if len(event_ids) == 1:
            _quarantine(event_ids[0], exc)
            return 0
        middle = len(event_ids) // 2
        return _apply_isolating(event_ids[:middle]) + _apply_isolating(event_ids[middle:])


def _quarantine(event_id: int, exc: Exception) -> None:
    now = timezone.now()
    error = f"{type(exc).__name__}: {exc}"[:2000]
    log.error("event %s failed to apply and is quarantined: %s", event_id, error)
    Event.objects.filter(pk=event_id, applied_at__isnull=True).update(applied_at=now, quarantined_at=now, error=error)


def quarantined_replay(*, event_ids: list[int] | None = None) -> int:
    """Apply quarantined events again (all, or those named), after a fix; returns how many applied this time. One
    that still fails is quarantined again with its new error."""
    rows = Event.objects.filter(quarantined_at__isnull=False)
    if event_ids is not None:
        rows = rows.filter(pk__in=event_ids)
    ids = list(rows.order_by("time", "id").values_list("pk", flat=True))
    Event.objects.filter(pk__in=ids).update(applied_at=None, quarantined_at=None, error="")
    return events_apply(event_ids=ids)


def _apply_chunk(event_ids: list[int]) -> int:
    with transaction.atomic():
        events = list(
            Event.objects.select_for_update(skip_locked=True)
            .filter(pk__in=event_ids, applied_at__isnull=True)
            .order_by("time", "id")
        )
        if not events:
            return 0  # another worker got there first
        _apply_selected(events)
    return len(events)


def _apply_selected(events: list[Event]) -> None:
    """Fold claimed events (their rows locked by the caller's transaction) into the record, in (time, id) order."""
    events.sort(key=lambda event: (event.time, event.pk))
    Event.objects.filter(pk__in=[e.pk for e in events]).update(applied_at=timezone.now())
    _lock_subjects(events)
    lifecycle_runs: set[str] = set()
    folded: dict[tuple, Event] = {}
    xids: dict[tuple[str, int], _XidTally] = {}
    readings: list[Event] = []
    for event in events:
        if event.type in lifecycle.LIFECYCLE_TYPES:
            lifecycle_runs.add(event.run_name)
        elif event.type in FOLDED:
            _fold(folded, event)
        elif event.type == "gpu.xid":
            xids.setdefault((event.node_name, event.data["gpu"]), _XidTally()).add(event)
        elif event.type in READINGS:
            readings.append(event)
        else:
            APPLIERS[event.type](event)
    _apply_readings(readings)
    heartbeats = [event for event in folded.values() if event.type == "node.heartbeat"]
    for event in folded.values():
        if event.type != "node.heartbeat":
            APPLIERS[event.type](event)
    _apply_heartbeats(heartbeats)
    for tally in xids.values():
        _apply_xids(tally)
    for name in sorted(lifecycle_runs):
        run_lifecycle_rebuild(run=_run_locked(name))


# Readings where only the newest counts: of a chunk's events of one subject, only the newest can change the record
# (each applier writes "if newer than what is stored"), so one write per run or node stands for all of them. On a
# run's stream these are most events (a step a minute, a heartbeat per node): one query per subject, not two per
# event. Ties keep the first in (time, id) order, as applying them one by one would ("newer" is strict).
FOLDED = {
    "run.step": lambda e: (e.run_name,),
    "node.heartbeat": lambda e: (e.node_name,),
}


def _fold(folded: dict[tuple, Event], event: Event) -> None:
    key = (event.type, *FOLDED[event.type](event))
    kept = folded.get(key)
    if kept is None:
        folded[key] = event
        return
    if event.type == "node.heartbeat" and kept.data.get("cluster"):
        # A node's cluster is set once, from the first heartbeat (in order) that names one: carry it on.
        event.data = dict(event.data, cluster=kept.data["cluster"])
    if _fold_rank(event) > _fold_rank(kept):
        folded[key] = event
    elif event.type == "node.heartbeat" and not kept.data.get("cluster") and event.data.get("cluster"):
        kept.data = dict(kept.data, cluster=event.data["cluster"])


def _fold_rank(event: Event) -> tuple:
    """What makes a reading win: the newer time; for steps at the same time, the higher step."""
    return (event.time, event.data["step"]) if event.type == "run.step" else (event.time,)


def _lock_subjects(events: list[Event]) -> None:
    """Create and lock every run and node these events touch, runs then nodes, each in name order.

    One global order means two workers can never wait on each other (no deadlock). NO KEY UPDATE
    locks still let other transactions insert rows that point at these (attempts, GPUs).
    """
    runs = sorted({e.run_name for e in events if e.run_name})
    nodes = sorted({e.node_name for e in events if e.node_name} | {h for e in events for h in e.data.get("nodes", [])})
    _create_missing(Run, "name", runs)
    _create_missing(Node, "hostname", nodes)
    list(Run.objects.select_for_update(no_key=True).filter(name__in=runs).order_by("name").values_list("pk"))
    list(Node.objects.select_for_update(no_key=True).filter(hostname__in=nodes).order_by("hostname").values_list("pk"))


def _subjects_create(events: list[CloudEvent]) -> None:
    """The runs and nodes of events stored applied (LOGGED_AT_INTAKE), made in the intake's transaction."""
    _create_missing(Run, "name", sorted({_name_of(e.data.get("run")) for e in events} - {""}))
    _create_missing(Node, "hostname", sorted({_name_of(e.data.get("node")) for e in events} - {""}))


def _create_missing(model, field: str, names: list[str]) -> None:
    missing = set(names) - set(model.objects.filter(**{f"{field}__in": names}).values_list(field, flat=True))
    if missing:
        # ignore_conflicts: a concurrent worker may create the same row between the read and the insert.
        model.objects.bulk_create([model(**{field: name}) for name in sorted(missing)], ignore_conflicts=True)


def _run_locked(name: str) -> Run:
    """The run's row; `_lock_subjects` has created and locked it for this transaction."""
    return Run.objects.select_for_update(no_key=True).get(name=name)


def _node(hostname: str, cluster_name: str | None = None) -> Node:
    node, created = Node.objects.get_or_create(hostname=hostname)
    if cluster_name and node.cluster_id is None:
        node.cluster = _cluster(cluster_name)
        node.save(update_fields=["cluster"])
    return node


def _cluster(name: str, scheduler: str | None = None) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(
        name=name, defaults={"scheduler": scheduler or Cluster.Scheduler.SIMULATED}
    )
    return cluster


def _gpu(hostname: str, index: int, uuid: str | None = None) -> GPU:
    gpu, _ = GPU.objects.get_or_create(node=_node(hostname), index=index)
    if uuid and gpu.uuid != uuid:
        gpu.uuid = uuid
        gpu.save(update_fields=["uuid"])
    return gpu


def _newer(field: str, time: datetime) -> Q:
    """Rows whose `field` is older than `time`: a late event never overwrites a newer reading."""
    return Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__lt": time})


# --- Appliers: one per non-lifecycle event type; each commutes with the others and with itself. ---


def _apply_step(event: Event) -> None:
    run, _ = Run.objects.get_or_create(name=event.run_name)
    step = event.data["step"]
    Run.objects.filter(pk=run.pk).filter(
        _newer("last_step_at", event.time) | Q(last_step_at=event.time, last_step__lt=step)
    ).update(last_step=step, last_step_at=event.time)


def _checkpoint(event: Event) -> Checkpoint:
    run, _ = Run.objects.get_or_create(name=event.run_name)
    checkpoint, _ = Checkpoint.objects.get_or_create(run=run, step=event.data["step"])
    return checkpoint


def _apply_checkpoint_started(event: Event) -> None:
    # The latest start wins: a write lost to a fault is taken again at the same step after the restart,
    # and it is the retry whose blocking the completion reports.
    checkpoint = _checkpoint(event)
    Checkpoint.objects.filter(pk=checkpoint.pk).filter(_newer("started_at", event.time)).update(started_at=event.time)


def _apply_checkpoint_completed(event: Event) -> None:
    checkpoint, data = _checkpoint(event), event.data
    durable_at = parse_time(data["durable_at"]) if data.get("durable_at") else None
    if durable_at is None and data["tier"] == "durable":
        durable_at = event.time
    # The latest completion of a step wins, whichever arrives last (a step written again after a rewind); at the same
    # time, the larger blocking (a re-report never raises goodput by arriving first).
    newer = _newer("completed_at", event.time) | Q(completed_at=event.time, blocking_s__lt=data["blocking_s"])
    Checkpoint.objects.filter(pk=checkpoint.pk).filter(newer).update(
        status=Checkpoint.Status.COMPLETED,
        completed_at=event.time,
        blocking_s=data["blocking_s"],
        bytes=data["bytes"],
        tier=data["tier"],
        durable_at=durable_at,
        failure_reason="",
    )


def _apply_checkpoint_failed(event: Event) -> None:
    checkpoint = _checkpoint(event)
    # A completion wins over a failure report, whichever arrives first.
    Checkpoint.objects.filter(pk=checkpoint.pk).exclude(status=Checkpoint.Status.COMPLETED).update(
        status=Checkpoint.Status.FAILED, failure_reason=event.data["reason"]
    )


def _apply_heartbeat(event: Event) -> None:
    node = _node(event.node_name, event.data.get("cluster"))
    Node.objects.filter(pk=node.pk).filter(_newer("last_heartbeat_at", event.time)).update(last_heartbeat_at=event.time)


def _apply_heartbeats(events: list[Event]) -> None:
    """The newest heartbeat of each node (one event a node): one UPDATE for all, each node's time moving only
    forward (the greater of the stored time and the event's), as `_apply_heartbeat` does one at a time."""
    if not events:
        return
    naming: dict[str, list[str]] = {}  # cluster -> the nodes that name it, set where a node has no cluster yet
    for e in events:
        if e.data.get("cluster"):
            naming.setdefault(e.data["cluster"], []).append(e.node_name)
    for cluster_name, hostnames in naming.items():
        unclaimed = Node.objects.filter(hostname__in=hostnames, cluster__isnull=True)
        if unclaimed.exists():  # a cluster is made only for a node it claims, as one at a time did
            unclaimed.update(cluster=_cluster(cluster_name))
    # _lock_subjects created and locked these nodes.
    if connection.vendor == "postgresql":
        # One row a node from a JSON array: a CASE of a branch a node is evaluated per node, quadratic in the chunk
        # (180 ms for the 170 nodes of a chunk at 131,072 GPUs); a row already as new is left unwritten.
        batch = json.dumps([{"h": e.node_name, "w": e.time.isoformat()} for e in events])
        _raw(
            f"""UPDATE {Node._meta.db_table} AS n SET last_heartbeat_at = v.w
            FROM json_to_recordset(%s::json) AS v(h text, w timestamptz)
            WHERE n.hostname = v.h AND (n.last_heartbeat_at IS NULL OR n.last_heartbeat_at < v.w)""",
            [batch],
        )
        return
    sent = Case(*(When(hostname=e.node_name, then=Value(e.time)) for e in events), output_field=DateTimeField())
    Node.objects.filter(hostname__in=[e.node_name for e in events]).update(
        last_heartbeat_at=Greatest(Coalesce(F("last_heartbeat_at"), sent), sent)
    )


def _apply_node_state(event: Event) -> None:
    node = _node(event.node_name, event.data.get("cluster"))
    Node.objects.filter(pk=node.pk).filter(_newer("state_changed_at", event.time)).update(
        state=event.data["state"], state_reason=event.data["reason"], state_changed_at=event.time
    )


@dataclass
class _XidTally:
    """A chunk's Xids on one GPU, in (time, id) order: a storm is thousands of them, and applying them one by one
    would be four queries each. The sum of their counts, the newest (the first of equal times, as "newer" is
    strict) and the last UUID given are what applying them one at a time would leave."""

    newest: Event | None = None
    count: int = 0
    uuid: str | None = None

    def add(self, event: Event) -> None:
        self.count += event.data.get("count", 1)
        self.uuid = event.data.get("uuid") or self.uuid
        if self.newest is None or event.time > self.newest.time:
            self.newest = event


def _apply_xid(event: Event) -> None:
    tally = _XidTally()
    tally.add(event)
    _apply_xids(tally)


def _apply_xids(tally: _XidTally) -> None:
    event, data = tally.newest, tally.newest.data
    gpu = _gpu(event.node_name, data["gpu"], tally.uuid)
    # Every Xid counts, storms included; detection dedupes them into faults.
    GPU.objects.filter(pk=gpu.pk).update(xid_count=F("xid_count") + tally.count)
    GPU.objects.filter(pk=gpu.pk).filter(_newer("last_xid_at", event.time)).update(
        last_xid=data["xid"], last_xid_at=event.time, last_xid_message=data["message"][:1000]
    )


_ECC_FIELDS = (
    "remapped_rows_corrected",
    "remapped_rows_uncorrected",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "retired_pages",
)


def _ecc_values(data: dict) -> dict:
    values = {"ecc_corrected": data["corrected"], "ecc_uncorrected": data["uncorrected"]}
    return values | {name: data[name] for name in _ECC_FIELDS if name in data}


def _health_values(data: dict) -> dict:
    fields = ("temperature_c", "throttle_reasons", "nvlink_errors", "recovery_action")
    return {name: data[name] for name in fields}


# A GPU's readings: the field that says how new the stored one is (the newer reading wins), and the values written.
READINGS = {"gpu.ecc": ("ecc_at", _ecc_values), "gpu.health": ("health_at", _health_values)}


def _apply_readings(events: list[Event]) -> None:
    """A chunk's ECC and health readings (in (time, id) order): only each GPU's newest of each type can change the
    record, since a reading is written only over an older one (ties keep the first, "newer" being strict). The
    chunk's GPUs are looked up and made in two queries; on PostgreSQL each type is then one UPDATE for all its GPUs,
    the newer-only rule in its WHERE; the embedded default updates a GPU at a time. At 131,072 GPUs the agents send
    about 900 readings a second, one query each before (docs/PERFORMANCE.md)."""
    newest: dict[tuple[str, str, int], Event] = {}
    for event in events:
        key = (event.type, event.node_name, event.data["gpu"])
        if key not in newest or event.time > newest[key].time:
            newest[key] = event
    if not newest:
        return
    # `_lock_subjects` has made the nodes.
    nodes = dict(Node.objects.filter(hostname__in={n for _t, n, _i in newest}).values_list("hostname", "pk"))
    gpus = _gpu_ids({(nodes[node], index) for _type, node, index in newest})
    for type_, (field_at, values) in READINGS.items():
        rows = [
            (gpus[nodes[node], index], event.time, values(event.data))
            for (kind, node, index), event in newest.items()
            if kind == type_
        ]
        if rows:
            _readings_update(field_at, rows)


def _readings_update(field_at: str, rows: list[tuple[int, datetime, dict]]) -> None:
    """Write each (GPU id, reading time, values) where the stored reading is older (or none)."""
    if connection.vendor != "postgresql":
        for pk, at, values in rows:
            GPU.objects.filter(pk=pk).filter(_newer(field_at, at)).update(**values, **{field_at: at})
        return
    # Optional fields (an agent that cannot read remapped rows sends none) keep the stored value when absent.
    columns = sorted({name for _pk, _at, values in rows for name in values})
    sets = [f"{c} = COALESCE(v.{c}, g.{c})" if c in _ECC_FIELDS else f"{c} = v.{c}" for c in columns]
    types = [f"{c} {GPU._meta.get_field(c).db_type(connection)}" for c in (*columns, field_at)]
    batch = json.dumps(
        [{"id": pk, field_at: at, **values} for pk, at, values in rows], default=datetime.isoformat, allow_nan=False
    )
    statement = f"""
        UPDATE {GPU._meta.db_table} AS g SET {", ".join(sets)}, {field_at} = v.{field_at}
        FROM json_to_recordset(%s::json) AS v(id bigint, {", ".join(types)})
        WHERE g.id = v.id AND (g.{field_at} IS NULL OR g.{field_at} < v.{field_at})
    """
    _raw(statement, [batch])


def _apply_logged(event: Event) -> None:
    """Rank samples, health checks and the training loop's heartbeats stay in the event log for the detectors and the
    hang watchdog; the record needs only their run and node, which `_lock_subjects` has created for the chunk. No
    query here: at 131,072 ranks these are most of the stream."""


APPLIERS = {
    "run.step": _apply_step,
    "run.heartbeat": _apply_logged,
    "checkpoint.started": _apply_checkpoint_started,
    "checkpoint.completed": _apply_checkpoint_completed,
    "checkpoint.failed": _apply_checkpoint_failed,
    "node.heartbeat": _apply_heartbeat,
    "node.state": _apply_node_state,
    "gpu.xid": _apply_xid,
    "rank.step_time": _apply_logged,
    "rank.grad_norm": _apply_logged,
    "healthcheck.result": _apply_logged,
}


# --- The run lifecycle: re-derived whole from the run's lifecycle events, then synced row by row. ---


def run_lifecycle_rebuild(*, run: Run) -> None:
    """Bring the run's state, attempts and interruptions in line with all its lifecycle events.

    The events are read without their node lists (2,048 hostnames a start on a big run): an attempt's nodes are read
    from its start event only when that event is new to it, so a rebuild costs the number of events, not of hosts.
    """
    # The applied events only (this chunk's are claimed already): an event still waiting for its own chunk, perhaps a
    # bad one, cannot fail this one. A quarantined event is out of the record until it is replayed.
    lifecycle_events = Event.objects.filter(
        run_name=run.name, type__in=lifecycle.LIFECYCLE_TYPES, applied_at__isnull=False, quarantined_at=None
    )
    rows = lifecycle_events.values_list("pk", "time", "type", _WithoutNodes("data"), "source", "event_id")
    pks = {}
    events = []
    for pk, *fields in rows:
        event = lifecycle.LifecycleEvent(*fields)
        pks[(event.source, event.id)] = pk
        events.append(event)
    derived = lifecycle.derive(events)
    settings = derived.settings
    run.state, run.started_at, run.ended_at = derived.state, derived.started_at, derived.ended_at
    if "cluster" in settings:
        run.cluster = _cluster(settings["cluster"])
    claims = [a.gpus for a in derived.attempts if a.gpus is not None]
    run.gpus_claimed = max(claims) if claims else run.gpus_claimed
    run.model_params = settings.get("model_params", run.model_params)
    run.checkpoint_interval_s = settings.get("checkpoint_interval_s", run.checkpoint_interval_s)
    run.save()

    cluster_id = run.cluster_id if "cluster" in settings else None
    attempts = _sync_attempts(run, derived.attempts, pks, cluster_id)
    _count_gpus(run)
    node_ids = _node_ids(sorted({i.node for i in derived.interruptions if i.node}), cluster_id)
    _sync_interruptions(run, derived.interruptions, attempts, node_ids)


def _count_gpus(run: Run) -> None:
    """The run's GPUs as counted: the most any run.started claimed (its full size: an attempt on fewer ran shrunk),
    unless more than the nodes of the attempt that claimed it hold (one indexed count, only for a claim above one
    node's worth)."""
    counted = run.gpus_claimed if run.gpus_claimed is not None else run.gpu_count
    if run.gpus_claimed is not None and run.gpus_claimed > quality.MAX_GPUS_PER_NODE:
        counted = quality.gpus_counted(run.gpus_claimed, Attempt.sizing_node_count(run))
    if counted != run.gpu_count:
        run.gpu_count = counted
        Run.objects.filter(pk=run.pk).update(gpu_count=counted)


class _WithoutNodes(Func):
    """A JSON column without its top-level "nodes" key, taken out by the database."""

    output_field = JSONField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="(%(expressions)s - 'nodes')", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="json_remove(%(expressions)s, '$.nodes')", **extra)


def _node_ids(hostnames: list[str], cluster_id: int | None) -> dict[str, int]:
    """hostname -> Node id for every node the run touched, created if new: a few queries, however many nodes."""
    if not hostnames:
        return {}
    _create_missing(Node, "hostname", hostnames)
    if cluster_id is not None:
        Node.objects.filter(hostname__in=hostnames, cluster__isnull=True).update(cluster_id=cluster_id)
    return dict(Node.objects.filter(hostname__in=hostnames).values_list("hostname", "pk"))


def _gpu_ids(pairs: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """(node id, index) -> GPU id, creating the GPUs not seen yet."""
    if not pairs:
        return {}
    node_ids = {node_id for node_id, _ in pairs}
    existing = {
        (n, i): pk for n, i, pk in GPU.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "pk")
    }
    missing = pairs - set(existing)
    if missing:
        GPU.objects.bulk_create([GPU(node_id=n, index=i) for n, i in sorted(missing)], ignore_conflicts=True)
        existing = {
            (n, i): pk for n, i, pk in GPU.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "pk")
        }
    return existing


def _sync(model, run: Run, wanted: dict[int, dict]) -> tuple[dict[int, object], dict[int, set[str]]]:
    """Make the run's rows of `model` (keyed by number) hold exactly `wanted`; write only what differs.

    Returns the rows by number, and by number the fields that changed (all of them for a row created)."""
    existing = {row.number: row for row in model.objects.filter(run=run)}
    model.objects.filter(run=run, number__in=set(existing) - set(wanted)).delete()
    result, changed = {}, {}
    for number, values in wanted.items():
        row = existing.get(number)
        if row is None:
            row = model.objects.create(run=run, number=number, **values)
            changed[number] = set(values)
        elif differ := {name for name, value in values.items() if getattr(row, name) != value}:
            for name, value in values.items():
                setattr(row, name, value)
            row.save()
            changed[number] = differ
        result[number] = row
    return result, changed


def _sync_attempts(
    run: Run, derived: list[lifecycle.Attempt], pks: dict[tuple[str, str], int], cluster_id: int | None
) -> dict[int, Attempt]:
    """The run's attempts as derived; the nodes of an attempt whose start event changed (or is new) set anew."""
    wanted = {
        a.number: {
            "job_id": a.job_id,
            "started_at": a.started_at,
            "ended_at": a.ended_at,
            "end_reason": a.end_reason,
            "resumed_from_step": a.resumed_from_step,
            "gpus": a.gpus,
            "start_event_id": pks[a.started_by],
        }
        for a in derived
    }
    attempts, changed = _sync(Attempt, run, wanted)
    moved = {attempts[n].pk: wanted[n]["start_event_id"] for n, fields in changed.items() if "start_event_id" in fields}
    if moved:
        members = Attempt.nodes.through
        members.objects.filter(attempt_id__in=moved).delete()
        if connection.vendor == "postgresql":
            _members_insert(moved, cluster_id)
            return attempts
        hosts_of = dict(Event.objects.filter(pk__in=set(moved.values())).values_list("pk", "data__nodes"))
        node_ids = _node_ids(sorted({h for hosts in hosts_of.values() for h in hosts}), cluster_id)
        members.objects.bulk_create(
            [
                members(attempt_id=attempt_id, node_id=node_ids[h])
                for attempt_id, event_pk in moved.items()
                for h in sorted(set(hosts_of[event_pk]))
            ],
            batch_size=10_000,
        )
    return attempts


def _members_insert(moved: dict[int, int], cluster_id: int | None) -> None:
    """PostgreSQL: each moved attempt's nodes, read from its start event's list by the server. At 16,384 nodes an
    attempt, building the rows in Python and sending them back was ~2,000 rows/s (a 14-day 131,072-GPU run holds
    25 million); here the hostnames come out once to create the nodes not seen yet, and the rows never leave the
    server."""
    attempt_ids, event_ids = list(moved), list(moved.values())
    hosts = _raw(
        "SELECT DISTINCT h FROM runs_event, jsonb_array_elements_text(data->'nodes') AS h WHERE id = ANY(%s)",
        [event_ids],
    )
    _node_ids(sorted(h for (h,) in hosts), cluster_id)
    _raw(
        "INSERT INTO runs_attempt_nodes (attempt_id, node_id)"
        " SELECT DISTINCT m.attempt_id, n.id"
        " FROM unnest(%s::bigint[], %s::bigint[]) AS m(attempt_id, event_id)"
        " JOIN runs_event e ON e.id = m.event_id"
        " CROSS JOIN LATERAL jsonb_array_elements_text(e.data->'nodes') AS h(hostname)"
        " JOIN runs_node n ON n.hostname = h.hostname",
        [attempt_ids, event_ids],
    )


def _sync_interruptions(run, derived: list[lifecycle.Interruption], attempts, node_ids) -> None:
    gpu_ids = _gpu_ids({(node_ids[i.node], i.gpu) for i in derived if i.node and i.gpu is not None})
    wanted = {}
    for i in derived:
        node_id = node_ids[i.node] if i.node else None
        attempt = attempts.get(i.attempt_number)
        # Ids, not objects: comparing a row's FK by object would load it, one query per interruption.
        wanted[i.number] = {
            "attempt_id": attempt.pk if attempt else None,
            "fault_at": i.fault_at,
            "detected_at": i.detected_at,
            "running_at": i.running_at,
            "resumed_at": i.resumed_at,
            "resumed_from_step": i.resumed_from_step,
            "cause": i.cause,
            "planned": i.planned,
            "kind": i.kind,
            "reason": i.reason[:1000],
            "node_id": node_id,
            "gpu_id": gpu_ids.get((node_id, i.gpu)) if node_id and i.gpu is not None else None,
            "xid": i.xid,
        }
    _sync(Interruption, run, wanted)  # nothing hangs on which interruptions changed


def record_rebuild() -> int:
    """Throw away the derived record and fold every stored event in again; returns events applied.

    Clusters and nodes stay (they carry inventory that events do not: racks, switches, API addresses);
    their derived fields are reset.
    """
    with transaction.atomic():
        Run.objects.all().delete()
        GPU.objects.all().delete()
        Node.objects.update(state="in_service", state_reason="", state_changed_at=None, last_heartbeat_at=None)
        Event.objects.update(applied_at=None, error="", quarantined_at=None)
    ids = list(Event.objects.order_by("time", "id").values_list("id", flat=True))
    return events_apply(event_ids=ids)


def pending_events_apply(*, older_than: timedelta = timedelta(seconds=30)) -> int:
    """Apply events whose task never ran (lost with a broker or a killed worker)."""
    cutoff = timezone.now() - older_than
    ids = list(
        Event.objects.filter(applied_at__isnull=True, received_at__lt=cutoff)
        .order_by("time", "id")
        .values_list("id", flat=True)[:10_000]
    )
    return events_apply(event_ids=ids)
