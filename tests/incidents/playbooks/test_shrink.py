"""Shrink and continue on the simulated cluster (the embedded default's): the choice, each of its three answers, a
person's override, the poll for a spare, and what the run's record and goodput say of the shrunk stretch. The same
playbook against the real Slurm controller: tests/incidents/playbooks/clusters/test_shrink_slurm.py."""

from datetime import timedelta

import pytest
from django.utils import timezone

from incidents import services
from incidents.domain.playbooks import SHRINK_AND_CONTINUE, PlaybookError, with_choice
from incidents.models import Incident, PlaybookExecution
from incidents.playbooks.engine import playbook_advance, playbook_start
from runs import selectors
from runs.models import Node, Run
from tests.stories import event

NODES = ["n1", "n2", "n3", "n4"]
FULL = 32


def ago(minutes: float):
    return timezone.now() - timedelta(minutes=minutes)


@pytest.fixture
def incident(post, settings) -> Incident:
    """Run r4 trains on four nodes (32 GPUs) and fails on n2; no spare is free. SEV3; nothing started by itself."""
    settings.PLAYBOOK_AUTO_START = False
    settings.PLAYBOOK_MAX_OUT_SHARE = 0.5
    post(
        [
            event("run.started", ago(120), "start", run="r4", cluster="c1", gpus=FULL, nodes=NODES, job_id="77"),
            event("checkpoint.started", ago(90), "c100", run="r4", step=100),
            event(
                "checkpoint.completed",
                ago(90),
                "c100-done",
                run="r4",
                step=100,
                blocking_s=5.0,
                tier="durable",
                bytes=1,
            ),
            event("run.failed", ago(60), "failed", run="r4", reason="GPU fell off the bus", node="n2", gpu=3, xid=79),
            event("node.heartbeat", ago(60), "s1-hb", node="s1", cluster="c1"),
        ]
    )
    return Incident.objects.get()


def trainer(post, key: str, *, saved: int | None = None, restored: int | None = None) -> None:
    """The training client: a checkpoint before a planned stop, a restore after a start."""
    events = []
    if saved is not None:
        events += [
            event("checkpoint.started", timezone.now(), f"{key}-save", run="r4", step=saved),
            event("checkpoint.completed", timezone.now(), f"{key}-saved", run="r4", step=saved, blocking_s=0.0, bytes=1,
                  tier="durable"),
        ]  # fmt: skip
    if restored is not None:
        events.append(event("run.restored", timezone.now(), f"{key}-restore", run="r4", from_step=restored))
    post(events)


def start(run_tasks, incident, choice: str = "") -> PlaybookExecution:
    node, run = Node.objects.get(hostname="n2"), Run.objects.get(name="r4")
    with run_tasks():
        execution = playbook_start(
            playbook="shrink-and-continue", actor=services.FLEETOPS, node=node, run=run, incident=incident,
            choice=choice,
        )  # fmt: skip
    execution.refresh_from_db()
    return execution


@pytest.fixture
def run_tasks(django_capture_on_commit_callbacks):
    return lambda: django_capture_on_commit_callbacks(execute=True)


def spare_back(name: str = "s1") -> None:
    from incidents.playbooks.clusters import adapter_for

    adapter_for(Node.objects.get(hostname=name).cluster).ensure_in_pool(name, "spare")


def test_with_no_spare_the_run_goes_on_shrunk_and_grows_back_when_one_passes_the_gate(post, incident, run_tasks):
    execution = start(run_tasks, incident)
    assert execution.status == "running", execution.error
    choice = execution.steps.get(name="shrink or wait").output
    assert (choice["decision"], choice["nodes"], choice["by"]) == ("shrink", 4, "the advisor's pricing")
    run = Run.objects.get(name="r4")
    assert [a.gpus for a in run.attempts.order_by("number")] == [FULL, FULL - 8]
    assert sorted(run.attempts.last().nodes.values_list("hostname", flat=True)) == ["n1", "n3", "n4"]
    waiting = execution.steps.get(name="wait for spare")
    assert (waiting.status, waiting.output["summary"]) == ("pending", "waiting: no hot spare has passed the gate yet")
    assert incident.timeline.filter(text__contains="wait for spare waits").count() == 1
    trainer(post, "a2", restored=100)

    with run_tasks():
        assert playbook_advance(execution_id=execution.pk) == "waiting"  # looked again: still none
    assert incident.timeline.filter(text__contains="wait for spare waits").count() == 1  # said once

    spare_back()
    trainer(post, "a2", saved=200)
    with run_tasks():
        playbook_advance(execution_id=execution.pk)
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    trainer(post, "a3", restored=200)

    run.refresh_from_db()
    attempts = list(run.attempts.order_by("number"))
    assert run.gpu_count == FULL and [a.gpus for a in attempts] == [FULL, FULL - 8, FULL]
    assert sorted(attempts[2].nodes.values_list("hostname", flat=True)) == ["n1", "n3", "n4", "s1"]
    first, grown = run.interruptions.order_by("fault_at")
    assert (first.planned, grown.planned, grown.fault_at) == (False, True, attempts[1].ended_at)
    report = selectors.run_goodput_get(run=run, since=None, until=None, now=attempts[2].started_at)
    saved = run.checkpoints.get(step=200).started_at  # the shrunk stretch kept: restore to save (blocking 0); after it
    kept = (saved - first.resumed_at).total_seconds()  # the work growing back rewinds
    assert report.total.shrunk_s == pytest.approx(kept * 8 / FULL, abs=1e-6) and report.total.shrunk_s > 0


