"""What the schema fuzz test (tests/test_schema_fuzz.py) found, kept as plain cases: each was a 500 or a request
that ran for minutes, and is now a 4xx naming the parameter."""

import time

import pytest
from rest_framework.test import APIClient

from incidents.models import TimelineEntry
from tests.conftest import make_token


@pytest.mark.serial  # timed: each answered in under 2 s
@pytest.mark.reliability(
    "extreme query parameters: costs of 1e307 s, a goodput window from year 1 to 9999, an `until` in the first "
    "days of year 1, an incident id that is not a number",
    how="GET and POST through the API with a token holding every scope",
    outcome="400 naming the parameter (404 for the id), answered in under 2 s; before: 500s and a 4-minute request",
)
@pytest.mark.parametrize(
    ("method", "url", "status", "field"),
    [
        ("get", "/api/v1/advisor?delta_s=3.8e307&mtbf_s=2.8e207", 400, "delta_s"),
        ("get", "/api/v1/advisor?delta_s=60&mtbf_s=3600&restart_s=1e300", 400, "restart_s"),
        ("get", "/api/v1/fleet/goodput?since=0001-01-01T00:00:00Z&until=9999-12-31T00:00:00Z", 400, "since"),
        ("get", "/api/v1/fleet/goodput?until=0001-01-02T00:00:00Z", 400, "until"),
        ("get", "/api/v1/metrics/response?until=0001-01-02T00:00:00Z", 400, "until"),
        ("post", "/api/v1/incidents/null,null/acknowledge", 404, ""),
        ("post", "/api/v1/incidents/1e3/resolve", 404, ""),
    ],
)
def test_it_refuses_extreme_query_parameters(db, method, url, status, field):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + make_token("q", ["read", "incidents:write"]))
    started = time.monotonic()
    response = getattr(client, method)(url)
    assert time.monotonic() - started < 2
    assert response.status_code == status, response.content[:300]
    if field:
        assert field in {e["field"] for e in response.json()["errors"]}, response.json()
    assert TimelineEntry.objects.count() == 0


@pytest.mark.reliability(
    "a NUL character (%00) in a URL's path or query string, on pages and API endpoints",
    how="GET with a signed-in on-call engineer and with a read token",
    outcome="400 saying where the NUL is, before any view or query runs; before: the request reached the views and "
    "the database, which cannot compare text holding NUL (issue 15 found 500s)",
)
@pytest.mark.parametrize(
    "url",
    [
        "/runs/a%00b",
        "/nodes/a%00b",
        "/incidents/?run=a%00b",
        "/fleet?days=3%00",
        "/api/v1/runs/a%00b",
        "/api/v1/nodes?cluster=a%00b",
        "/api/v1/incidents?node=a%00b",
    ],
)
def test_a_nul_in_the_url_is_refused(admin_client, db, url):
    token = APIClient()
    token.credentials(HTTP_AUTHORIZATION="Bearer " + make_token("nul", ["read"]))
    for client in (admin_client, token):
        response = client.get(url)
        assert response.status_code == 400, (url, response.status_code)
        where = "path" if "%00" in url.split("?")[0] else "query string"
        assert where in response.content.decode()
