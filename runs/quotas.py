"""Per-token quotas on the event intake: at most EVENTS_QUOTA_PER_WINDOW events, and EVENTS_QUOTA_BYTES_PER_WINDOW
bytes of requests (a token's quota_bytes overrides it), per EVENTS_QUOTA_WINDOW_S seconds a token (0: no limit). One
noisy sender is refused with 429 and Retry-After instead of filling everyone's queue, or the database with events few
but large; what it was refused is not counted, so a sender that waits and retries gets through. Windows are fixed and
aligned to the epoch (a window of 10 s starts at :00, :10, ...): simple, and a burst at a boundary gets at most twice
the quota.

The bytes are the request's (runs.api.base.request_bytes): its body, which holds every event's attributes and data
as they will be stored, known before a byte of it is parsed. Whitespace, fields an intake drops and duplicates count
too: a sender that wants more events in its budget sends them compactly."""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F

from runs.models import ApiToken, TokenQuota

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EVENTS, BYTES = "events", "bytes"
UNLIMITED = 2**62  # what a limit of 0 compares as: more than any bigint sum of a window reaches


@dataclass(frozen=True)
class Refusal:
    """A request over its token's quota: the budget it would cross (EVENTS or BYTES), that budget, and the seconds
    until the window ends (the Retry-After)."""

    what: str
    limit: int
    window_s: float
    retry_after: float

    def reason(self, holder: str = "this token") -> str:
        if self.what == EVENTS:
            return f"{holder} may send {self.limit:,} events every {self.window_s:g} s (an alert counts as one)"
        return f"{holder} may send {self.limit:,} bytes every {self.window_s:g} s (its requests' bodies)"


def limits_of(token: ApiToken) -> tuple[int, int]:
    """(events, bytes) the token may send a window; 0: no limit."""
    byte_limit = settings.EVENTS_QUOTA_BYTES_PER_WINDOW if token.quota_bytes is None else token.quota_bytes
    return settings.EVENTS_QUOTA_PER_WINDOW, byte_limit


def window_of(now: datetime, window_s: float) -> datetime:
    """The start of the quota window holding `now`, in whole microseconds: every moment of one window gives the same
    start exactly (float seconds would not, and a start off by a microsecond would reset the count)."""
    length = round(window_s * 1_000_000)
    elapsed = (now - EPOCH) // timedelta(microseconds=1)
    return EPOCH + timedelta(microseconds=elapsed - elapsed % length)


def quota_take(*, token: ApiToken, count: int, size: int, now: datetime) -> Refusal | None:
    """Count `count` events of `size` bytes against the token's quota; None when both fit, else why not. One
    statement in its own short transaction, not the batch's: both counts are added, or begun again in a new window,
    only where both fit (PostgreSQL locks the token's row for that statement alone, so a token's concurrent batches do
    not wait on each other's storing, and two of them cannot both take the last of a budget); a batch that then fails
    to store gives them back (quota_return). At 546 agents' POSTs a second the quota is one round trip of each, not a
    transaction of four."""
    limit, byte_limit = limits_of(token)
    if not limit and not byte_limit:
        return None
    window_s = settings.EVENTS_QUOTA_WINDOW_S
    start = window_of(now, window_s)
    fits_alone = count <= (limit or UNLIMITED) and size <= (byte_limit or UNLIMITED)
    if fits_alone:
        window = connection.ops.adapt_datetimefield_value(start)
        with connection.cursor() as cursor:
            cursor.execute(
                f"""INSERT INTO {TokenQuota._meta.db_table} AS quota (token_id, window_start, used, used_bytes)
                    VALUES (%s, %s, %s, %s)
                    ON CONFLICT (token_id) DO UPDATE SET
                        used = CASE WHEN quota.window_start = excluded.window_start
                                    THEN quota.used + excluded.used ELSE excluded.used END,
                        used_bytes = CASE WHEN quota.window_start = excluded.window_start
                                          THEN quota.used_bytes + excluded.used_bytes ELSE excluded.used_bytes END,
                        window_start = excluded.window_start
                    WHERE quota.window_start <> excluded.window_start
                       OR (quota.used + excluded.used <= %s AND quota.used_bytes + excluded.used_bytes <= %s)
                    RETURNING used""",
                [token.pk, window, count, size, limit or UNLIMITED, byte_limit or UNLIMITED],
            )
            if cursor.fetchone() is not None:
                return None
    retry_after = max(1.0, math.ceil((start + timedelta(seconds=window_s) - now).total_seconds()))
    if _over_bytes(token, limit, byte_limit, size=size, alone=not fits_alone):
        return Refusal(what=BYTES, limit=byte_limit, window_s=window_s, retry_after=retry_after)
    return Refusal(what=EVENTS, limit=limit, window_s=window_s, retry_after=retry_after)


def _over_bytes(token: ApiToken, limit: int, byte_limit: int, *, size: int, alone: bool) -> bool:
    """Whether a refused request is refused for its bytes rather than its events (both: bytes)."""
    if not limit or not byte_limit:
        return not limit
    if alone:
        return size > byte_limit
    # What the window's count left too small, read after the refusal only to name it: the count may have moved since,
    # in a rare case to a new window, and then the refusal names the events.
    used = TokenQuota.objects.filter(token=token).values_list("used_bytes", flat=True).first() or 0
    return used + size > byte_limit


def quota_return(*, token: ApiToken, count: int, size: int, now: datetime) -> None:
    """Give back what a batch took when it was not stored after all (its window still running)."""
    if any(limits_of(token)):
        start = window_of(now, settings.EVENTS_QUOTA_WINDOW_S)
        TokenQuota.objects.filter(token=token, window_start=start, used__gte=count, used_bytes__gte=size).update(
            used=F("used") - count, used_bytes=F("used_bytes") - size
        )
