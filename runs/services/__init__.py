"""Writes to the fleet record. Views, tasks and commands call these; nothing else writes. One module a topic; every
public name is here too.

The path of an event: `events_ingest` stores validated events (one transaction, all or nothing) and, on commit,
takes its sender a turn (`apply_turn_take`: at most one queued per sender); the turn (`runs.tasks.apply_turn`,
`turn_apply`) claims the sender's oldest events a chunk at a time and folds each into the record, and gives way to
the next sender after each chunk when one is waiting. Every applier is safe to run twice and in any order.

- ingest: the intake's store (`events_ingest`, `own_events_ingest`) and the rows it writes.
- turns: apply turns, the unit of fairness among senders (`turn_of`, `apply_turn_take`, `turn_apply`).
- apply: claiming stored events a chunk at a time, the quarantine of one that fails alone, the sweeper and the
  rebuild.
- appliers: one applier per event type that is not the run lifecycle, and the folds of readings where the newest
  counts.
- lifecycle: a run's state, attempts and interruptions re-derived whole from its lifecycle events.
"""

from runs.services.appliers import (
    APPLIERS,
    FOLDED,
    READINGS,
    _apply_readings,
)
from runs.services.apply import (
    APPLY_CHUNK,
    TRANSIENT,
    _apply_chunk,
    events_apply,
    log,
    pending_events_apply,
    quarantined_replay,
    record_rebuild,
)
from runs.services.ingest import (
    INTAKE_COLUMNS,
    LOGGED_AT_INTAKE,
    IngestResult,
    _event_rows,
    _insert_orm,
    _insert_postgresql,
    events_ingest,
    own_events_ingest,
)
from runs.services.lifecycle import (
    _sync_attempts,
    run_lifecycle_rebuild,
)
from runs.services.turns import (
    AGENT_POLL_MAX,
    AGENTS_TURN,
    TURN_STALE,
    apply_turn_take,
    turn_apply,
    turn_of,
)

__all__ = [
    "AGENTS_TURN",
    "AGENT_POLL_MAX",
    "APPLIERS",
    "APPLY_CHUNK",
    "FOLDED",
    "INTAKE_COLUMNS",
    "IngestResult",
    "LOGGED_AT_INTAKE",
    "READINGS",
    "TRANSIENT",
    "TURN_STALE",
    "_apply_chunk",
    "_apply_readings",
    "_event_rows",
    "_insert_orm",
    "_insert_postgresql",
    "_sync_attempts",
    "apply_turn_take",
    "events_apply",
    "events_ingest",
    "log",
    "own_events_ingest",
    "pending_events_apply",
    "quarantined_replay",
    "record_rebuild",
    "run_lifecycle_rebuild",
    "turn_apply",
    "turn_of",
]
