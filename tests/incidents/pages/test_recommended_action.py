"""The recommended action as the incident page, the board and the API show it: the alerts' advice with the incident's
playbooks read (incidents/domain/advice.py). Before, "Recommended action: reboot node, drain" headed an incident whose
playbook had drained, replaced and requeued."""

import re

import time_machine

from incidents import services
from incidents.models import Incident
from incidents.playbooks.engine import playbook_start
from runs.models import Node, Run
from tests.stories import at, event, spares, story_until_failure, xid_storm


def _drain_and_replace(incident: Incident, node: str, actor: services.Actor, capture):
    with capture(execute=True):
        return playbook_start(
            playbook="drain-and-replace",
            actor=actor,
            node=Node.objects.get(hostname=node),
            run=Run.objects.get(name="r1"),
            incident=incident,
        )


def _header(html: str) -> str:
    block = re.search(r'<div class="recommended-action" id="recommended-action">(.*?)</div>', html, re.S).group(1)
    return " ".join(re.sub(r"<[^>]+>", " ", block).split())


def test_what_the_playbook_did_is_said_done_and_the_repair_is_what_is_left(post, oncall):
    with time_machine.travel(at(47, 30), tick=True):  # the fault is fresh: drain-and-replace runs with no human
        post(spares("s1") + story_until_failure() + xid_storm(50))
        incident = Incident.objects.get()
        execution = incident.playbooks.get()
        assert execution.status == "succeeded"
        header = _header(oncall.get(f"/incidents/{incident.pk}").content.decode())
        api = oncall.get(f"/api/v1/incidents/{incident.pk}").json()
        board = oncall.get("/incidents/").content.decode()
    did = (
        f"FleetOps drained n2, replaced it with s1, requeued job 100, saw the job running again and sent n2 to repair "
        f"(drain-and-replace #{execution.pk})"
    )
    assert header == (
        f"Recommended action done Reboot n2 in repair, then bring it back with return-to-service {did}. "
        "The alerts recommend: reboot node, drain"
    )
    assert api["advice"] == {
        "state": "done",
        "done": did,
        "left": "reboot n2 in repair, then bring it back with return-to-service",
        "alerts": "reboot node, drain",
        "playbook": f"drain-and-replace #{execution.pk}",
    }
    assert api["recommended_action"] == f"reboot n2 in repair, then bring it back with return-to-service. {did}"
    cell = re.search(rf'id="advice-{incident.pk}">(.*?)</td>', board, re.S).group(1)
    assert "Reboot n2 in repair" in cell and f"drain-and-replace #{execution.pk} done" in cell


def test_a_refusal_by_the_breaker_asks_a_person_to_decide(post, oncall, settings, django_capture_on_commit_callbacks):
    settings.PLAYBOOK_AUTO_START = False
    fleet = [event("node.heartbeat", at(0), f"hb-{i}", node=f"x{i}", cluster="c1") for i in range(20)]
    broken = [
        event("node.state", at(1), f"bad-{i}", node=f"x{i}", state="in_repair", reason="rma", cluster="c1")
        for i in range(2)
    ]
    post(fleet + broken + spares("s1") + story_until_failure() + xid_storm(5, start=44.5))
    incident = Incident.objects.get()
    # n1, still in service (the scheduler cordoned n2)
    execution = _drain_and_replace(incident, "n1", services.FLEETOPS, django_capture_on_commit_callbacks)
    header = _header(oncall.get(f"/incidents/{incident.pk}").content.decode())
    assert header.startswith(
        "Recommended action refused Decide: the automation stopped before drain; reboot node, drain (n1) by hand, or "
        f"not drain-and-replace #{execution.pk} was refused at drain: circuit breaker open"
    )
    advice = oncall.get(f"/api/v1/incidents/{incident.pk}").json()["advice"]
    assert advice["state"] == "refused" and advice["left"].startswith("decide: the automation stopped before drain")


def test_a_step_waiting_for_approval_is_the_action_left(
    post, oncall, settings, django_user_model, django_capture_on_commit_callbacks
):
    settings.PLAYBOOK_AUTO_START = False
    post(spares("s1") + story_until_failure() + xid_storm(5, start=44.5))
    incident = Incident.objects.get()
    person = services.Actor.of_user(django_user_model.objects.get(username="ana"))
    # A person lowers it to SEV4, where a drain waits for the on-call's approval (DEFAULT_APPROVALS).
    services.incident_severity_set(incident=incident, actor=person, severity="SEV4", reason="a test run")
    incident.refresh_from_db()
    execution = _drain_and_replace(incident, "n2", person, django_capture_on_commit_callbacks)
    header = _header(oncall.get(f"/incidents/{incident.pk}").content.decode())
    assert header.startswith(
        "Recommended action waiting for approval Approve or refuse step 1 (drain) of "
        f"drain-and-replace #{execution.pk}, as oncall drain-and-replace #{execution.pk} waits for approval of step 1 "
        "(drain)."
    )
    api = oncall.get(f"/api/v1/incidents/{incident.pk}").json()
    assert api["advice"]["state"] == "waiting_approval"
    assert api["recommended_action"].startswith("approve or refuse step 1 (drain)")


def test_with_no_playbook_the_alerts_advice_stands(post, oncall, settings):
    settings.PLAYBOOK_AUTO_START = False
    post(story_until_failure() + xid_storm(5, start=44.5))
    incident = Incident.objects.get()
    header = _header(oncall.get(f"/incidents/{incident.pk}").content.decode())
    assert header == "Recommended action Reboot node, drain No playbook has run on this incident."
    assert oncall.get(f"/api/v1/incidents/{incident.pk}").json()["advice"]["state"] == "manual"
