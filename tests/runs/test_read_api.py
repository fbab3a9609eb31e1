"""The read API: runs, a run's attempts, interruptions and checkpoints, nodes, the OpenAPI schema."""

import json

import pytest

from tests.stories import at, event, failure_and_restart


@pytest.fixture
def record(writer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        extra = [
            event("run.started", at(0), "other-1", run="r2", cluster="c2", gpus=8, nodes=["m1"], job_id="7"),
            event("gpu.ecc", at(5), "ecc-1", node="n2", gpu=3, corrected=12, uncorrected=1, remapped_rows_failure=True),
        ]
        response = writer.post(
            "/api/v1/events",
            json.dumps(failure_and_restart() + extra),
            content_type="application/cloudevents-batch+json",
        )
    assert response.status_code == 202


def test_it_lists_runs_with_counts(reader, record):
    body = reader.get("/api/v1/runs").json()
    assert body["count"] == 2
    r1 = next(r for r in body["results"] if r["name"] == "r1")
    assert (r1["state"], r1["cluster"], r1["attempts"], r1["interruptions"], r1["last_step"]) == (
        "completed",
        "c1",
        2,
        1,
        6,
    )


def test_it_filters_runs_by_state_and_cluster(reader, record):
    assert [r["name"] for r in reader.get("/api/v1/runs?state=running").json()["results"]] == ["r2"]
    assert [r["name"] for r in reader.get("/api/v1/runs?cluster=c1").json()["results"]] == ["r1"]
    assert reader.get("/api/v1/runs?state=exploded").status_code == 400


def test_it_paginates(reader, record):
    body = reader.get("/api/v1/runs?page_size=1").json()
    assert body["count"] == 2 and len(body["results"]) == 1 and body["next"].endswith("page=2&page_size=1")


def test_it_shows_a_run_and_404s_an_unknown_one(reader, record):
    assert reader.get("/api/v1/runs/r1").json()["gpu_count"] == 16
    assert reader.get("/api/v1/runs/nope").status_code == 404


def test_it_lists_a_runs_attempts_interruptions_and_checkpoints(reader, record):
    attempts = reader.get("/api/v1/runs/r1/attempts").json()["results"]
    assert [(a["number"], a["job_id"], a["nodes"]) for a in attempts] == [
        (1, "100", ["n1", "n2"]),
        (2, "101", ["n1", "n3"]),
    ]
    (i,) = reader.get("/api/v1/runs/r1/interruptions").json()["results"]
    assert (i["attempt"], i["fault_at"], i["node"], i["gpu"], i["cause"], i["cause_group"]) == (
        1,
        "2026-03-01T00:45:00Z",
        "n2",
        3,
        "faulty_gpu",
        "GPU",
    )
    assert (i["detection_s"], i["rescheduling_s"], i["reload_s"]) == (60.0, 540.0, 180.0)
    checkpoints = reader.get("/api/v1/runs/r1/checkpoints").json()["results"]
    assert [(c["step"], c["blocking_s"], c["tier"]) for c in checkpoints] == [
        (3, 20.0, "durable"),
        (6, 15.0, "durable"),
    ]


def test_it_lists_and_filters_nodes(reader, record):
    nodes = reader.get("/api/v1/nodes").json()["results"]
    assert [n["hostname"] for n in nodes] == ["m1", "n1", "n2", "n3"]
    assert [n["hostname"] for n in reader.get("/api/v1/nodes?state=cordoned").json()["results"]] == ["n2"]
    assert [n["hostname"] for n in reader.get("/api/v1/nodes?cluster=c2").json()["results"]] == ["m1"]


def test_it_shows_a_node_with_its_gpus_and_recent_events(reader, record):
    body = reader.get("/api/v1/nodes/n2").json()
    (gpu,) = body["gpus"]
    assert (gpu["index"], gpu["xid_count"], gpu["last_xid"], gpu["ecc_uncorrected"], gpu["remapped_rows_failure"]) == (
        3,
        1,
        79,
        1,
        True,
    )
    assert [e["type"] for e in body["recent_events"]] == ["node.state", "run.failed", "gpu.xid", "gpu.ecc"]


def test_reading_needs_a_token_with_the_read_scope(client, db, record):
    from tests.conftest import make_token

    assert client.get("/api/v1/runs").status_code == 401
    writer_only = make_token("w", ["events:write"])
    response = client.get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {writer_only}")
    assert response.status_code == 403 and "'read' scope" in response.json()["detail"]


def test_a_signed_in_user_can_read_from_the_browser(client, django_user_model, record):
    client.force_login(django_user_model.objects.create_user("oncall"))
    assert client.get("/api/v1/runs").status_code == 200
    assert client.post("/api/v1/events", "[]", content_type="application/json").status_code == 403


def test_it_serves_an_openapi_3_schema_and_docs(client, db):
    response = client.get("/api/v1/schema?format=json")
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    assert {"/api/v1/events", "/api/v1/runs", "/api/v1/runs/{name}/interruptions", "/api/v1/nodes/{hostname}"} <= set(
        schema["paths"]
    )
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content and b"cdn" not in docs.content.lower()
