"""The delivery log of outgoing notifications; admins send a failed one again. Endpoints are edited in the admin."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fleetops.roles import is_admin
from incidents.models import Delivery
from incidents.notifications import services as notifications

LOG_LIMIT = 200


@login_required
def deliveries(request):
    status = request.GET.get("status", "")
    rows = Delivery.objects.select_related("endpoint", "incident")
    if status in Delivery.Status.values:
        rows = rows.filter(status=status)
    context = {
        "deliveries": rows[:LOG_LIMIT],
        "status": status,
        "statuses": Delivery.Status.values,
        "is_admin": is_admin(request.user),
    }
    return render(request, "incidents/deliveries.html", context)


@require_POST
@login_required
def delivery_retry(request, pk):
    if not is_admin(request.user):
        raise PermissionDenied("Sending a notification again needs the admin role.")
    notifications.delivery_retry(delivery=get_object_or_404(Delivery, pk=pk))
    return redirect("incident-deliveries")
