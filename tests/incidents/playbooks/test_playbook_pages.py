"""Playbooks on the incident page: dry-run, start, approve, refuse, abort; roles; the card's live polling."""

import re

import pytest
from django.contrib.auth.models import Group

from incidents import services
from incidents.models import Incident, PlaybookExecution, StepExecution
from incidents.playbooks.engine import playbook_start
from runs.models import Node, Run
from tests.stories import spares, story_until_failure

DRAIN = {"playbook": "drain-and-replace", "node": "n2"}


@pytest.fixture
def incident(post, settings) -> Incident:
    """Run r1 failed on n2, which the scheduler cordoned; s1 is a hot spare. SEV3; nothing started by itself."""
    settings.PLAYBOOK_AUTO_START = False
    post(spares("s1") + story_until_failure())
    return Incident.objects.get()


def _login(client, django_user_model, name, group):
    user = django_user_model.objects.create_user(name, password="s3cret-pass")
    user.groups.add(Group.objects.get(name=group))
    client.force_login(user)
    return user


@pytest.fixture
def oncall(client, django_user_model):
    _login(client, django_user_model, "ana", "oncall")
    return client


@pytest.fixture
def run_tasks(django_capture_on_commit_callbacks):
    """The engine queues its steps on commit: run them (eagerly) when the block ends, as a worker would."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def _waiting(incident, run_tasks) -> PlaybookExecution:
    """A drain-and-replace at SEV4: its drain and requeue wait for an oncall approval (DEFAULT_APPROVALS)."""
    services.incident_severity_set(incident=incident, actor=services.FLEETOPS, severity="SEV4", reason="a test")
    incident.refresh_from_db()
    node, run = Node.objects.get(hostname="n2"), Run.objects.get(name="r1")
    with run_tasks():
        execution = playbook_start(
            playbook="drain-and-replace", actor=services.FLEETOPS, node=node, run=run, incident=incident
        )
    execution.refresh_from_db()
    assert execution.status == "waiting_approval"
    return execution


def _card(html: str) -> str:
    start = html.index('id="incident-playbooks"')
    return html[start : html.index("</section>", start)]


def _cluster() -> tuple:
    run = Run.objects.get(name="r1")
    return dict(Node.objects.values_list("hostname", "state")), run.attempts.count(), run.state


# --- Dry run and start ---------------------------------------------------------------------------------------


def test_a_dry_run_shows_the_plan_and_changes_nothing_on_the_cluster(oncall, incident, run_tasks):
    before = _cluster()
    with run_tasks():
        response = oncall.post(f"/incidents/{incident.pk}/playbooks/start", {**DRAIN, "dry_run": "1"})
    assert response.status_code == 302 and response.url == f"/incidents/{incident.pk}#incident-playbooks"
    (execution,) = PlaybookExecution.objects.all()
    assert (execution.dry_run, execution.status, execution.started_by) == (True, "succeeded", "ana")
    assert _cluster() == before  # n2 still cordoned, s1 still a spare, no new attempt of r1
    card = _card(oncall.get(f"/incidents/{incident.pk}").content.decode())
    assert '<span class="badge dry-run">dry run</span>' in card and "<th>Plan</th>" in card
    assert "post node.state n2 -&gt; draining or cordoned" in card
    assert "post run.started for job" in card
    assert card.count('<span class="badge pb-succeeded">would pass</span>') == 5
    assert f'id="execution-{execution.pk}-status">would succeed</span>' in card
    assert "Dry run: the real run would go through every step; nothing was done." in card
    assert "every 2s" not in card
    assert incident.timeline.filter(kind="playbook", text__startswith="Dry run of playbook drain-and-replace").exists()


def test_a_started_playbook_runs_to_the_end_on_the_simulated_cluster(oncall, incident, run_tasks):
    with run_tasks():
        response = oncall.post(f"/incidents/{incident.pk}/playbooks/start", DRAIN)
    assert response.status_code == 302
    (execution,) = PlaybookExecution.objects.all()
    assert execution.status == "succeeded", execution.error
    assert (execution.dry_run, execution.started_by, execution.run.name) == (False, "ana", "r1")
    assert Node.objects.get(hostname="n2").state == "in_repair"
    assert Node.objects.get(hostname="s1").state == "in_service"
    incident.refresh_from_db()
    assert incident.status == "triggered"  # the job runs again, but the run has not trained again yet
    card = _card(oncall.get(f"/incidents/{incident.pk}").content.decode())
    assert f'id="execution-{execution.pk}-status">succeeded</span>' in card
    assert "started by <b>ana</b>" in card and "spare s1" in card and "n2 sent to repair" in card
    assert f'id="abort-{execution.pk}"' not in card  # nothing left to abort
    texts = list(incident.timeline.values_list("actor_name", "text"))
    assert ("ana", f"Started playbook drain-and-replace on n2 (#{execution.pk})") in texts


def test_htmx_gets_the_card_which_polls_until_the_playbook_is_done(oncall, incident, run_tasks):
    url = f"/incidents/{incident.pk}"
    with run_tasks():
        response = oncall.post(url + "/playbooks/start", DRAIN, HTTP_HX_REQUEST="true")
        # Rendered before the worker took the first step: the execution is running, the card follows it.
        html = response.content.decode()
        assert response.status_code == 200
        assert html.lstrip().startswith('<section class="card playbooks" id="incident-playbooks"')
        assert f'hx-get="{url}?part=playbooks" hx-trigger="every 2s"' in html
        for part in ("incident-header", "incident-impact", "incident-timeline"):
            assert re.search(f'id="{part}"[^>]*hx-swap-oob="true"', html), part
    done = oncall.get(url + "?part=playbooks", HTTP_HX_REQUEST="true")
    assert done.status_code == 286  # htmx: stop polling
    assert done.content.decode().lstrip().startswith('<section class="card playbooks"')
    assert "every 2s" not in done.content.decode() and ">succeeded</span>" in done.content.decode()
    for part in ("incident-header", "incident-timeline", "incident-affected"):  # what the playbook changed
        assert re.search(f'id="{part}"[^>]*hx-swap-oob="true"', done.content.decode()), part
    assert "mitigated once the run trains again" in done.content.decode()  # the timeline, out of band


def test_nothing_to_follow_stops_the_polling(oncall, incident):
    response = oncall.get(f"/incidents/{incident.pk}?part=playbooks", HTTP_HX_REQUEST="true")
    assert response.status_code == 286 and "No playbook has run for this incident." in response.content.decode()


def test_a_start_the_engine_cannot_take_is_shown(oncall, incident, run_tasks):
    execution = _waiting(incident, run_tasks)
    url = f"/incidents/{incident.pk}/playbooks/start"
    response = oncall.post(url, DRAIN)
    assert response.status_code == 409
    assert f"drain-and-replace #{execution.pk} is already active on n2." in response.content.decode()
    htmx = oncall.post(url, {**DRAIN, "node": "n1"}, HTTP_HX_REQUEST="true")  # n1 is not in this incident
    assert htmx.status_code == 200 and 'id="playbook-error">node: Select a valid choice.' in htmx.content.decode()
    assert PlaybookExecution.objects.count() == 1


# --- Approval --------------------------------------------------------------------------------------------------


def test_an_oncall_engineer_approves_each_waiting_step(oncall, incident, run_tasks):
    execution = _waiting(incident, run_tasks)
    card = _card(oncall.get(f"/incidents/{incident.pk}").content.decode())
    assert "waits for approval by <b>oncall</b>" in card
    assert f'id="approve-{execution.pk}">Approve drain</button>' in card and f'id="refuse-{execution.pk}"' in card
    url = f"/incidents/{incident.pk}/playbooks/{execution.pk}/approve"
    with run_tasks():
        html = oncall.post(url, HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith('<section class="card playbooks"')
    execution.refresh_from_db()
    assert execution.steps.get(name="drain").approved_by == "ana"
    assert execution.steps.get(name="requeue job").status == "waiting_approval"  # its own approval at SEV4
    with run_tasks():
        assert oncall.post(url).status_code == 302
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    approvals = incident.timeline.filter(text__contains="approved step").values_list("actor_name", "text")
    assert list(approvals) == [("ana", "ana approved step drain"), ("ana", "ana approved step requeue job")]
    assert "approved by <b>ana</b>" in _card(oncall.get(f"/incidents/{incident.pk}").content.decode())


def test_a_step_for_an_admin_waits_for_an_admin(client, incident, run_tasks, django_user_model):
    execution = _waiting(incident, run_tasks)
    StepExecution.objects.filter(execution=execution, name="drain").update(approver_role="admin")
    _login(client, django_user_model, "ana", "oncall")
    card = _card(client.get(f"/incidents/{incident.pk}").content.decode())
    assert "waits for approval by <b>admin</b>" in card
    assert f'id="approve-{execution.pk}"' not in card and f'id="refuse-{execution.pk}"' in card
    url = f"/incidents/{incident.pk}/playbooks/{execution.pk}/approve"
    response = client.post(url)
    assert response.status_code == 403 and "Step drain needs approval by admin." in response.content.decode()
    assert incident.timeline.filter(kind="refused").get().text == (
        "ana may not approve admin-only playbook steps on: refused"
    )
    assert execution.steps.get(name="drain").status == "waiting_approval"
    _login(client, django_user_model, "boss", "admin")
    with run_tasks():
        assert client.post(url).status_code == 302
    assert execution.steps.get(name="drain").approved_by == "boss"


def test_a_refusal_needs_a_reason_and_stops_the_playbook(oncall, incident, run_tasks):
    execution = _waiting(incident, run_tasks)
    url = f"/incidents/{incident.pk}/playbooks/{execution.pk}/abort"
    response = oncall.post(url, {"refuse": "1", "reason": " "})
    assert response.status_code == 409 and "Say why you refuse step drain" in response.content.decode()
    execution.refresh_from_db()
    assert execution.status == "waiting_approval"
    html = oncall.post(url, {"refuse": "1", "reason": "wrong node"}, HTTP_HX_REQUEST="true").content.decode()
    assert f'id="execution-{execution.pk}-status">aborted</span>' in html
    execution.refresh_from_db()
    assert execution.status == "aborted" and execution.error == "aborted by ana: refused step drain: wrong node"
    assert set(execution.steps.values_list("status", flat=True)) == {"skipped"}
    assert Node.objects.get(hostname="n2").state == "cordoned"
    assert incident.timeline.filter(kind="playbook", text__endswith="refused step drain: wrong node").exists()


def test_an_active_playbook_can_be_aborted_once(oncall, incident, run_tasks):
    execution = _waiting(incident, run_tasks)
    url = f"/incidents/{incident.pk}/playbooks/{execution.pk}/abort"
    card = _card(oncall.get(f"/incidents/{incident.pk}").content.decode())
    assert f'hx-post="{url}"' in card and f"Abort drain-and-replace #{execution.pk}?" in card  # asks first
    assert oncall.post(url, {"reason": "doing it by hand"}).status_code == 302
    execution.refresh_from_db()
    assert execution.status == "aborted" and execution.error == "aborted by ana: doing it by hand"
    again = oncall.post(url, HTTP_HX_REQUEST="true")
    assert 'id="playbook-error">This playbook is aborted already.' in again.content.decode()
    assert oncall.post(f"/incidents/{incident.pk}/playbooks/{execution.pk + 1}/abort").status_code == 404


# --- Roles ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, form, verb",
    [
        ("start", {**DRAIN, "dry_run": "1"}, "start playbooks on"),
        ("approve", {}, "approve playbook steps on"),
        ("abort", {"reason": "no"}, "abort playbooks on"),
        ("refuse", {"refuse": "1", "reason": "no"}, "abort playbooks on"),
    ],
)
def test_a_viewer_cannot_run_playbooks_and_leaves_only_an_audit_entry(
    client, incident, run_tasks, django_user_model, action, form, verb
):
    execution = _waiting(incident, run_tasks)
    user = _login(client, django_user_model, "vic", "viewer")
    before = list(incident.timeline.values_list("pk", flat=True))
    path = "playbooks/start" if action == "start" else f"playbooks/{execution.pk}/{action.replace('refuse', 'abort')}"
    with run_tasks():
        response = client.post(f"/incidents/{incident.pk}/{path}", form)
    assert response.status_code == 403
    assert list(PlaybookExecution.objects.values_list("pk", "status")) == [(execution.pk, "waiting_approval")]
    new = list(incident.timeline.exclude(pk__in=before))
    assert [(e.kind, e.actor, e.text) for e in new] == [("refused", user, f"vic may not {verb}: refused")]


def test_a_viewer_follows_playbooks_without_buttons(client, incident, run_tasks, django_user_model):
    execution = _waiting(incident, run_tasks)
    _login(client, django_user_model, "vic", "viewer")
    card = _card(client.get(f"/incidents/{incident.pk}").content.decode())
    assert "waits for approval by <b>oncall</b>" in card and 'hx-trigger="every 2s"' in card
    for button in (f"approve-{execution.pk}", f"refuse-{execution.pk}", f"abort-{execution.pk}", "playbook-start"):
        assert f'id="{button}"' not in card


def test_playbooks_take_only_post(oncall, incident):
    assert oncall.get(f"/incidents/{incident.pk}/playbooks/start").status_code == 405
