"""A (source, id) belongs to the sender bound to that source (issue 45): an event posted first under another sender's
source and predictable id would make the rightful event a duplicate that never arrives."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from runs.domain import trust
from runs.models import ApiToken, Event, Run, TokenQuota
from tests.security.conftest import client_for
from tests.stories import event

pytestmark = pytest.mark.django_db

SLURM = "slurm/a"


def _failed(id_: str = "slurm:a:4711:0:end", source: str = SLURM, reason: str = "NODE_FAIL") -> dict:
    return event("run.failed", timezone.now(), id_, source=source, run="job-4711", reason=reason, cluster="a")


@pytest.mark.reliability(
    "An unbound token squats the Slurm epilog's (source, id)",
    how="a scheduler token is bound to slurm/a; an unbound token posts run.failed under slurm/a with the id the "
    "epilog will use, and under slurm/a/prolog; then the epilog posts it",
    outcome="403 for the squatter naming source and that another token owns it, nothing stored and no quota spent; "
    "the epilog's event 202 and applied (before: the squatter's was stored and the epilog's answered 200 duplicate)",
)
def test_an_unbound_token_cannot_send_from_a_source_another_token_owns(send):
    epilog = client_for(role="scheduler", clusters=["a"], sources=[SLURM])
    squatter = client_for(role="scheduler")
    for source in (SLURM, SLURM + "/prolog"):
        response = send(squatter, [_failed(source=source, reason="forged")])
        assert response.status_code == 403, response.content
        (error,) = response.json()["errors"]
        assert (error["index"], error["field"]) == (0, "source")
        assert f"source '{source}' belongs to another token" in error["reason"]
    assert not Event.objects.exists() and not TokenQuota.objects.exists()
    response = send(epilog, [_failed()])
    assert (response.status_code, response.json()["accepted"]) == (202, 1)
    assert Event.objects.get(source=SLURM, event_id="slurm:a:4711:0:end").data["reason"] == "NODE_FAIL"
    assert Run.objects.filter(name="job-4711").exists()
    # A source nobody owns stays open to an unbound token, and a bound token to its own sources only.
    assert send(squatter, [_failed("other", source="slurm/b")]).status_code == 202
    assert send(epilog, [_failed("x", source="slurm/b")]).status_code == 403


def test_a_revoked_or_expired_owner_frees_its_source(send):
    client_for(role="scheduler", sources=[SLURM + "/"])  # a trailing slash covers the same sources
    owner = ApiToken.objects.get()
    unbound = client_for(role="scheduler")
    assert send(unbound, [_failed("1")]).status_code == 403
    ApiToken.objects.filter(pk=owner.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert send(unbound, [_failed("2")]).status_code == 202
    ApiToken.objects.filter(pk=owner.pk).update(expires_at=None, revoked_at=None)
    assert send(unbound, [_failed("3")]).status_code == 403
    ApiToken.objects.filter(pk=owner.pk).update(revoked_at=timezone.now())
    assert send(unbound, [_failed("4")]).status_code == 202


def test_ownership_follows_the_bound_sources_when_they_change():
    token = ApiToken(name="ctl", scopes=["events:write"], role="scheduler", sources=["slurm/a/", "slurm/b"])
    token.set_new_token()
    token.save()
    assert sorted(token.owned_sources.values_list("key", flat=True)) == ["slurm/a", "slurm/b"]
    token.sources = ["slurm/c"]
    token.save()
    assert list(token.owned_sources.values_list("key", flat=True)) == ["slurm/c"]
    token.last_used_at = timezone.now()
    token.save(update_fields=["last_used_at"])  # the intake's bookkeeping leaves ownership alone
    assert list(token.owned_sources.values_list("key", flat=True)) == ["slurm/c"]


@pytest.mark.parametrize(
    ("source", "bound", "covered"),
    [
        ("slurm/a", "slurm/a", True),
        ("slurm/a/prolog", "slurm/a", True),
        ("slurm/a/prolog", "slurm/a/", True),
        ("slurm/ab", "slurm/a", False),
        ("fleetops-client://run-1/rank-0", "fleetops-client:", True),
        ("fleetops-agent://a/n1", "fleetops-agent://a/n10", False),
    ],
)
def test_the_owner_lookup_agrees_with_the_bound_check(source, bound, covered):
    assert trust.source_allowed(source, [bound]) is covered
    assert (trust.source_key(bound) in trust.source_keys(source)) is covered


def _create(*args) -> ApiToken:
    call_command("create_api_token", *args, stdout=StringIO(), stderr=StringIO())
    return ApiToken.objects.get(name=args[0])


def test_the_shipped_senders_tokens_own_their_sources_by_default():
    assert _create("agent-n1", "--role", "agent", "--node", "n1", "--clusters", "a").sources == [
        "fleetops-agent://a/n1"
    ]
    assert _create("agent-n2", "--role", "agent", "--node", "n2").sources == ["fleetops-agent://default/n2"]
    assert _create("slurm-a", "--role", "scheduler", "--clusters", "a,b").sources == ["slurm/a", "slurm/b"]
    assert _create("job", "--role", "trainer").sources == ["fleetops-client:"]
    assert _create("any-scheduler", "--role", "scheduler").sources == []
    assert _create("ctl", "--role", "scheduler", "--clusters", "a", "--sources", "").sources == []
    assert _create("k8s", "--role", "scheduler", "--sources", "k8s://a").sources == ["k8s://a"]
    owned = ApiToken.objects.get(name="agent-n1").owned_sources.values_list("key", flat=True)
    assert list(owned) == ["fleetops-agent://a/n1"]
