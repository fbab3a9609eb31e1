"""Goodput of training runs: where each second of a run's wall-clock time went (docs/DOMAIN.md section 2).

Pure: no Django import. Selectors turn Run, Interruption and Checkpoint rows into the frozen dataclasses
below and pass an explicit window [since, until) and `now`.

Times are timezone-aware datetimes (UTC). Durations are seconds (floats) unless a name says otherwise;
a Breakdown made by `weighted()` or `fleet()` holds GPU-seconds in the same fields.

How time is attributed: every interruption and checkpoint becomes labelled intervals, overlaps are resolved
by a fixed priority (STAGES order: downtime first, then rewound work, then checkpoint blocking; between two
interruptions with the same stage, the earlier one), everything is clipped to the window and to the run's
own span, and whatever no label covers is productive. Inside, every instant is a whole number of microseconds
since the Unix epoch (a datetime holds whole microseconds, so nothing is rounded) and sums stay integers until
the end: productive + stages == wall-clock and windows add up to float rounding of the final division only.

Speed (docs/PERFORMANCE.md): a 54-day run with ~500 interruptions and ~2,000 checkpoints is resolved in one
pass. Interruption stages are resolved by priority only where they overlap one another; checkpoint blocking,
the lowest priority, is the union of the writes less whatever the interruptions own.
"""

from runs.domain.goodput.engine import (
    Span,
    breakdown,
    breakdown_and_daily,
    daily,
    fleet,
    interruption_costs,
    segments,
    weekly,
)
from runs.domain.goodput.spans import (
    STAGES,
    Breakdown,
    CheckpointSpan,
    InterruptionCost,
    InterruptionSpan,
    RunTimeline,
    ShrunkSpan,
    gpu_hours,
)

__all__ = [
    "Breakdown",
    "CheckpointSpan",
    "InterruptionCost",
    "InterruptionSpan",
    "RunTimeline",
    "STAGES",
    "ShrunkSpan",
    "Span",
    "breakdown",
    "breakdown_and_daily",
    "daily",
    "fleet",
    "gpu_hours",
    "interruption_costs",
    "segments",
    "weekly",
]