def test_the_drained_node_itself_back_through_the_gate_is_the_spare_it_grows_onto(post, incident, run_tasks):
    execution = start(run_tasks, incident)
    trainer(post, "a2", restored=100)
    spare_back("n2")  # repaired and returned: the only spare
    with run_tasks():
        playbook_advance(execution_id=execution.pk)
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    run = Run.objects.get(name="r4")
    assert sorted(run.attempts.last().nodes.values_list("hostname", flat=True)) == NODES
    assert [a.gpus for a in run.attempts.order_by("number")] == [FULL, FULL - 8, FULL]


def test_a_free_spare_makes_it_a_replacement(post, incident, run_tasks):
    spare_back()
    execution = start(run_tasks, incident)
    assert execution.status == "succeeded", execution.error
    assert execution.steps.get(name="shrink or wait").output["decision"] == "replace"
    run = Run.objects.get(name="r4")
    assert [a.gpus for a in run.attempts.order_by("number")] == [FULL, FULL]
    assert execution.steps.get(name="grow back").output["summary"].startswith("nothing to grow back")


def test_a_person_who_chose_to_wait_holds_the_job_for_the_spare(post, incident, run_tasks):
    execution = start(run_tasks, incident, choice="wait")
    choice = execution.steps.get(name="shrink or wait").output
    assert (choice["decision"], choice["by"]) == ("wait", f"chosen by {execution.started_by}")
    assert choice["shrink_cost_node_s"] < choice["wait_cost_node_s"]  # the advisor would have shrunk: still priced
    assert "held" in execution.steps.get(name="shrink job").output["summary"]
    run = Run.objects.get(name="r4")
    assert (run.state, run.attempts.count()) == ("restarting", 1)  # nothing restarts until the spare
    spare_back()
    with run_tasks():
        playbook_advance(execution_id=execution.pk)
    execution.refresh_from_db()
    assert execution.status == "succeeded", execution.error
    assert [a.gpus for a in run.attempts.order_by("number")] == [FULL, FULL]
    assert not run.interruptions.filter(planned=True).exists()  # no grow-back stop: it never shrank


def test_a_poll_gives_up_after_its_wait(post, incident, run_tasks, settings):
    execution = start(run_tasks, incident)
    step = execution.steps.get(name="wait for spare")
    step.started_at = timezone.now() - timedelta(days=15)  # past the 14 days the definition waits
    step.save(update_fields=["started_at"])
    assert playbook_advance(execution_id=execution.pk) == "failed"
    execution.refresh_from_db()
    assert "gave up after waiting 360" in execution.error


def test_only_a_playbook_that_chooses_takes_a_choice(oncall, incident):
    with pytest.raises(PlaybookError, match="no choice to make"):
        playbook_start(playbook="drain-and-replace", actor=services.FLEETOPS, node=Node.objects.get(hostname="n2"),
                       run=Run.objects.get(name="r4"), incident=incident, choice="shrink")  # fmt: skip
    with pytest.raises(PlaybookError, match="Choose one of shrink, wait"):
        with_choice(SHRINK_AND_CONTINUE, "maybe")
    response = oncall.post(
        f"/incidents/{incident.pk}/playbooks/start", {"playbook": "drain-and-replace", "node": "n2", "choice": "wait"}
    )
    assert response.status_code == 409 and b"choice: drain-and-replace makes no choice" in response.content
    assert not PlaybookExecution.objects.exists()


def test_a_dry_run_of_shrink_and_continue_says_each_call(oncall, incident, run_tasks):
    with run_tasks():
        response = oncall.post(
            f"/incidents/{incident.pk}/playbooks/start",
            {"playbook": "shrink-and-continue", "node": "n2", "dry_run": "1", "choice": "shrink"},
        )
    assert response.status_code in (200, 302)
    execution = PlaybookExecution.objects.get()
    assert execution.status == "succeeded" and execution.dry_run
    plans = {s.name: s.output["plan"] for s in execution.steps.all()}
    assert "(chosen: shrink)" in plans["shrink or wait"]
    assert "on <its nodes less 1> nodes" in plans["shrink job"]
    assert "every 60 s" in plans["wait for spare"]
    assert Run.objects.get(name="r4").attempts.count() == 1  # nothing happened
