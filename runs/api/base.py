"""API plumbing that settings point at: pagination and the error shape. Imports no views."""

from typing import TYPE_CHECKING

from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from fleetops.jsonparse import PayloadTooLarge  # the 413, beside the parser that raises it too

if TYPE_CHECKING:  # for the annotation only: the plumbing settings point at imports no models
    from runs.quotas import Refusal


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


def request_bytes(request) -> int:
    """What a request asks FleetOps to store, in bytes, for the byte quota (runs/quotas.py): its body's
    Content-Length (Django reads no more than that, and the parser no more than the body limit) and its ce-* headers,
    which hold a binary-mode event's attributes."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    headers = sum(len(v) for k, v in request.META.items() if k.startswith("HTTP_CE_"))
    return (int(length) if length.isdigit() else 0) + headers


def over_quota(refusal: "Refusal", *, what: str) -> Response:
    """429 with Retry-After: the token sent its quota of events or bytes for this window (runs/quotas.py)."""
    reason = f"{refusal.reason()}; nothing of this {what} was stored"
    body = {"detail": f"Quota of {refusal.what} exceeded; retry later.", "errors": [{"field": "", "reason": reason}]}
    retry_after = str(int(refusal.retry_after))
    return Response(body, status=status.HTTP_429_TOO_MANY_REQUESTS, headers={"Retry-After": retry_after})


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
