"""Per-token quotas on the event intake: at most EVENTS_QUOTA_PER_WINDOW events per EVENTS_QUOTA_WINDOW_S seconds a
token (0: no limit). One noisy sender is refused with 429 and Retry-After instead of filling everyone's queue; what it
was refused is not counted, so a sender that waits and retries gets through. Windows are fixed and aligned to the
epoch (a window of 10 s starts at :00, :10, ...): simple, and a burst at a boundary gets at most twice the quota."""

import math
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
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
    Retry-After). Its own short transaction: the token's row is locked for one read and one write, not while the
    batch is stored, so a token's concurrent batches do not wait on each other's storing; a batch that then fails
    to store gives its count back (quota_return)."""
    limit, window_s = settings.EVENTS_QUOTA_PER_WINDOW, settings.EVENTS_QUOTA_WINDOW_S
    if not limit:
        return None
    start = window_of(now, window_s)
    with transaction.atomic():
        row, _ = TokenQuota.objects.select_for_update().get_or_create(token=token, defaults={"window_start": start})
        if row.window_start != start:
            row.window_start, row.used = start, 0
        refused = row.used + count > limit
        if not refused:
            row.used += count
        row.save(update_fields=["window_start", "used"])
    if refused:
        return max(1.0, math.ceil((start + timedelta(seconds=window_s) - now).total_seconds()))
    return None


def quota_return(*, token: ApiToken, count: int, now: datetime) -> None:
    """Give back what a batch took when it was not stored after all (its window still running)."""
    if settings.EVENTS_QUOTA_PER_WINDOW:
        start = window_of(now, settings.EVENTS_QUOTA_WINDOW_S)
        TokenQuota.objects.filter(token=token, window_start=start, used__gte=count).update(used=F("used") - count)
