"""The analytics endpoints answer what their OpenAPI schema declares (issue 44): goodput (run and fleet), the advisor's
what-if, a run's advice, levers and checkpoint I/O, and the incident response metrics.

Their views build the JSON by hand; runs/api/figures.py and incidents/api/serializers.py declare it. Each endpoint is
fetched here for the scenario's run r1 (a failure and a restart) and for a run that never started, in every shape
its answer takes (advice or not, designs priced or not, levers or none), and each body is validated against the
schema drf-spectacular generates, made strict: an object refuses a key it does not declare, at every depth, so a
figure a view adds and the schema does not name fails here, as does one of the wrong type or a null where none is
declared. The schema fuzz test (tests/test_schema_fuzz.py) holds the same answers, for the parameters it generates,
to the same closed objects; this one fetches each shape for certain.
"""

import json

import pytest
from django.test import Client
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from jsonschema import Draft4Validator

from incidents.models import Incident
from runs.models import Interruption, Run
from tests.conftest import make_token
from tests.stories import failure_and_restart

BATCH = "application/cloudevents-batch+json"
R1_DAY = "since=2026-03-01T00:00:00Z&until=2026-03-02T00:00:00Z"
SHORT = "state_bytes=1e15&gpu_host_gb_s=0.001&storage_gb_s=1"

# (operation path as the schema names it, the URL fetched): every shape of each answer.
FETCHES = [
    ("/api/v1/runs/{name}/goodput", "/api/v1/runs/r1/goodput"),
    ("/api/v1/runs/{name}/goodput", "/api/v1/runs/r1/goodput?since=2026-03-01T00:50:00Z"),
    ("/api/v1/runs/{name}/goodput", "/api/v1/runs/r0/goodput"),
    ("/api/v1/fleet/goodput", f"/api/v1/fleet/goodput?{R1_DAY}"),
    ("/api/v1/fleet/goodput", "/api/v1/fleet/goodput"),
    ("/api/v1/advisor", "/api/v1/advisor?delta_s=20&mtbf_s=86400&restart_s=600&interval_s=1800"),
    ("/api/v1/advisor", "/api/v1/advisor?delta_s=600&mtbf_s=900&restart_s=600"),  # out of range, no interval
    ("/api/v1/runs/{name}/advice", "/api/v1/runs/r1/advice"),
    ("/api/v1/runs/{name}/advice", "/api/v1/runs/r1/advice?mtbf_s=100&fast_s=1&survive=0.5"),  # a tier waste null
    ("/api/v1/runs/{name}/advice", "/api/v1/runs/r0/advice"),  # not enough record: advice null, detail
    ("/api/v1/runs/{name}/levers", "/api/v1/runs/r1/levers"),
    ("/api/v1/runs/{name}/levers", "/api/v1/runs/r1/levers?lemons=false&interval_s=600"),
    ("/api/v1/runs/{name}/levers", "/api/v1/runs/r0/levers"),  # not started: run, detail, no levers
    ("/api/v1/runs/{name}/checkpoint-io", "/api/v1/runs/r1/checkpoint-io"),
    ("/api/v1/runs/{name}/checkpoint-io", f"/api/v1/runs/r1/checkpoint-io?{SHORT}"),  # no design meets the target
    ("/api/v1/runs/{name}/checkpoint-io", "/api/v1/runs/r0/checkpoint-io"),  # unpriced: designs null
    ("/api/v1/metrics/response", "/api/v1/metrics/response"),
    ("/api/v1/metrics/response", f"/api/v1/metrics/response?{R1_DAY}"),  # r1's incident: every figure
    ("/api/v1/metrics/response", "/api/v1/metrics/response?since=2025-01-01T00:00:00Z&until=2025-01-02T00:00:00Z"),
]


