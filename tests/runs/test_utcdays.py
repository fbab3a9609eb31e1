"""UTC days and ISO weeks (runs/domain/utcdays.py): the one place their boundaries are computed."""

from datetime import UTC, datetime, timedelta, timezone

from runs.domain.utcdays import day_start, week_before, week_start

TOKYO = timezone(timedelta(hours=9))


def test_a_day_starts_at_utc_midnight_whatever_the_offset_it_is_given_in():
    # 2026-03-02 08:30 in Tokyo is 2026-03-01 23:30 UTC: the UTC day is the 1st.
    assert day_start(datetime(2026, 3, 2, 8, 30, tzinfo=TOKYO)) == datetime(2026, 3, 1, tzinfo=UTC)


def test_a_week_starts_on_monday_utc():
    assert week_start(datetime(2026, 3, 8, 23, 59, tzinfo=UTC)) == datetime(2026, 3, 2, tzinfo=UTC)  # a Sunday
    assert week_start(datetime(2026, 3, 2, tzinfo=UTC)) == datetime(2026, 3, 2, tzinfo=UTC)


def test_the_week_before_is_the_last_full_iso_week():
    assert week_before(datetime(2026, 3, 9, 0, 0, 1, tzinfo=UTC)) == (
        datetime(2026, 3, 2, tzinfo=UTC),
        datetime(2026, 3, 9, tzinfo=UTC),
    )
