"""A person's console settings: the time zone pages show times in (UTC by default; every time says its zone).

The zone is read each request (one indexed row): saved on a phone, it holds on the laptop's next page too. The API
and the weekly reports keep UTC.
"""

import zoneinfo

from django import forms
from django.contrib.auth.decorators import login_required
from django.db import InterfaceError, OperationalError
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from incidents import services
from incidents.selectors import time_zone_get, zone_names


class PreferenceForm(forms.Form):
    time_zone = forms.ChoiceField(label="Time zone")
    back = forms.CharField(required=False, widget=forms.HiddenInput)  # the page to return to

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = [(name, name) for name in sorted(zone_names())]


@login_required
def preferences(request):
    initial = {"time_zone": time_zone_get(user=request.user), "back": request.GET.get("back", "")}
    return _page(request, PreferenceForm(initial=initial))


@require_POST
@login_required
def preferences_save(request):
    form = PreferenceForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    services.time_zone_set(user=request.user, zone=form.cleaned_data["time_zone"])
    back = form.cleaned_data["back"]
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("preferences")


def _page(request, form: PreferenceForm, status: int = 200):
    return render(request, "console/preferences.html", {"form": form, "now": timezone.now()}, status=status)


class TimeZoneMiddleware:
    """Activates the signed-in person's zone for the request (after AuthenticationMiddleware); not for the API, whose
    times are UTC, for programs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/"):
            return self.get_response(request)
        try:
            user = request.user
            zone = time_zone_get(user=user) if user.is_authenticated else None
        except (OperationalError, InterfaceError):
            # The database is down: the view meets it again and answers 503 (fleetops.middleware). Raised here, out
            # of a middleware, it would be logged as a 500 first.
            zone = None
        if zone is None:
            return self.get_response(request)
        timezone.activate(zoneinfo.ZoneInfo(zone))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
