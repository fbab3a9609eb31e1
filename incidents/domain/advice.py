"""What is left for a person on an incident, once its automation is read (docs/DOMAIN.md section 5, "Recommended
action"). Pure: no Django import. The selector (incidents/selectors/advice.py) passes the incident's playbook executions
(dry runs left out: they did nothing) as `Execution`s, newest first.

The alerts say what a fault needs ("reboot node, drain", Xid 79); a playbook may have done part of it already. The
advice says what FleetOps did (the steps done, in words), where its automation stands (running, waiting for approval,
refused, failed, aborted, done) and what is left for a person: approve a step, decide after a refusal, take over a
failed step, or the node's repair that no playbook does.
"""

from dataclasses import dataclass, field

from incidents.domain.xid import Action

STATES = ("manual", "running", "waiting_approval", "refused", "failed", "aborted", "done")


@dataclass(frozen=True)
class Step:
    name: str
    operation: str
    status: str  # pending, running, waiting_approval, succeeded, failed, skipped
    output: dict = field(default_factory=dict)
    error: str = ""
    approver_role: str = ""


@dataclass(frozen=True)
class Execution:
    pk: int
    playbook: str
    status: str  # running, waiting_approval, succeeded, failed, aborted
    node: str
    steps: tuple[Step, ...]
    error: str = ""  # the engine's: "<step> refused: <why>" or "<step> failed: <why>"


@dataclass(frozen=True)
class Advice:
    state: str  # one of STATES: "manual" when no playbook ran
    done: str  # what FleetOps did and where its automation stands, a sentence
    left: str  # what is left for a person
    alerts: str  # what the alerts recommend, as they say it
    playbook: str = ""  # "drain-and-replace #3", the execution read

    @property
    def text(self) -> str:
        """One line for the CLI and the API's `recommended_action`."""
        return f"{self.left}. {self.done}" if self.done else self.left


def advise(*, alerts: str, executions: list[Execution], open_: bool = True) -> Advice:
    """The advice for an incident whose alerts recommend `alerts` and whose playbooks are `executions` (newest
    first): the active one if any, else the newest. `open_` False: resolved or closed, nothing is left on it."""
    execution = next((e for e in executions if e.status in ("running", "waiting_approval")), None)
    execution = execution or (executions[0] if executions else None)
    if execution is None:
        left = alerts if alerts and alerts != Action.NONE.label else "read the alerts: none recommends an action"
        return Advice("manual", "No playbook has run on this incident", left if open_ else "nothing", alerts)
    name = f"{execution.playbook} #{execution.pk}"
    did = _did(execution)
    state, done, left = _where(execution, name, did, alerts)
    return Advice(state, done, left if open_ else "nothing: the incident is over", alerts, name)


def _where(execution: Execution, name: str, did: str, alerts: str) -> tuple[str, str, str]:
    """(state, done, left) for the execution read."""
    steps = execution.steps
    so_far = f": FleetOps {did}" if did else ""
    if execution.status == "waiting_approval":
        step = next(s for s in steps if s.status == "waiting_approval")
        return (
            "waiting_approval",
            f"{name} waits for approval of step {steps.index(step) + 1} ({step.name}){so_far}",
            f"approve or refuse step {steps.index(step) + 1} ({step.name}) of {name}, as {step.approver_role}",
        )
    if execution.status == "running":
        step = next((s for s in steps if s.status not in ("succeeded", "skipped")), None)
        now = f"; now at {step.name}" if step is not None else ""
        waiting = step.output.get("summary", "") if step is not None else ""
        now += f" ({waiting})" if waiting.startswith("waiting") else ""
        return "running", f"{name} is running{so_far}{now}", f"nothing yet: {name} is on it (abort it to take over)"
    if execution.status == "succeeded":
        return "done", f"FleetOps {did} ({name})" if did else f"{name} succeeded", _after(execution, alerts)
    failed = next((s for s in steps if s.status == "failed"), None)
    if execution.status == "failed" and failed is not None:
        refused = execution.error.startswith(f"{failed.name} refused")
        reason = failed.error or execution.error
        verb = "was refused at" if refused else "failed at"
        done = f"{name} {verb} {failed.name}: {reason}" + (f". Before that, FleetOps {did}" if did else "")
        todo = _by_hand(execution, alerts)
        if refused:
            return "refused", done, f"decide: the automation stopped before {failed.name}; {todo} by hand, or not"
        return "failed", done, f"take over from {failed.name}: {todo} by hand"
    done = f"{name} {execution.status}" + (f": {execution.error}" if execution.error else "") + so_far
    return "aborted" if execution.status == "aborted" else "failed", done, f"{_by_hand(execution, alerts)} by hand"


