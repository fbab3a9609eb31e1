"""Pure pieces of the weekly reliability report: off-hours, cause shares against Llama 3, rankings, weeks.

No Django import. Times are timezone-aware datetimes; shares are fractions in [0, 1].
"""

from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, time

from runs.domain.taxonomy import CAUSES

# Working hours, UTC: 08:00 (inclusive) to 20:00 (exclusive), Monday to Friday. A fault outside them is
# "off-hours": the page went to whoever was on call at night or at the weekend.
WORK_START, WORK_END = time(8), time(20)
LLAMA3_TOTAL = sum(count for _label, _group, count in CAUSES.values())  # 419 unexpected interruptions


def is_off_hours(moment: datetime) -> bool:
    """True outside Monday-Friday 08:00-20:00 UTC."""
    moment = moment.astimezone(UTC)
    return moment.weekday() >= 5 or not WORK_START <= moment.time() < WORK_END


def cause_shares(causes: Iterable[str]) -> list[dict]:
    """Unexpected interruptions by cause, with the share of each and Llama 3's share from its Table 5 counts.

    Shares are count / total, never the paper's printed percentages (docs/DOMAIN.md section 1). Every cause of the
    taxonomy is listed, most frequent here first, then by Llama 3's count, so two weeks line up row by row.
    """
    counts = Counter(causes)
    total = sum(counts.values())
    rows = []
    for cause, (label, group, llama3) in CAUSES.items():
        count = counts.get(cause.value, 0)
        if not count and not llama3:
            continue
        rows.append(
            {
                "cause": cause.value,
                "label": label,
                "group": group.value,
                "count": count,
                "share": count / total if total else 0.0,
                "llama3_count": llama3,
                "llama3_share": llama3 / LLAMA3_TOTAL,
            }
        )
    rows.sort(key=lambda row: (-row["count"], -row["llama3_count"], row["cause"]))
    return rows


def top(counts: Counter, *, limit: int = 10) -> list[tuple[str, int]]:
    """The most frequent keys, ties by name; empty keys (a node without a rack) left out."""
    ranked = sorted(((key, n) for key, n in counts.items() if key), key=lambda item: (-item[1], item[0]))
    return ranked[:limit]
