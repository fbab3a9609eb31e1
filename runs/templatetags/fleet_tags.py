import json

from django import template

from runs.domain.numbers import number_text

register = template.Library()


@register.filter
def dict_get(mapping, key):
    return mapping.get(key)


@register.filter
def json_fields(data):
    """An event's JSON data as (key, value) rows for a <dl>: each value written as JSON (true, null, 3.5, [1, 2],
    {"a": 1}), a string as its text; never Python's repr (True, None, {'a': 1}). Data that is not an object (a list,
    a number) is one row with no key."""
    if not isinstance(data, dict):
        return [("", _json_text(data))]
    return [(key, _json_text(value)) for key, value in data.items()]


def _json_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


@register.filter
def number(value, decimals=0):
    """A figure for reading, in the one format every page, report and e-mail uses (runs.domain.numbers): thousands
    separators, decimals only where they say something (45696.04 -> '45,696', 2.0 -> '2', 14.66 -> '14.7')."""
    return number_text(value, int(decimals))


@register.filter
def duration(seconds):
    """Seconds as '1 h 05 min', '4 min 10 s' or '12 s'."""
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@register.filter
def seconds_between(start, end):
    return (end - start).total_seconds() if start and end else None


@register.filter
def percent(fraction, digits=1):
    """A fraction as a percentage: 0.9791 -> '97.9%'."""
    if fraction is None:
        return "—"
    return f"{fraction * 100:.{int(digits)}f}%"


@register.filter
def minutes(value):
    """Minutes with up to one decimal (number), or a dash."""
    return "—" if value is None else f"{number_text(value, 1)} min"


@register.filter
def hours(seconds):
    """Seconds as hours with up to one decimal (number), or a dash."""
    return "—" if seconds is None else f"{number_text(seconds / 3600, 1)} h"


@register.filter
def gigabytes(value):
    """Bytes in GB of 10^9 bytes (how storage bandwidths are quoted), up to three decimals, or a dash."""
    return "—" if value is None else f"{number_text(value / 1e9, 3)} GB"
