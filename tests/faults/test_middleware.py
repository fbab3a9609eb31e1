"""DatabaseUnavailableMiddleware on its own (the end-to-end proof with a stopped PostgreSQL is
test_database_restart.py): which errors become a 503, and in what shape."""

import sys

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.test import RequestFactory

from fleetops.middleware import DatabaseUnavailableMiddleware

factory = RequestFactory()


def _middleware(get_response=lambda request: HttpResponse("ok")):
    return DatabaseUnavailableMiddleware(get_response)


def test_it_answers_a_database_error_under_api_with_json_503_and_retry_after():
    request = factory.post("/api/v1/events")
    response = _middleware().process_exception(request, OperationalError("connection refused"))
    assert (response.status_code, response["Content-Type"], response["Retry-After"]) == (503, "application/json", "5")
    assert b"Database unavailable" in response.content


def test_it_answers_a_lost_connection_on_a_page_with_an_html_503():
    response = _middleware().process_exception(factory.get("/incidents/"), InterfaceError("connection already closed"))
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response["Content-Type"].startswith("text/html") and b"database is unavailable" in response.content


def test_it_leaves_other_errors_to_django():
    assert _middleware().process_exception(factory.get("/"), ValueError("a bug")) is None


def test_it_turns_the_500_of_a_database_error_raised_outside_the_view_into_a_503():
    def inner(request):  # what Django does when a middleware under this one raises: signal, then a 500
        try:
            raise OperationalError("server closed the connection unexpectedly")
        except OperationalError:
            got_request_exception.send(sender=None, request=request)
            assert sys.exc_info()[0] is OperationalError
        return HttpResponse("Internal Server Error", status=500)

    response = _middleware(inner)(factory.get("/api/v1/runs"))
    assert response.status_code == 503 and response["Retry-After"] == "5"
    plain = _middleware(lambda request: HttpResponse("Internal Server Error", status=500))(factory.get("/"))
    assert plain.status_code == 500  # a 500 for any other reason stays one
