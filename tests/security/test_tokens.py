"""API tokens expire and can be revoked: every place that accepts a token refuses them with 401 and says why."""

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse
from rest_framework.test import APIClient

from incidents.models import Alert
from runs.models import ApiToken, Event
from tests.stories import event

NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
BATCH = "application/cloudevents-batch+json"


def create(*args) -> str:
    out = StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def post_event(token: str, id_: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = [event("node.heartbeat", NOW, id_, source="fleetops-agent://default/n1", node="n1")]
    return client.post("/api/v1/events", json.dumps(body), content_type=BATCH)


def pagerduty(token: str):
    body = {
        "routing_key": token, "event_action": "trigger", "dedup_key": "disk-n2",
        "payload": {"summary": "disk full on n2", "source": "n2", "severity": "warning"},
    }  # fmt: skip
    return APIClient().post("/api/v1/intake/pagerduty/v2/enqueue", body, format="json")


@pytest.mark.reliability(
    "API token past its expiry",
    how="create_api_token with the default lifetime; bearer token and PagerDuty routing_key used after "
    "time-machine moves past expires_at",
    outcome="works the day before; 401 'API token expired at ...' after, no event or alert stored, last_used_at "
    "untouched",
)
def test_it_refuses_a_token_past_its_expiry_everywhere(db):
    with time_machine.travel(NOW, tick=False):
        token = create("agent", "--scopes", "events:write,read", "--role", "agent", "--node", "n1")
    row = ApiToken.objects.get(name="agent")
    assert row.expires_at == NOW + timedelta(days=90)

    with time_machine.travel(NOW + timedelta(days=89, hours=23), tick=False):
        assert post_event(token, "before").status_code == 202
    used = ApiToken.objects.get(pk=row.pk).last_used_at

    with time_machine.travel(NOW + timedelta(days=90), tick=False):
        response = post_event(token, "after")
        assert response.status_code == 401
        assert response.json()["detail"] == "API token expired at 2026-08-30 09:00:00 UTC."
        assert response["WWW-Authenticate"] == "Bearer"
        pd = pagerduty(token)
        assert pd.status_code == 401 and "expired" in pd.json()["errors"][0], pd.json()
    assert list(Event.objects.values_list("event_id", flat=True)) == ["before"]
    assert not Alert.objects.exists()
    assert ApiToken.objects.get(pk=row.pk).last_used_at == used


@pytest.mark.reliability(
    "Revoked API token",
    how="revoke_api_token NAME, then the bearer token and the PagerDuty routing_key are used",
    outcome="401 'API token revoked at ...' on both, nothing stored; revoking again keeps the first time",
)
def test_it_refuses_a_revoked_token_everywhere(db):
    token = create("alertmanager", "--scopes", "events:write", "--role", "scheduler")
    assert post_event(token, "live").status_code == 202

    with time_machine.travel(NOW, tick=False):
        out = StringIO()
        call_command("revoke_api_token", "alertmanager", stdout=out)
        assert out.getvalue().strip() == "Token 'alertmanager' revoked."
    response = post_event(token, "revoked")
    assert response.status_code == 401
    assert response.json()["detail"] == "API token revoked at 2026-06-01 09:00:00 UTC."
    assert pagerduty(token).status_code == 401
    assert list(Event.objects.values_list("event_id", flat=True)) == ["live"]
    assert not Alert.objects.exists()

    out = StringIO()
    call_command("revoke_api_token", "alertmanager", stdout=out)
    assert "already revoked at 2026-06-01 09:00:00" in out.getvalue()
    assert ApiToken.objects.get(name="alertmanager").revoked_at == NOW
    with pytest.raises(CommandError, match="No token named 'nobody'"):
        call_command("revoke_api_token", "nobody")


def test_an_unknown_token_is_told_apart(db):
    response = post_event("fo_not-a-token", "x")
    assert response.status_code == 401 and response.json()["detail"] == "Unknown API token."
    assert not Event.objects.exists()


def test_a_token_that_never_expires_must_be_asked_for(db):
    with time_machine.travel(NOW, tick=False):
        create("forever", "--no-expiry")
        create("week", "--expires-in", "7")
    assert ApiToken.objects.get(name="forever").expires_at is None
    assert ApiToken.objects.get(name="week").expires_at == NOW + timedelta(days=7)
    for bad, reason in (("0", "outside 1..3650"), ("seven", "not a whole number"), ("-3", "outside 1..3650")):
        with pytest.raises(CommandError, match=reason):
            create(f"bad{bad}", "--expires-in", bad)
    with pytest.raises(CommandError, match="not allowed with"):
        create("both", "--expires-in", "7", "--no-expiry")
    assert set(ApiToken.objects.values_list("name", flat=True)) == {"forever", "week"}


@pytest.mark.reliability(
    "Admin revokes tokens in bulk",
    how="the 'Revoke the selected tokens' admin action on a live and an already revoked token",
    outcome="the live one is refused from then on (401), the earlier revocation keeps its time",
)
def test_the_admin_action_revokes_and_keeps_earlier_revocations(db, client):
    live, old = create("live"), create("old")
    earlier = datetime(2026, 1, 1, tzinfo=UTC)
    ApiToken.objects.filter(name="old").update(revoked_at=earlier)
    admin = get_user_model().objects.create_superuser("root", password="s3cret-pass-for-tests")
    client.force_login(admin)
    ids = list(ApiToken.objects.values_list("pk", flat=True))
    response = client.post(
        reverse("admin:runs_apitoken_changelist"), {"action": "revoke", "_selected_action": ids}, follow=True
    )
    assert response.status_code == 200
    assert "1 token revoked." in [str(m) for m in response.context["messages"]]
    assert ApiToken.objects.get(name="live").revoked_at is not None
    assert ApiToken.objects.get(name="old").revoked_at == earlier
    assert post_event(live, "a").status_code == 401 and post_event(old, "b").status_code == 401


def test_the_admin_add_form_proposes_the_default_lifetime(db, client):
    admin = get_user_model().objects.create_superuser("root", password="s3cret-pass-for-tests")
    client.force_login(admin)
    with time_machine.travel(NOW, tick=False):
        response = client.get(reverse("admin:runs_apitoken_add"))
    assert response.context["adminform"].form.initial["expires_at"] == NOW + timedelta(days=90)
