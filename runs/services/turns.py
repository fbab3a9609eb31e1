"""Apply turns: each sender's stored events wait in a turn of their own (the node agents' polls in one
shared turn), and a turn gives way after a chunk when another waits."""

import time
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from fleetops.celery import task_named
from runs.domain import trust
from runs.models import ApiToken, ApplyTurn, Event
from runs.services.apply import APPLY_CHUNK, TRANSIENT, _apply_isolating, _apply_selected

# A turn queued this long ago lost its message (a broker restart): the sender's next batch queues another.
TURN_STALE = timedelta(minutes=1)


# The node agents' small batches wait in one turn together (`turn_of`): at 16,384 nodes they are 546 POSTs a second,
# each from its own node-bound token, and a turn each would be a task each. A batch this small is a poll's worth (a
# heartbeat and two readings a GPU; an Xid); larger ones (a spool emptied after an outage) keep their token's own turn.
AGENTS_TURN = -1


AGENT_POLL_MAX = 100


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
