"""The playbook engine on the simulated cluster: drain-and-replace with no human, and its safety rails."""

import pytest
import time_machine

from incidents import services
from incidents.models import Incident, PlaybookExecution
from incidents.playbooks.engine import playbook_abort, playbook_advance, playbook_approve, playbook_start
from runs.models import Node, Run
from tests.stories import at, event, spares, story_until_failure, xid_storm


def test_an_xid_79_drains_the_node_and_restarts_the_run_on_a_spare_with_no_human(post):
    with time_machine.travel(at(47, 30)):  # the fault is fresh: automation acts on it
        post(spares("s1") + story_until_failure() + xid_storm(50))
    (execution,) = PlaybookExecution.objects.all()
    assert execution.status == "succeeded", execution.error
    assert [s.status for s in execution.steps.order_by("index")] == ["succeeded"] * 5
    run = Run.objects.get(name="r1")
    latest = run.attempts.order_by("-number").first()
    assert sorted(latest.nodes.values_list("hostname", flat=True)) == ["n1", "s1"]
    assert Node.objects.get(hostname="n2").state == "in_repair"
    incident = Incident.objects.get()
    assert incident.status == "triggered"  # the job runs again on the spare; the harm stops when the run trains again
    texts = list(incident.timeline.values_list("text", flat=True))
    assert any(t.startswith("Step requeue job done in") for t in texts)
    assert any("running again on" in t for t in texts)
    post([event("run.restored", at(52), "rs-1", run="r1", from_step=3)])
    incident.refresh_from_db()
    assert (incident.status, incident.mitigated_at) == ("mitigated", at(52))


def test_a_run_that_nobody_said_failed_gets_its_interruption_from_the_requeue_timed_at_the_fault(post, settings):
    """Only the agent saw the Xid (no scheduler, no job reported the failure): the requeue that ends the attempt writes
    the run.failed, so the run's record has the interruption, at the fault and detected when FleetOps noticed."""
    settings.PLAYBOOK_MAX_OUT_SHARE = 0.5  # a three-node cluster: its one drain is a third of it
    running = [e for e in story_until_failure() if e["type"] not in ("run.failed", "node.state")]
    with time_machine.travel(at(47, 30)):
        post(spares("s1") + running + xid_storm(50))
    (execution,) = PlaybookExecution.objects.all()
    assert execution.status == "succeeded", execution.error
    incident, run = Incident.objects.get(), Run.objects.get(name="r1")
    (interruption,) = run.interruptions.all()
    assert (interruption.fault_at, interruption.detected_at) == (at(44), incident.detected_at)
    where = (interruption.node.hostname, interruption.gpu.index, interruption.xid, interruption.cause)
    assert where == ("n2", 3, 79, "faulty_gpu")
    assert interruption.running_at is not None and run.state == "running"  # the requeue's attempt, on the spare
    assert "FleetOps requeues job 100 off n2" in interruption.reason
    post([event("run.restored", at(52), "rs-1", run="r1", from_step=3)])
    interruption.refresh_from_db()
    assert interruption.resumed_at == at(52)


def test_the_same_playbook_started_twice_for_one_node_runs_once(post, settings):
    settings.PLAYBOOK_AUTO_START = False
    post(spares("s1") + story_until_failure())
    incident, node, run = Incident.objects.get(), Node.objects.get(hostname="n2"), Run.objects.get(name="r1")
    first = playbook_start(playbook="drain-and-replace", actor=services.FLEETOPS, node=node, run=run, incident=incident)
    # Its first step was only queued (the on-commit callback never runs here): the execution is in flight.
    second = playbook_start(
        playbook="drain-and-replace", actor=services.FLEETOPS, node=node, run=run, incident=incident
    )
    assert second.pk == first.pk and PlaybookExecution.objects.filter(dry_run=False).count() == 1


