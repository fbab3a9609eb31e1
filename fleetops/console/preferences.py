"""A person's console settings: the time zone pages show times in (UTC by default; every time says its zone).

The zone rides in the session: put there on signing in (incidents.apps), and here when the person saves another.
"""

import zoneinfo
from functools import cache

from django import forms
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from incidents.models import Preference
from incidents.selectors import TIME_ZONE_SESSION_KEY, time_zone_get


@cache
def zone_names() -> list[str]:
    return sorted(zoneinfo.available_timezones() - {"localtime", "Factory"})


class PreferenceForm(forms.Form):
    time_zone = forms.ChoiceField(label="Time zone")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = [(name, name) for name in zone_names()]


@login_required
def preferences(request):
    return _page(request, PreferenceForm(initial={"time_zone": time_zone_get(user=request.user)}))


@require_POST
@login_required
def preferences_save(request):
    form = PreferenceForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    zone = form.cleaned_data["time_zone"]
    Preference.objects.update_or_create(user=request.user, defaults={"time_zone": zone})
    request.session[TIME_ZONE_SESSION_KEY] = zone
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("preferences")


def _page(request, form: PreferenceForm, status: int = 200):
    return render(request, "preferences.html", {"form": form, "now": timezone.now()}, status=status)


class TimeZoneMiddleware:
    """Activates the signed-in person's zone for the request (after AuthenticationMiddleware)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = _zone_of(request)
        if zone is None:
            return self.get_response(request)
        timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def _zone_of(request) -> zoneinfo.ZoneInfo | None:
    """None for the API (its times are UTC, for programs) and for who is not signed in."""
    user = getattr(request, "user", None)
    if request.path.startswith("/api/") or user is None or not user.is_authenticated:
        return None
    name = request.session.get(TIME_ZONE_SESSION_KEY)
    if name is None:  # a session from before this setting existed
        name = request.session[TIME_ZONE_SESSION_KEY] = time_zone_get(user=user)
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
