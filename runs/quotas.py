"""Per-token quotas on the event intake: at most EVENTS_QUOTA_PER_WINDOW events per EVENTS_QUOTA_WINDOW_S seconds a
token (0: no limit). One noisy sender is refused with 429 and Retry-After instead of filling everyone's queue; what it
was refused is not counted, so a sender that waits and retries gets through. Windows are fixed and aligned to the
epoch (a window of 10 s starts at :00, :10, ...): simple, and a burst at a boundary gets at most twice the quota."""

import math
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F

from runs.models import ApiToken, TokenQuota

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_of(now: datetime, window_s: float) -> datetime:
    """The start of the quota window holding `now`, in whole microseconds: every moment of one window gives the same
    start exactly (float seconds would not, and a start off by a microsecond would reset the count)."""
    length = round(window_s * 1_000_000)
    elapsed = (now - EPOCH) // timedelta(microseconds=1)
    return EPOCH + timedelta(microseconds=elapsed - elapsed % length)


def quota_take(*, token: ApiToken, count: int, now: datetime) -> float | None:
    """Count `count` events against the token's quota; None when they fit, else the seconds until they may (the
    Retry-After). One statement in its own short transaction, not the batch's: the count is added, or begun again in a
    new window, only where it fits (PostgreSQL locks the token's row for that statement alone, so a token's concurrent
    batches do not wait on each other's storing); a batch that then fails to store gives its count back (quota_return).
    At 546 agents' POSTs a second the quota is one round trip of each, not a transaction of four."""
    limit, window_s = settings.EVENTS_QUOTA_PER_WINDOW, settings.EVENTS_QUOTA_WINDOW_S
    if not limit:
        return None
    start = window_of(now, window_s)
    if count <= limit:
        window = connection.ops.adapt_datetimefield_value(start)
        with connection.cursor() as cursor:
            cursor.execute(
                f"""INSERT INTO {TokenQuota._meta.db_table} AS quota (token_id, window_start, used) VALUES (%s, %s, %s)
                    ON CONFLICT (token_id) DO UPDATE SET
                        used = CASE WHEN quota.window_start = excluded.window_start
                                    THEN quota.used + excluded.used ELSE excluded.used END,
                        window_start = excluded.window_start
                    WHERE quota.window_start <> excluded.window_start OR quota.used + excluded.used <= %s
                    RETURNING used""",
                [token.pk, window, count, limit],
            )
            if cursor.fetchone() is not None:
                return None
    return max(1.0, math.ceil((start + timedelta(seconds=window_s) - now).total_seconds()))


def quota_return(*, token: ApiToken, count: int, now: datetime) -> None:
    """Give back what a batch took when it was not stored after all (its window still running)."""
    if settings.EVENTS_QUOTA_PER_WINDOW:
        start = window_of(now, settings.EVENTS_QUOTA_WINDOW_S)
        TokenQuota.objects.filter(token=token, window_start=start, used__gte=count).update(used=F("used") - count)
