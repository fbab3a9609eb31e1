"""The answer to an htmx poll: the partial, and status 286 once nothing on it changes by itself any more."""

from django.http import HttpResponse
from django.template.loader import render_to_string
from django_htmx.http import HttpResponseStopPolling


def polling_partial(request, template: str, context: dict, *, polling: bool) -> HttpResponse:
    html = render_to_string(template, context, request=request)
    # Status 286 tells htmx to stop polling: nothing on it changes by itself any more.
    return HttpResponse(html) if polling else HttpResponseStopPolling(html)
