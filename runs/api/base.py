"""API plumbing that settings point at: pagination and the error shape. Imports no views."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from fleetops.jsonparse import PayloadTooLarge  # the 413, beside the parser that raises it too


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class InvalidEvents(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, problems):
        self.problems = problems
        n = len({p.index for p in problems})
        super().__init__(f"{n} event(s) {self.what}; nothing was stored.")

    what = "invalid"


class EventsOutOfBounds(InvalidEvents):
    """Events the token may not speak for (runs.domain.trust): refused whole, each named with the bound it crosses."""

    status_code = status.HTTP_403_FORBIDDEN
    what = "outside this token's bounds"


def over_quota(retry_after: float, *, what: str) -> Response:
    """429 with Retry-After: the token sent its EVENTS_QUOTA_PER_WINDOW for this window (runs/quotas.py)."""
    limit, window = settings.EVENTS_QUOTA_PER_WINDOW, settings.EVENTS_QUOTA_WINDOW_S
    reason = f"this token may send {limit:,} events every {window:g} s (an alert counts as one); "
    reason += f"nothing of this {what} was stored"
    body = {"detail": "Quota exceeded; retry later.", "errors": [{"field": "", "reason": reason}]}
    return Response(body, status=status.HTTP_429_TOO_MANY_REQUESTS, headers={"Retry-After": str(int(retry_after))})


def exception_handler(exc, context):
    """DRF's handler, with every error body shaped {detail, errors?}."""
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, InvalidEvents):
        response.data = {"detail": str(exc.detail), "errors": [p.as_dict() for p in exc.problems]}
    elif isinstance(exc, exceptions.ValidationError):
        response.data = {"detail": "Invalid request.", "errors": _field_errors(response.data)}
    return response


def _field_errors(data, prefix=""):
    if isinstance(data, dict):
        return [e for key, value in data.items() for e in _field_errors(value, f"{prefix}{key}.")]
    if isinstance(data, list) and all(isinstance(v, str) for v in data):
        return [{"field": prefix.rstrip("."), "reason": str(v)} for v in data]
    return [{"field": prefix.rstrip("."), "reason": str(data)}]
