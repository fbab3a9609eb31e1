"""The recommended action with its automation read (incidents/domain/advice.py): docs/DOMAIN.md section 5."""

from incidents.domain.advice import Execution, Step, advise
from incidents.domain.playbooks import DRAIN_AND_REPLACE, SHRINK_AND_CONTINUE

XID_79 = "reboot node, drain"


def _execution(definition: dict, statuses: list[str], outputs: dict | None = None, **kwargs) -> Execution:
    """An execution of `definition` whose steps stand at `statuses` (the rest pending), outputs by step name."""
    outputs = outputs or {}
    steps = tuple(
        Step(
            name=spec["name"],
            operation=spec["operation"],
            status=statuses[i] if i < len(statuses) else "pending",
            output=outputs.get(spec["name"], {}),
            error=kwargs.pop("step_error", "") if i < len(statuses) and statuses[i] == "failed" else "",
            approver_role="oncall" if i < len(statuses) and statuses[i] == "waiting_approval" else "",
        )
        for i, spec in enumerate(definition["steps"])
    )
    return Execution(pk=3, playbook=definition["name"], node="gpu-7", steps=steps, **kwargs)


REPLACED = {
    "drain": {"summary": "cordoned gpu-7"},
    "pick spare": {"summary": "spare gpu-12", "spare": "gpu-12"},
    "requeue job": {"summary": "restarted job 4711", "job": "4711"},
    "wait running": {"summary": "job 4711 running on gpu-[1-6,12]"},
    "send to repair": {"summary": "gpu-7 sent to repair"},
}


def test_with_no_playbook_it_is_what_the_alerts_recommend():
    advice = advise(alerts=XID_79, executions=[])
    assert (advice.state, advice.left, advice.done) == ("manual", XID_79, "No playbook has run on this incident")


def test_done_steps_are_said_done_and_what_is_left_is_the_repair():
    # The issue: "Recommended action: reboot node, drain" headed an incident whose playbook had drained, replaced and
    # requeued.
    done = _execution(DRAIN_AND_REPLACE, ["succeeded"] * 5, REPLACED, status="succeeded")
    advice = advise(alerts=XID_79, executions=[done])
    assert advice.state == "done"
    assert advice.done == (
        "FleetOps drained gpu-7, replaced it with gpu-12, requeued job 4711, saw the job running again and sent gpu-7 "
        "to repair (drain-and-replace #3)"
    )
    assert advice.left == "reboot gpu-7 in repair, then bring it back with return-to-service"
    assert "drain" not in advice.left
    rma = advise(alerts="drain and RMA", executions=[done]).left
    assert rma == "send gpu-7 for RMA (a hardware fault), then bring it back with return-to-service"


def test_a_step_waiting_for_approval_is_what_a_person_must_do():
    waiting = _execution(DRAIN_AND_REPLACE, ["waiting_approval"], status="waiting_approval")
    advice = advise(alerts=XID_79, executions=[waiting])
    assert advice.state == "waiting_approval"
    assert advice.left == "approve or refuse step 1 (drain) of drain-and-replace #3, as oncall"
    assert advice.done == "drain-and-replace #3 waits for approval of step 1 (drain)"


def test_a_refusal_asks_a_person_to_decide_and_says_why():
    why = "circuit breaker open: 2 of 40 nodes already out of service (at most 5%); a human must decide"
    refused = _execution(DRAIN_AND_REPLACE, ["failed"], status="failed", error=f"drain refused: {why}", step_error=why)
    advice = advise(alerts=XID_79, executions=[refused])
    assert advice.state == "refused"
    assert advice.done == f"drain-and-replace #3 was refused at drain: {why}"
    assert advice.left == "decide: the automation stopped before drain; reboot node, drain (gpu-7) by hand, or not"


def test_a_failed_step_is_taken_over_with_what_was_done_before_it():
    why = "gave up after 3 attempts: no hot spare is free"
    failed = _execution(
        DRAIN_AND_REPLACE, ["succeeded", "failed"], REPLACED, status="failed", error=f"pick spare failed: {why}",
        step_error=why,
    )  # fmt: skip
    advice = advise(alerts=XID_79, executions=[failed])
    assert advice.state == "failed"
    assert advice.done == f"drain-and-replace #3 failed at pick spare: {why}. Before that, FleetOps drained gpu-7"
    assert advice.left == "take over from pick spare: reboot node, drain (gpu-7) by hand"


def test_a_running_playbook_leaves_nothing_yet_and_says_where_it_is():
    running = _execution(DRAIN_AND_REPLACE, ["succeeded", "succeeded", "running"], REPLACED, status="running")
    advice = advise(alerts=XID_79, executions=[running])
    assert advice.state == "running"
    assert (
        advice.done
        == "drain-and-replace #3 is running: FleetOps drained gpu-7 and picked spare gpu-12; now at requeue job"
    )
    assert advice.left.startswith("nothing yet")


def test_a_shrunk_or_held_job_is_said_so():
    outputs = {
        "drain": {"summary": "cordoned gpu-7"},
        "shrink or wait": {"decision": "wait", "nodes": 4, "summary": "hold job 4711 for a spare (...)"},
        "shrink job": {"summary": "job 4711 is PENDING: held so", "held": True, "job": "4711"},
        "wait running": {"summary": "nothing to wait for: the job is held"},
        "send to repair": {"summary": "gpu-7 sent to repair"},
        "wait for spare": {"summary": "waiting: no hot spare has passed the gate yet"},
    }
    held = _execution(SHRINK_AND_CONTINUE, ["succeeded"] * 5 + ["pending"], outputs, status="running")
    advice = advise(alerts=XID_79, executions=[held])
    assert advice.done == (
        "shrink-and-continue #3 is running: FleetOps drained gpu-7, held job 4711 for a spare and sent gpu-7 to "
        "repair; now at wait for spare (waiting: no hot spare has passed the gate yet)"
    )


def test_the_active_execution_speaks_before_an_older_one_and_an_over_incident_leaves_nothing():
    done = _execution(DRAIN_AND_REPLACE, ["succeeded"] * 5, REPLACED, status="succeeded")
    waiting = _execution(DRAIN_AND_REPLACE, ["waiting_approval"], status="waiting_approval")
    assert advise(alerts=XID_79, executions=[done, waiting]).state == "waiting_approval"
    over = advise(alerts=XID_79, executions=[done], open_=False)
    assert (over.state, over.left) == ("done", "nothing: the incident is over")
    assert over.text.startswith("nothing: the incident is over. FleetOps drained gpu-7")
