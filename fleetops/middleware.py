"""A database that cannot be reached is an outage, not a bug: answer 503 with Retry-After, never 500.

PostgreSQL restarting, failing over or refusing connections raises django.db's OperationalError or
InterfaceError ("connection refused", "terminating connection due to administrator command", "server closed
the connection unexpectedly"). Clients that retry (the node agent, Slurm hooks, Alertmanager) retry a 503
and honour Retry-After; a 500 reads as a bug in FleetOps. Nothing is half-stored: every write runs in a
transaction that the failure rolled back. Django drops the broken connection at the end of the request
(CONN_HEALTH_CHECKS checks a kept one before reuse), so the first request after the restart succeeds.
"""

import logging
import sys

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
_FLAG = "_fleetops_database_unavailable"
_PAGE = (
    "<!doctype html><html><head><title>FleetOps: database unavailable</title></head><body>"
    "<h1>The database is unavailable</h1><p>FleetOps cannot reach its database right now. "
    "Nothing you sent was half-stored. This page can be reloaded in a few seconds.</p></body></html>"
)


def _unavailable(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError | InterfaceError)


def database_unavailable_response(request) -> HttpResponse:
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": "Database unavailable; retry later."}, status=503)
    else:
        response = HttpResponse(_PAGE, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


class DatabaseUnavailableMiddleware:
    """First in MIDDLEWARE. A view's database error becomes a 503 in process_exception; one raised elsewhere
    (a middleware saving the session) has already been turned into a 500 by Django, and is recognised here by
    the flag the got_request_exception receiver below left on the request."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, _FLAG, False):
            return database_unavailable_response(request)
        return response

    def process_exception(self, request, exception):
        if not _unavailable(exception):
            return None
        log.warning("database unavailable, answering 503 to %s %s: %s", request.method, request.path, exception)
        return database_unavailable_response(request)


def _flag_request(sender, request=None, **kwargs):
    exc = sys.exc_info()[1]
    if request is not None and exc is not None and _unavailable(exc):
        log.warning("database unavailable, answering 503 to %s %s: %s", request.method, request.path, exc)
        setattr(request, _FLAG, True)


got_request_exception.connect(_flag_request, dispatch_uid="fleetops.middleware.database_unavailable")


class NulInUrlMiddleware:
    """A NUL character in the path or the query string: 400 before any view runs. PostgreSQL cannot store or compare
    text holding NUL (psycopg refuses it), so such a URL reached the database as a lookup and answered 500."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or "%00" in request.META.get("QUERY_STRING", ""):
            where = "path" if "\x00" in request.path else "query string"
            if request.path.startswith("/api/"):
                return JsonResponse(
                    {"detail": "Invalid request.", "errors": [{"field": where, "reason": "must not contain NUL"}]},
                    status=400,
                )
            return HttpResponse(f"The URL's {where} holds a NUL character.", status=400, content_type="text/plain")
        return self.get_response(request)
