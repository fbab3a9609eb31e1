"""The one parser of a `?since=&until=` window, for every endpoint that reads a time window (run and fleet goodput,
incident response metrics). Defaults are filled in first, then the window must end after it starts."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from rest_framework import serializers


class WindowQuery(serializers.Serializer):
    since = serializers.DateTimeField(
        required=False, help_text="RFC 3339; default: the run's start (fleet goodput, response metrics: 30 days ago)"
    )
    until = serializers.DateTimeField(required=False, help_text="RFC 3339; default: the run's end or now")


@dataclass(frozen=True)
class Window:
    since: datetime | None  # None only where the default is unknown too (a run that never started)
    until: datetime | None
    given: dict  # what the request itself named: {"since": ..., "until": ...}, either or both or neither


def window_get(
    query_params,
    *,
    until_default: datetime | None,
    since_default: datetime | Callable[[datetime], datetime] | None,
    max_window: timedelta | None = None,
) -> Window:
    """The window the request asks for, defaults filled in (`since_default` may be a function of `until`).

    400 naming the field: a time that does not parse, until not after since, or (with `max_window`) a window the
    request named that is longer than max_window."""
    query = WindowQuery(data=query_params)
    query.is_valid(raise_exception=True)
    given = dict(query.validated_data)
    until = given.get("until") or until_default
    since = given.get("since")
    if since is None:
        since = since_default(until) if callable(since_default) else since_default
    if since is not None and until is not None:
        if until <= since:
            raise serializers.ValidationError({"until": ["must be later than since"]})
        if max_window is not None and given and until - since > max_window:
            raise serializers.ValidationError(
                {"since": [f"the window from since to until is at most {max_window.days} days"]}
            )
    return Window(since=since, until=until, given=given)


def days_before(days: int) -> Callable[[datetime], datetime]:
    """A since_default: `days` days before until."""

    def since(until: datetime) -> datetime:
        try:
            return until - timedelta(days=days)
        except OverflowError:  # until in the first days of year 1
            raise serializers.ValidationError({"until": [f"must be at least {days} days after 0001-01-01"]}) from None

    return since
