"""One route a type (runs/domain/routes.py): every event type with a schema is routed exactly once, every list of types
by route is read from the table, and a type added without a route stops the app at its system check rather than in
production's quarantine."""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from runs import services
from runs.domain import lifecycle
from runs.domain.cloudevents import SCHEMAS
from runs.domain.routes import ROUTES, Route, problems, types_of
from runs.models import Event
from runs.retention import VALUE_FIELDS
from tests.runs.test_schema_columns import edge_event


def test_every_schema_has_one_route_and_every_route_a_schema():
    assert list(ROUTES) == list(SCHEMAS)  # one entry a type, in the schemas' order
    assert problems(SCHEMAS) == []
    assert sorted(t for route in Route for t in types_of(route)) == sorted(SCHEMAS)


def test_each_consumer_reads_exactly_its_routes_types():
    assert set(services.LOGGED_AT_INTAKE) == set(types_of(Route.LOGGED))
    assert set(services.FOLDED) == set(types_of(Route.FOLDED))
    assert set(services.READINGS) == set(types_of(Route.READING))
    assert set(services.APPLIERS) == set(types_of(Route.APPLIER))
    assert set(lifecycle.LIFECYCLE_TYPES) == set(types_of(Route.LIFECYCLE))
    assert types_of(Route.XID) == ("gpu.xid",)
    assert set(VALUE_FIELDS) <= set(SCHEMAS)  # retention rolls up only types that exist


def test_a_schema_added_without_a_route_fails_the_check(monkeypatch):
    monkeypatch.setitem(SCHEMAS, "gpu.fan", {"node": (str, True)})
    assert problems(SCHEMAS) == ["event type 'gpu.fan': a schema and no route (runs/domain/routes.py)"]
    with pytest.raises(SystemCheckError, match=r"runs\.E001.*'gpu\.fan'"):
        call_command("check")


def test_a_route_without_a_schema_fails_the_check(monkeypatch):
    monkeypatch.setitem(ROUTES, "gpu.fan", Route.READING)
    assert problems(SCHEMAS) == ["a route for 'gpu.fan', which has no schema (runs/domain/cloudevents.py)"]
    with pytest.raises(SystemCheckError, match=r"runs\.E001"):
        call_command("check")


def test_every_route_applies_again_in_a_rebuild(db):
    """The intake stores the LOGGED types applied; a rebuild applies every type again, each by its route."""
    services.own_events_ingest(events=[edge_event(type_, i) for i, type_ in enumerate(SCHEMAS)])
    services.events_apply(event_ids=list(Event.objects.values_list("id", flat=True)))
    applied = services.record_rebuild()
    assert applied == len(SCHEMAS)
    assert list(Event.objects.exclude(error="").values_list("type", "error")) == []
