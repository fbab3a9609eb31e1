"""Schemathesis drives every operation of the project's own OpenAPI schema (drf-spectacular's, fetched in-process)
against the Django WSGI app in-process, with a token holding every scope: no answer is a 5xx, every answer's status
is one the schema declares, and every body matches the schema declared for it, with no key it does not declare (the
answers' objects are closed here: drf-spectacular leaves them open to any key).

Seeded and bounded: hypothesis derandomized (the same examples every run) and MAX_EXAMPLES per operation, so CI
reruns what failed. A small fleet is in the database (run r1 on n1 and n2, an incident), and the schema handed to
Schemathesis names them as examples of the path parameters, so the detail pages answer 200 with a body to check
and not only 404.
"""

import json

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from incidents.models import Incident
from tests.conftest import make_token
from tests.stories import failure_and_restart

MAX_EXAMPLES = 12  # per operation; about 20 operations, under a minute here
BATCH = "application/cloudevents-batch+json"
INCIDENT_ID = 4242
EXAMPLES = {"name": "r1", "hostname": "n2", "id": str(INCIDENT_ID)}  # what `fleet` stores
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


def _with_examples(raw: dict, examples: dict[str, str]) -> dict:
    for item in raw["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] in examples:
                    parameter["example"] = examples[parameter["name"]]
    return raw


@pytest.fixture
def fleet(db, django_capture_on_commit_callbacks):
    """The scenario's run r1 (a failure and a restart), and an incident on it."""
    client = Client()
    token = make_token("fuzz-seed", ["events:write"])
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/v1/events",
            json.dumps(failure_and_restart()),
            content_type=BATCH,
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
    assert response.status_code == 202, response.content
    Incident.objects.create(
        pk=INCIDENT_ID, title="r1 failed", group_key="run:r1", started_at=timezone.now(), detected_at=timezone.now()
    )


def _closed(raw: dict) -> dict:
    """Every answer's objects refuse keys they do not declare, so a figure a view adds and its serializer does not
    name fails the conformance check. Request bodies (the "...Request" components, COMPONENT_SPLIT_REQUEST) stay
    open: what Schemathesis sends is generated as before."""
    for name, component in raw["components"]["schemas"].items():
        if "properties" in component and not name.endswith("Request"):
            component.setdefault("additionalProperties", False)
    return raw


def _api_schema():
    """The schema as /api/v1/schema serves it, generated here without a request (collection runs before any
    database exists; schemathesis' lazy from_fixture loader does not work with pytest 9)."""
    generator = SchemaGenerator()
    raw = json.loads(OpenApiJsonRenderer().render(generator.get_schema(request=None, public=True)))
    schema = schemathesis.openapi.from_dict(_closed(_with_examples(raw, EXAMPLES)))
    schema.app = WSGIHandler()
    return schema


@pytest.fixture
def token(db) -> str:
    return make_token("fuzz", ["read", "events:write", "incidents:write"])


@pytest.fixture
def app(fleet, token):
    """The fleet and the token stored, then: the WSGI handler closes "old" connections around each request, which
    would close the test's connection in the middle of its transaction (PostgreSQL; SQLite's in-memory one is never
    closed). Django's test client disconnects the same receivers, and connects them again after each request, so
    this comes after any use of it."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


schema = _api_schema()


@pytest.mark.reliability(
    "Schemathesis-generated requests (valid and edge-case values of every parameter and body field) against every "
    "operation of the OpenAPI schema",
    how=f"in-process WSGI, a token with every scope, hypothesis derandomized, {MAX_EXAMPLES} examples an operation",
    outcome="no 5xx; every status declared in the schema; every response body matches its declared schema, no "
    "undeclared key",
)
@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_conforms_to_its_schema(case, token, app):
    response = case.call(headers={"Authorization": f"Bearer {token}"})
    case.validate_response(response, checks=CHECKS)
