"""A dry run puts each step to the real run's checks on the simulated cluster, does nothing, and says so everywhere
(issue 46: a dry run "succeeded" every step, picking a spare on a cluster with none, seconds after the real run was
refused by the circuit breaker; the timeline and the CLI printed "Playbook #3 succeeded")."""

import pytest
from django.contrib.auth.models import Group

from fleetops_client import cli
from incidents import services
from incidents.models import Incident, PlaybookExecution, StepExecution
from incidents.playbooks.engine import playbook_start
from runs.models import Node, Run
from tests.conftest import make_token
from tests.stories import spares, story_until_failure

DRAIN = "drain-and-replace"


@pytest.fixture
def run_tasks(django_capture_on_commit_callbacks):
    return lambda: django_capture_on_commit_callbacks(execute=True)


def _start(node: str, run_tasks, *, dry_run: bool) -> PlaybookExecution:
    incident = Incident.objects.get()
    with run_tasks():
        execution = playbook_start(
            playbook=DRAIN,
            actor=services.FLEETOPS,
            node=Node.objects.get(hostname=node),
            run=Run.objects.get(name="r1"),
            incident=incident,
            dry_run=dry_run,
        )
    execution.refresh_from_db()
    return execution


def _cluster() -> tuple:
    run = Run.objects.get(name="r1")
    return dict(Node.objects.values_list("hostname", "state")), run.attempts.count()


def _statuses(execution) -> list[str]:
    return list(execution.steps.order_by("index").values_list("status", flat=True))


def _entries(execution) -> list[str]:
    return list(
        execution.incident.timeline.filter(data__execution=execution.pk)
        .order_by("at", "id")
        .values_list("text", flat=True)
    )


def test_a_dry_run_on_a_cluster_with_no_spare_says_the_real_run_would_be_refused(post, settings, run_tasks):
    settings.PLAYBOOK_AUTO_START = False
    post(story_until_failure())  # n2 cordoned by the scheduler; no hot spare anywhere
    before = _cluster()
    dry = _start("n2", run_tasks, dry_run=True)
    assert dry.status == "failed"
    assert dry.error.startswith("would be refused at step 2 (pick spare): no hot spare is free")
    assert _statuses(dry) == ["succeeded", "failed", "skipped", "skipped", "skipped"]
    assert _cluster() == before
    assert _entries(dry)[-1] == f"Dry run of playbook {DRAIN} #{dry.pk}: {dry.error}"

    real = _start("n2", run_tasks, dry_run=False)  # and the real run stops where the dry run said
    assert real.status == "failed" and "no hot spare is free" in real.error
    assert _statuses(real) == _statuses(dry)


def test_a_dry_run_the_breaker_would_refuse_says_so_with_its_numbers_and_pages_nobody(post, settings, run_tasks):
    """The issue's cluster: two nodes, none out. Draining one would put 1 of 2 = 50% out, over the 5% cap."""
    settings.PLAYBOOK_AUTO_START = False
    post([e for e in story_until_failure() if e["type"] != "node.state"] + spares("s1"))
    Node.objects.filter(hostname="s1").update(cluster=None)  # a spare of no cluster: c1 is n1 and n2
    incident = Incident.objects.get()
    severity, before = incident.severity, _cluster()
    dry = _start("n2", run_tasks, dry_run=True)
    assert dry.status == "failed"
    assert dry.error.startswith(
        "would be refused at step 1 (drain): circuit breaker open: the drain would take 1 of 2 nodes out of service, "
        "50%, over the 5% cap (out of service now: 0 of 2; with this drain: 1 of 2 = 50%; drains by FleetOps in the "
        "last hour: 0; caps: 5% of the cluster, 64 nodes out, 8 drains an hour)"
    )
    assert _statuses(dry) == ["failed"] + ["skipped"] * 4
    assert _cluster() == before
    assert not StepExecution.objects.filter(output__admitted=True).exists()  # computed, not admitted
    incident.refresh_from_db()
    assert incident.severity == severity and not incident.timeline.filter(kind="paged").exists()

    real = _start("n2", run_tasks, dry_run=False)
    assert real.error == "drain refused: " + dry.error.removeprefix("would be refused at step 1 (drain): ")
    incident.refresh_from_db()
    assert incident.timeline.filter(kind="paged").exists()  # the real refusal pages; the dry run did not


def test_a_dry_run_is_labelled_one_on_the_timeline_the_api_the_cli_and_the_page(
    post, settings, run_tasks, client, django_user_model
):
    settings.PLAYBOOK_AUTO_START = False
    post(spares("s1") + story_until_failure())
    incident = Incident.objects.get()
    services.incident_severity_set(incident=incident, actor=services.FLEETOPS, severity="SEV4", reason="a test")
    dry = _start("n2", run_tasks, dry_run=True)
    assert dry.status == "succeeded" and _statuses(dry) == ["succeeded"] * 5
    assert StepExecution.objects.filter(status="waiting_approval").count() == 0  # a dry run waits for nobody
    assert dry.steps.get(name="pick spare").output["spare"] == "s1"
    last = f"Dry run of playbook {DRAIN} #{dry.pk}: the real run would go through every step, waiting for approval "
    assert _entries(dry)[-1] == last + "at drain (oncall), requeue job (oncall); nothing was done"
    assert all(text.startswith(("Dry run of playbook", f"Dry run #{dry.pk}: step ")) for text in _entries(dry))

    token = make_token("oncall", ["read"])
    answer = client.get(f"/api/v1/incidents/{incident.pk}", headers={"Authorization": f"Bearer {token}"}).json()
    ours = [entry for entry in answer["timeline"] if entry["data"].get("execution") == dry.pk]
    assert len(ours) == 7 and all(entry["data"]["dry_run"] is True for entry in ours)
    assert all(entry["text"].startswith("Dry run") for entry in ours)
    shown = cli.incident_text(answer)
    assert f"Playbook {DRAIN} #{dry.pk} succeeded" not in shown and "succeeded" not in shown
    assert shown.count("Dry run") == 7

    user = django_user_model.objects.create_user("ana", password="s3cret-pass")
    user.groups.add(Group.objects.get(name="oncall"))
    client.force_login(user)
    page = client.get(f"/incidents/{incident.pk}").content.decode()
    assert f'id="execution-{dry.pk}-status">would succeed</span>' in page
    assert page.count(">would pass</span>") == 5
    assert page.count("would wait for approval by <b>oncall</b>") == 2
    assert "spare s1 is free" in page and "circuit breaker" in page
