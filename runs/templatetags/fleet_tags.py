from django import template

register = template.Library()


@register.filter
def dict_get(mapping, key):
    return mapping.get(key)


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
    """Minutes with one decimal, or a dash."""
    return "—" if value is None else f"{value:.1f} min"


@register.filter
def hours(seconds):
    return "—" if seconds is None else f"{seconds / 3600:.1f} h"