def test_a_transient_error_is_retried_then_shown(post):
    with time_machine.travel(at(47, 30)):
        post(story_until_failure() + xid_storm(5))  # no hot spare anywhere
    (execution,) = PlaybookExecution.objects.all()
    step = execution.steps.get(name="pick spare")
    assert (execution.status, step.status, step.attempts) == ("failed", "failed", 3)
    assert "no hot spare is free" in execution.error
    assert "no hot spare is free" in Incident.objects.get().timeline.last().text


def test_the_circuit_breaker_stops_and_pages_a_human(post, settings, django_capture_on_commit_callbacks):
    settings.PLAYBOOK_AUTO_START = False
    fleet = [event("node.heartbeat", at(0), f"hb-{i}", node=f"x{i}", cluster="c1") for i in range(20)]
    broken = [
        event("node.state", at(1), f"bad-{i}", node=f"x{i}", state="in_repair", reason="rma", cluster="c1")
        for i in range(2)
    ]
    post(fleet + broken + spares("s1") + story_until_failure())
    incident = Incident.objects.get()
    severity = incident.severity
    n1, run = Node.objects.get(hostname="n1"), Run.objects.get(name="r1")  # n1 is still in service
    with django_capture_on_commit_callbacks(execute=True):
        execution = playbook_start(
            playbook="drain-and-replace", actor=services.FLEETOPS, node=n1, run=run, incident=incident
        )
    execution.refresh_from_db()
    assert execution.status == "failed" and "circuit breaker open" in execution.error
    assert Node.objects.get(hostname="n1").state == "in_service"  # nothing was touched
    incident.refresh_from_db()
    assert incident.severity < severity  # SEV2 < SEV3: paged one level up
    assert incident.timeline.filter(kind="paged").exists()


def test_a_dry_run_shows_the_plan_without_touching_the_cluster(post, settings, django_capture_on_commit_callbacks):
    settings.PLAYBOOK_AUTO_START = False
    settings.PLAYBOOK_MAX_OUT_SHARE = 0.7  # n1, n2 (cordoned) and s1: draining n1 too puts 2 of 3 out
    post(spares("s1") + story_until_failure())
    node, run = Node.objects.get(hostname="n1"), Run.objects.get(name="r1")
    with django_capture_on_commit_callbacks(execute=True):
        execution = playbook_start(
            playbook="drain-and-replace", actor=services.FLEETOPS, node=node, run=run, dry_run=True
        )
    execution.refresh_from_db()
    assert execution.status == "succeeded"
    plans = [s.output["plan"] for s in execution.steps.order_by("index")]
    assert "n1" in plans[0] and "drain" in plans[0].lower()
    assert Node.objects.get(hostname="n1").state == "in_service"
    assert run.attempts.count() == 1


def test_a_step_waits_for_approval_and_can_be_aborted(
    post, settings, django_user_model, django_capture_on_commit_callbacks
):
    settings.PLAYBOOK_AUTO_START = False
    post(spares("s1") + story_until_failure())
    node, run = Node.objects.get(hostname="n1"), Run.objects.get(name="r1")
    person = services.Actor.of_user(django_user_model.objects.create_user("ana"))
    with django_capture_on_commit_callbacks(execute=True):
        execution = playbook_start(playbook="drain-and-replace", actor=person, node=node, run=run)  # no incident
    execution.refresh_from_db()
    step = execution.steps.get(index=0)
    assert (execution.status, step.status, step.approver_role) == ("waiting_approval", "waiting_approval", "oncall")
    with pytest.raises(Exception, match="needs approval by oncall"):
        playbook_approve(execution=execution, actor=person, role_ok=False)
    playbook_abort(execution=execution, actor=person, reason="wrong node")
    execution.refresh_from_db()
    assert execution.status == "aborted" and Node.objects.get(hostname="n1").state == "in_service"
    assert playbook_advance(execution_id=execution.pk) == "aborted"


