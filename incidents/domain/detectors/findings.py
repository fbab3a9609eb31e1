"""What every detector returns (`Finding`), and the wording its sentences and evidence share."""

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from incidents.domain.xid import Action


@dataclass(frozen=True)
class Finding:
    kind: str  # an AlertKind (incidents/domain/alert_kinds.py)
    fingerprint: str
    severity: str  # critical, error, warning, info
    summary: str
    explanation: str
    node: str | None = None
    gpu: int | None = None
    run: str | None = None
    evidence: dict = field(default_factory=dict)
    action: Action = Action.NONE
    count: int = 1  # occurrences folded into this finding (an Xid storm is one finding)
    detected_at: datetime | None = None  # when it was noticed, if the source says (run.failed's detected_at); else at
    # An occurrence that its source reports again and again while one episode lasts (Alertmanager re-sends a firing
    # alert with the same startsAt): when that episode began. services.findings_record counts it once per episode.
    episode: datetime | None = None

    @property
    def recommended_action(self) -> str:
        return self.action.label


def _num(value: float | None, digits: int = 2) -> float | int | None:
    """A JSON-safe number for evidence and text: rounded, integers kept whole, NaN and infinity as None."""
    if value is None or not math.isfinite(value):
        return None
    if isinstance(value, int) or float(value).is_integer():
        return int(value)
    return round(value, digits)


def _reading(value: float) -> float | int | str:
    """A measured value for evidence: a number, or "nan" / "inf" / "-inf" kept visible as text."""
    return _num(value, 6) if math.isfinite(value) else str(value)


def _score(score: float) -> str:
    return "infinitely many" if math.isinf(score) else f"{score:.1f}"


def _duration(seconds: float) -> str:
    """Seconds in the unit a person would use: '1.31 s', '45 s', '25.0 min', '2.5 h', '3.0 days'."""
    if seconds < 10:
        return f"{seconds:.3g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _at(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
