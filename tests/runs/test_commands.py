"""Management commands: create_api_token, rebuild_record, apply_pending_events (load_demo: tests/incidents)."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from runs.domain.cloudevents import CloudEvent
from runs.models import ApiToken, Event, Run
from runs.services import events_ingest
from tests.stories import at, event, failure_and_restart, record_snapshot


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_api_token_prints_a_token_that_works_and_stores_only_its_hash(db):
    token = run("create_api_token", "slurm-prolog", "--scopes", "events:write,read").strip()
    row = ApiToken.objects.get(name="slurm-prolog")
    assert token.startswith("fo_") and token not in (row.digest, row.hint) and row.digest == ApiToken.digest_of(token)
    assert row.scopes == ["events:write", "read"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/runs").status_code == 200
    assert ApiToken.objects.get(pk=row.pk).last_used_at is not None


def test_create_api_token_refuses_unknown_scopes_and_repeated_names(db):
    with pytest.raises(CommandError, match="unknown scope"):
        run("create_api_token", "x", "--scopes", "admin")
    run("create_api_token", "x")
    with pytest.raises(CommandError, match="exists already"):
        run("create_api_token", "x")


def test_create_api_token_binds_the_token_and_says_to_what(db):
    assert ApiToken.objects.count() == 0
    run("create_api_token", "job", "--scopes", "events:write")
    assert ApiToken.objects.get(name="job").bounds().describe() == "role trainer; source fleetops-client:"
    err = StringIO()
    call_command(
        "create_api_token", "ctl", "--role", "scheduler", "--clusters", "a, b", "--sources", "slurm://a",
        stdout=StringIO(), stderr=err,
    )  # fmt: skip
    assert "role scheduler; cluster a, b; source slurm://a" in err.getvalue()
    with pytest.raises(CommandError, match="--node: a node agent's token is bound to its node"):
        run("create_api_token", "agent", "--role", "agent")
    with pytest.raises(CommandError, match="--node: only a node agent's token"):
        run("create_api_token", "ctl2", "--role", "scheduler", "--node", "n1")
    assert not ApiToken.objects.filter(name__in=["agent", "ctl2"]).exists()


def test_create_api_token_sets_the_token_s_own_byte_quota(db, settings):
    run("create_api_token", "bulk-loader", "--quota-bytes", "0")
    run("create_api_token", "ctl", "--role", "scheduler", "--quota-bytes", str(20 * settings.QUOTA_BYTES_MIN))
    run("create_api_token", "job")
    quotas = dict(ApiToken.objects.values_list("name", "quota_bytes"))
    assert quotas == {"bulk-loader": 0, "ctl": 20 * settings.QUOTA_BYTES_MIN, "job": None}  # None: the default
    least = f"{settings.QUOTA_BYTES_MIN:,}"
    with pytest.raises(CommandError, match=f"--quota-bytes: must be 0 .no limit. or at least {least}"):
        run("create_api_token", "tiny", "--quota-bytes", "1000")
    assert not ApiToken.objects.filter(name="tiny").exists()


def test_rebuild_record_gives_the_same_record(writer, django_capture_on_commit_callbacks):
    from tests.stories import failure_and_restart

    with django_capture_on_commit_callbacks(execute=True):
        writer.post("/api/v1/events", json.dumps(failure_and_restart()), content_type="application/json")
    before = record_snapshot()
    assert run("rebuild_record").strip() == "Applied 19 events."
    assert record_snapshot() == before


@pytest.mark.reliability(
    "rebuild_record over a log holding a rank sample with data.nodes (as the intake stored one before it refused the "
    "field), beside a run's story posted through the API",
    how="the record's nodes and snapshot as the live path left them, compared with those after `manage.py "
    "rebuild_record`",
    outcome="the same nodes and record: a field the event's type lacks names nothing, whether the intake stores the "
    "event applied or a rebuild applies it again (before: the rebuild made a node for each name listed, which the "
    "live record never had)",
)
def test_rebuild_record_makes_no_node_the_live_record_lacks(writer, django_capture_on_commit_callbacks):
    sample = event("rank.step_time", at(11), "rank-0", run="r1", rank=0, node="n1", step=1, seconds=1.5)
    listed = {**sample, "data": {**sample["data"], "nodes": ["ghost-1", "ghost-2"]}}
    refused = writer.post("/api/v1/events", json.dumps(listed), content_type="application/json")
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "data.nodes"  # today's intake
    with django_capture_on_commit_callbacks(execute=True):
        writer.post("/api/v1/events", json.dumps(failure_and_restart()), content_type="application/json")
        older = CloudEvent(listed["source"], listed["id"], listed["type"], at(11), listed["data"])
        events_ingest(events=[older])  # what the intake stored of it before it checked the field
    live = record_snapshot()
    assert [row[0] for row in live["nodes"]] == ["n1", "n2", "n3"]

    assert run("rebuild_record").strip() == "Applied 20 events."
    assert record_snapshot() == live


def test_apply_pending_events_applies_what_no_task_did(writer):
    from tests.stories import failure_and_restart

    # Without capturing on-commit callbacks the queued task never runs: the events wait, unapplied.
    writer.post("/api/v1/events", json.dumps(failure_and_restart()), content_type="application/json")
    assert Event.objects.filter(applied_at__isnull=True).count() == 19 and not Run.objects.exists()
    assert run("apply_pending_events").strip() == "Applied 19 events."
    assert Run.objects.get(name="r1").state == "completed"
