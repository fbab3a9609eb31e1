"""A person's preferences: the time zone pages show times in."""

import functools
import zoneinfo

from incidents.models import Preference


def time_zone_get(*, user) -> str:
    """The zone the person chose for the console's times; UTC unless they chose one, or if what is stored is no
    zone this machine knows (the form would otherwise preselect another)."""
    zone = Preference.objects.filter(user=user).values_list("time_zone", flat=True).first()
    return zone if zone in zone_names() else "UTC"


@functools.cache
def zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() - {"localtime", "Factory"})