def test_an_approved_step_runs(post, settings, django_user_model, django_capture_on_commit_callbacks):
    settings.PLAYBOOK_AUTO_START = False
    post(spares("s1") + story_until_failure())
    node, run = Node.objects.get(hostname="n2"), Run.objects.get(name="r1")
    person = services.Actor.of_user(django_user_model.objects.create_user("ana"))
    with django_capture_on_commit_callbacks(execute=True):
        execution = playbook_start(playbook="drain-and-replace", actor=person, node=node, run=run)
    with django_capture_on_commit_callbacks(execute=True):
        playbook_approve(execution=execution, actor=person, role_ok=True)
    execution.refresh_from_db()
    # drain approved; requeue needs its own approval at SEV4
    assert execution.status == "waiting_approval"
    assert execution.steps.get(index=0).approved_by == "ana"
    assert execution.steps.get(name="requeue job").status == "waiting_approval"


def test_an_old_fault_does_not_start_a_playbook(post):
    post(spares("s1") + story_until_failure() + xid_storm(5))  # March, replayed in November
    assert not PlaybookExecution.objects.exists()
    assert Incident.objects.get().status == "triggered"


def test_a_repaired_node_returns_through_the_gate_to_the_spares(
    post, django_capture_on_commit_callbacks, django_user_model
):
    with time_machine.travel(at(47, 30)):
        post(spares("s1") + story_until_failure() + xid_storm(5))
    assert Node.objects.get(hostname="n2").state == "in_repair"
    person = services.Actor.of_user(django_user_model.objects.create_user("ana"))
    node = Node.objects.get(hostname="n2")
    with django_capture_on_commit_callbacks(execute=True):
        execution = playbook_start(playbook="return-to-service", actor=person, node=node)
    execution.refresh_from_db()
    assert execution.status == "waiting_approval"  # back to service always needs a person
    assert [s.status for s in execution.steps.order_by("index")][:4] == ["succeeded"] * 4  # the three checks passed
    with django_capture_on_commit_callbacks(execute=True):
        playbook_approve(execution=execution, actor=person, role_ok=True)
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    assert Node.objects.get(hostname="n2").state == "hot_spare"
    checks = {e.data["check"]: e.data["passed"] for e in node_events("n2", "healthcheck.result")}
    assert checks == {"dcgm_diag_r3": True, "nccl_allreduce": True, "burn_in": True}


def node_events(hostname, type_):
    from runs.models import Event

    return Event.objects.filter(node_name=hostname, type=type_)


def test_the_run_page_shows_each_playbook_step_of_the_interruption_with_its_time(post, client, django_user_model):
    with time_machine.travel(at(47, 30)):
        post(spares("s1") + story_until_failure() + xid_storm(5))
    client.force_login(django_user_model.objects.create_user("ana"))
    html = client.get("/runs/r1").content.decode()
    execution = PlaybookExecution.objects.get()
    assert f"drain-and-replace #{execution.pk}:" in html
    for step in execution.steps.all():
        assert step.name in html


def test_a_node_incident_is_mitigated_when_its_node_is_out_of_service(
    post, settings, django_capture_on_commit_callbacks
):
    # No run on n9: the harm is the bad GPU itself, and it stops when the node leaves service (the drain step).
    settings.PLAYBOOK_AUTO_START = False
    with time_machine.travel(at(47, 30)):
        fleet = [event("node.heartbeat", at(40), f"hb-{i}", node=f"n{i}", cluster="c1") for i in range(9, 49)]
        post(spares("s1") + fleet + xid_storm(3, node="n9", start=47))  # 40 nodes: the breaker allows one drain
        incident, node = Incident.objects.get(), Node.objects.get(hostname="n9")
        assert incident.run is None and incident.status == "triggered"
        with django_capture_on_commit_callbacks(execute=True):  # its steps, as a worker would take them
            execution = playbook_start(
                playbook="drain-and-replace", actor=services.FLEETOPS, node=node, run=None, incident=incident
            )
    execution.refresh_from_db()
    incident.refresh_from_db()
    assert incident.status == "mitigated", (execution.status, execution.error)
    assert incident.timeline.get(kind="mitigated").text.startswith("n9 out of service")