def strict(schema: dict) -> dict:
    """An OpenAPI 3.0 schema object as a JSON Schema (draft 4) that refuses undeclared keys: `nullable` becomes a null
    type, and every object that names its properties takes no other (maps, which name none, keep their values' type)."""
    schema = dict(schema)
    nullable = schema.pop("nullable", False)
    if "properties" in schema:
        schema["properties"] = {name: strict(value) for name, value in schema["properties"].items()}
        schema.setdefault("additionalProperties", False)
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = strict(schema["additionalProperties"])
    if "items" in schema:
        schema["items"] = strict(schema["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            schema[key] = [strict(part) for part in schema[key]]
    if nullable:
        if "type" in schema and "enum" not in schema:
            schema["type"] = [schema["type"], "null"]
        else:
            schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


@pytest.fixture(scope="module")
def openapi() -> dict:
    """The schema as /api/v1/schema serves it."""
    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


def validator(openapi: dict, path: str) -> Draft4Validator:
    answer = openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    components = {name: strict(value) for name, value in openapi["components"]["schemas"].items()}
    return Draft4Validator({**strict(answer), "components": {"schemas": components}})


def problems(openapi: dict, path: str, body) -> list[str]:
    errors = validator(openapi, path).iter_errors(body)
    return [f"{'/'.join(map(str, error.absolute_path)) or '(body)'}: {error.message}" for error in errors]


@pytest.fixture
def fleet(db, django_capture_on_commit_callbacks):
    """The scenario's run r1 (a failure and a restart), an incident on it, and r0, a run that never started."""
    token = make_token("figures-seed", ["events:write"])
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/api/v1/events",
            json.dumps(failure_and_restart()),
            content_type=BATCH,
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
    assert response.status_code == 202, response.content
    Run.objects.create(name="r0")
    r1 = Run.objects.get(name="r1")
    fault, detected = Interruption.objects.values_list("fault_at", "detected_at").get(run=r1)
    Incident.objects.create(
        title="r1 failed", group_key="run:r1", started_at=fault, detected_at=detected, acknowledged_at=detected,
        mitigated_at=r1.ended_at, resolved_at=r1.ended_at,
    )  # fmt: skip
    Incident.objects.create(title="open", group_key="node:n2", started_at=timezone.now(), detected_at=timezone.now())


@pytest.fixture
def get(fleet):
    client = Client(HTTP_AUTHORIZATION="Bearer " + make_token("figures", ["read"]))

    def get(url: str):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
        return response.json()

    return get


@pytest.mark.parametrize(("path", "url"), FETCHES, ids=[url.removeprefix("/api/v1/") for _, url in FETCHES])
def test_the_answer_is_what_the_schema_declares(openapi, get, path, url):
    body = get(url)
    assert problems(openapi, path, body) == []


def test_every_shape_is_fetched(get):
    """The fetches above reach the branches they say they do: otherwise a figure only one of them carries goes
    unchecked."""
    assert get(f"/api/v1/fleet/goodput?{R1_DAY}")["runs"] and get(f"/api/v1/fleet/goodput?{R1_DAY}")["daily"]
    assert get("/api/v1/runs/r1/goodput")["daily"]
    assert get("/api/v1/advisor?delta_s=600&mtbf_s=900&restart_s=600")["in_range"] is False
    full = get("/api/v1/runs/r1/advice")
    assert full["advice"]["current_s"] and full["scale"] and full["tiers"] and full["mtbf_range_s"]
    assert get("/api/v1/runs/r1/advice?mtbf_s=100&fast_s=1&survive=0.5")["tiers"]["one_tier"]["waste"] is None
    assert get("/api/v1/runs/r0/advice")["advice"] is None and get("/api/v1/runs/r0/goodput")["gpus_claimed"] is None
    levers = get("/api/v1/runs/r1/levers")
    assert levers["levers"] and levers["together"]
    assert get("/api/v1/runs/r0/levers") == {
        "run": "r0",
        "detail": "The run has not started: nothing to weigh.",
        "levers": [],
    }
    priced = get("/api/v1/runs/r1/checkpoint-io")
    assert priced["designs"]["today"] and priced["record"]["writes"] and priced["warnings"]
    assert get(f"/api/v1/runs/r1/checkpoint-io?{SHORT}")["designs"]["chosen"] is None
    assert get("/api/v1/runs/r0/checkpoint-io")["designs"] is None
    assert get("/api/v1/metrics/response")["mtta"]["mean_s"] is None
    measured = get(f"/api/v1/metrics/response?{R1_DAY}")
    assert all(measured[metric]["p90_s"] is not None for metric in ("mttd", "mtta", "mttm", "mttr"))


def test_the_check_refuses_an_undeclared_figure_and_a_wrong_type(openapi, get):
    """The check itself: a key the schema does not name, at any depth, or a figure of the wrong type, fails it."""
    body = get("/api/v1/runs/r1/checkpoint-io")
    assert problems(openapi, "/api/v1/runs/{name}/checkpoint-io", body) == []
    for change in (
        lambda b: b.update(extra=1),
        lambda b: b["record"]["writes"][0].update(extra=1),
        lambda b: b["designs"]["designs"][0].update(extra=1),
        lambda b: b["designs"]["hops_gb_s"].update(extra=1.0),
        lambda b: b["record"].update(ranks="16"),
        lambda b: b["designs"].update(shortfall=None),
        lambda b: b["record"].pop("completed"),
    ):
        changed = json.loads(json.dumps(body))
        change(changed)
        assert problems(openapi, "/api/v1/runs/{name}/checkpoint-io", changed) != []
