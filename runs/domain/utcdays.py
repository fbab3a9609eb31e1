"""UTC days and ISO weeks: the one place their boundaries are computed (per-day goodput, weekly response metrics, the
weekly report's default window). In UTC, where a day is always 24 h and a week 7 x 24 h: in a DST-aware zone one day a
year is an hour short. Pure: standard library only; arguments and results are timezone-aware datetimes."""

from datetime import UTC, datetime, time, timedelta


def day_start(moment: datetime) -> datetime:
    """00:00 UTC of the UTC day holding `moment`."""
    return datetime.combine(moment.astimezone(UTC).date(), time(), tzinfo=UTC)


def week_start(moment: datetime) -> datetime:
    """Monday 00:00 UTC of the ISO week holding `moment`."""
    day = day_start(moment)
    return day - timedelta(days=day.weekday())


def week_before(now: datetime) -> tuple[datetime, datetime]:
    """[Monday 00:00 UTC a week ago, Monday 00:00 UTC of this week): the last full ISO week before `now`."""
    monday = week_start(now)
    return monday - timedelta(days=7), monday
