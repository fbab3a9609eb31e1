"""The event quarantine: events that failed to apply on their own, and their replay by an admin after a fix.
Login required; replaying needs the admin role."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from fleetops.roles import is_admin
from runs import services
from runs.models import Event

QUARANTINE_SHOWN = 200


@login_required
def quarantine(request):
    """Events that failed to apply on their own: what, when, the error; an admin replays them after a fix."""
    rows = Event.objects.filter(quarantined_at__isnull=False).order_by("-quarantined_at", "-id")
    context = {"events": rows[:QUARANTINE_SHOWN], "total": rows.count(), "may_replay": is_admin(request.user)}
    return render(request, "runs/quarantine.html", context)


@login_required
@require_POST
def quarantine_replay(request):
    if not is_admin(request.user):
        return HttpResponseForbidden("Replaying quarantined events needs the admin role.")
    ids = [int(pk) for pk in request.POST.getlist("event") if pk.isdigit()] or None
    applied = services.quarantined_replay(event_ids=ids)
    left = Event.objects.filter(quarantined_at__isnull=False).count()
    messages.info(request, f"Replayed: {applied} applied, {left} still quarantined.")
    return redirect("event-quarantine")
