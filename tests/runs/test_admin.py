"""The admin: API tokens created there are shown once and work, and are revoked, never deleted; the event log is
read-only."""

import re

import pytest
from rest_framework.test import APIClient

from runs.models import ApiToken, Event


@pytest.fixture
def admin(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("admin", "admin@example.com", "pw-admin-123"))
    return client


def test_it_creates_a_token_and_shows_it_once(admin):
    fields = {"name": "dcgm-exporter", "scopes": '["events:write"]', "role": "agent", "node": "gpu-001"}
    response = admin.post("/admin/runs/apitoken/add/", {**fields, "clusters": "", "sources": ""}, follow=True)
    assert response.status_code == 200
    (token,) = re.findall(r"copy it now\): (fo_[\w-]+)", response.content.decode())
    row = ApiToken.objects.get(name="dcgm-exporter")
    assert row.digest == ApiToken.digest_of(token) and row.scopes == ["events:write"]
    assert (row.role, row.node, row.clusters, row.sources) == ("agent", "gpu-001", [], [])
    assert token not in admin.get(f"/admin/runs/apitoken/{row.pk}/change/").content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/v1/runs").status_code == 403  # events:write only


def test_a_token_is_revoked_never_deleted(admin):
    token = ApiToken.objects.create(name="old", digest=ApiToken.digest_of("fo_x"), scopes=["events:write"])
    assert admin.post(f"/admin/runs/apitoken/{token.pk}/delete/", {"post": "yes"}).status_code == 403
    changelist = admin.get("/admin/runs/apitoken/").content.decode()
    assert "Revoke the selected tokens" in changelist and "Delete selected" not in changelist
    admin.post("/admin/runs/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is not None and ApiToken.objects.filter(pk=token.pk).exists()


def test_it_refuses_an_agent_token_without_its_node_and_bounds_that_are_not_lists(admin):
    fields = {"name": "agent", "scopes": '["events:write"]', "role": "agent", "clusters": "", "sources": ""}
    response = admin.post("/admin/runs/apitoken/add/", fields)
    assert "bound to its node" in response.content.decode()
    response = admin.post("/admin/runs/apitoken/add/", {**fields, "role": "scheduler", "clusters": '"a"'})
    assert "must be a list of names" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_the_event_log_cannot_be_changed_from_the_admin(admin):
    event = Event.objects.create(
        source="s", event_id="1", type="node.heartbeat", time="2026-03-01T00:00:00Z", data={"node": "n1"}
    )
    assert admin.get("/admin/runs/event/add/").status_code == 403
    assert admin.post(f"/admin/runs/event/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin.get(f"/admin/runs/event/{event.pk}/change/").status_code == 200  # view only


def test_quarantined_events_are_filtered_and_replayed_from_the_admin(admin):
    bad = Event.objects.create(
        source="old", event_id="q", type="run.started", time="2026-03-01T00:00:00Z", data={"run": "r9"}, run_name="r9"
    )
    Event.objects.filter(pk=bad.pk).update(applied_at="2026-03-01T00:00:01Z", quarantined_at="2026-03-01T00:00:01Z")
    listing = admin.get("/admin/runs/event/?quarantined_at__isempty=0").content.decode()
    assert f"/admin/runs/event/{bad.pk}/change/" in listing
    response = admin.post("/admin/runs/event/", {"action": "replay", "_selected_action": [bad.pk]}, follow=True)
    assert "0 applied" in response.content.decode()  # still without its job id: quarantined again
    bad.refresh_from_db()
    assert bad.quarantined_at is not None and bad.error == "KeyError: 'job_id'"