def _by_hand(execution: Execution, alerts: str) -> str:
    """What the alerts recommend, on the execution's node, or the playbook's own work when they recommend nothing."""
    if alerts and alerts != Action.NONE.label:
        return f"{alerts} ({execution.node})" if execution.node else alerts
    return f"what {execution.playbook} would have done" + (f" on {execution.node}" if execution.node else "")


# What remains of the alerts' recommendation once a drain-and-replace (or shrink-and-continue) has drained the node,
# moved the job and sent the node to repair: the repair itself, which no playbook does.
_REPAIR = {
    Action.REBOOT_NODE: "reboot {node} in repair",
    Action.RESET_GPU: "reset the GPU on {node} in repair",
    Action.DRAIN_RMA: "send {node} for RMA (a hardware fault)",
    Action.DRAIN_INVESTIGATE: "investigate {node} in repair",
    Action.WATCH: "check {node} in repair",
    Action.RESTART_JOB: "check {node} in repair (the job was restarted)",
    Action.NONE: "check {node} in repair",
}
_ACTION_OF_LABEL = {action.label: action for action in Action}


def _after(execution: Execution, alerts: str) -> str:
    """Left once the execution succeeded."""
    ops = {s.operation for s in execution.steps if s.status == "succeeded"}
    if "return_to_pool" in ops:
        return f"nothing: {execution.node} is back in the spare pool"
    if "send_to_repair" in ops:
        repair = _REPAIR[_ACTION_OF_LABEL.get(alerts, Action.NONE)].format(node=execution.node)
        return f"{repair}, then bring it back with return-to-service"
    return _by_hand(execution, alerts) if alerts else "nothing the alerts ask for"


def _did(execution: Execution) -> str:
    """The steps done, in words: 'drained gpu-7, replaced it with gpu-12, requeued job 4711, ... and sent gpu-7 to
    repair'."""
    done = [s for s in execution.steps if s.status == "succeeded"]
    ops = {s.operation: s.output for s in done}
    phrases = [p for p in (_phrase(s, execution.node, ops) for s in done) if p]
    if len(phrases) < 2:
        return "".join(phrases)
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _phrase(step: Step, node: str, ops: dict[str, dict]) -> str:
    out, summary = step.output, step.output.get("summary", "")
    if summary.startswith("nothing to"):
        return ""
    job = out.get("job", "")
    match step.operation:
        case "drain_node":
            return f"drained {node}"
        case "pick_spare":
            return (
                f"replaced it with {out.get('spare')}" if "requeue_job" in ops else f"picked spare {out.get('spare')}"
            )
        case "requeue_job" | "shrink_job":
            return _requeued(out, job, ops.get("choose_shrink", {}))
        case "wait_job_running":
            return "saw the job running again"
        case "send_to_repair":
            return f"sent {node} to repair"
        case "choose_shrink":
            return ""  # the step after it says what was chosen, by doing it
        case "wait_spare":
            return f"got spare {out.get('spare')} back"
        case "grow_job":
            return f"grew job {job} back to its size"
        case "return_to_pool":
            return f"returned {node} to the spare pool"
        case "health_check":
            return f"passed {summary.split(' passed')[0]}" if summary else f"passed {step.name}"
    return f"finished {step.name}" + (f" ({summary})" if summary else "")  # an operation this module has no words for


def _requeued(out: dict, job: str, choice: dict) -> str:
    if out.get("held"):
        return f"held job {job or 'the job'} for a spare"
    if choice.get("decision") == "replace":
        return f"replaced it with {choice.get('spare')} and requeued job {job}"
    if choice.get("decision") == "shrink":
        nodes = choice.get("nodes", 1)
        return f"shrank job {job} to {nodes - 1} of {nodes} nodes"
    return f"requeued job {job}"
