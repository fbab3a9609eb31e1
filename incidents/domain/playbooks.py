"""Playbook definitions and the policies around them. Pure: no Django import.

A definition is plain data (it is frozen into each execution as JSON). Each step names an operation the
engine runs (incidents/playbooks/steps.py), the kind of action it is (for the approval policy), its retry budget
and its timeout in seconds. Operations are idempotent: "ensure drained", not "drain".
"""

import math
from dataclasses import dataclass

DRAIN_AND_REPLACE = {
    "name": "drain-and-replace",
    "title": "Drain the bad node and put the run back on a hot spare",
    "steps": [
        {"name": "drain", "operation": "drain_node", "action": "drain", "retries": 3, "timeout_s": 120},
        {"name": "pick spare", "operation": "pick_spare", "action": "read", "retries": 3, "timeout_s": 60},
        {"name": "requeue job", "operation": "requeue_job", "action": "requeue", "retries": 3, "timeout_s": 120},
        {"name": "wait running", "operation": "wait_job_running", "action": "read", "retries": 30, "timeout_s": 600},
        {"name": "send to repair", "operation": "send_to_repair", "action": "repair", "retries": 3, "timeout_s": 120},
    ],
}

RETURN_TO_SERVICE = {
    "name": "return-to-service",
    "title": "Gate a repaired node (DCGM diagnostics, NCCL all-reduce, burn-in) back into the spare pool",
    "steps": [
        {"name": "ready for checks", "operation": "prepare_checks", "action": "repair", "retries": 3, "timeout_s": 120},
        {
            "name": "dcgm diag",
            "operation": "health_check",
            "check": "dcgm_diag_r3",
            "action": "read",
            "retries": 3,
            "timeout_s": 900,
        },
        {
            "name": "nccl all-reduce",
            "operation": "health_check",
            "check": "nccl_allreduce",
            "action": "read",
            "retries": 3,
            "timeout_s": 900,
        },
        {
            "name": "burn-in",
            "operation": "health_check",
            "check": "burn_in",
            "action": "read",
            "retries": 3,
            "timeout_s": 3600,
        },
        {"name": "return to spares", "operation": "return_to_pool", "action": "resume", "retries": 3, "timeout_s": 120},
    ],
}

# When no hot spare is free: go on with the job's other nodes (fewer data-parallel replicas) and grow back onto a spare
# once one passes the gate, or hold the job for the spare, whichever costs fewer node-seconds (advisor.shrink_or_wait)
# unless the person who started it chose. A spare free at the choice makes it a drain-and-replace.
SHRINK_AND_CONTINUE = {
    "name": "shrink-and-continue",
    "title": "Drain the bad node and go on with the job's other nodes until a spare returns, then grow back",
    "steps": [
        {"name": "drain", "operation": "drain_node", "action": "drain", "retries": 3, "timeout_s": 120},
        {"name": "shrink or wait", "operation": "choose_shrink", "action": "read", "retries": 3, "timeout_s": 60},
        {"name": "shrink job", "operation": "shrink_job", "action": "requeue", "retries": 3, "timeout_s": 120},
        {"name": "wait running", "operation": "wait_job_running", "action": "read", "retries": 30, "timeout_s": 600},
        {"name": "send to repair", "operation": "send_to_repair", "action": "repair", "retries": 3, "timeout_s": 120},
        # Polled, not retried: a spare passes the gate in hours or days (the cluster's repair time).
        {"name": "wait for spare", "operation": "wait_spare", "action": "read", "poll_s": 60, "wait_s": 14 * 86400},
        {"name": "grow back", "operation": "grow_job", "action": "requeue", "retries": 3, "timeout_s": 120},
        {
            "name": "wait full size",
            "operation": "wait_job_running",
            "full": True,
            "action": "read",
            "retries": 30,
            "timeout_s": 600,
        },
    ],
}
CHOICES = ("shrink", "wait")  # what a person may choose over the advisor's pricing

PLAYBOOKS = {p["name"]: p for p in (DRAIN_AND_REPLACE, RETURN_TO_SERVICE, SHRINK_AND_CONTINUE)}
# How FleetOps' own drains name themselves to the scheduler (playbooks.steps.reason_of), so detection knows them back.
OWN_REASON_PREFIX = "fleetops "

# Operations that act on the run's scheduler job: a playbook with one of these needs a run, not just a node.
RUN_OPERATIONS = frozenset({"requeue_job", "wait_job_running", "choose_shrink", "shrink_job", "grow_job"})


def needs_run(definition: dict) -> bool:
    return any(step["operation"] in RUN_OPERATIONS for step in definition["steps"])


def with_choice(definition: dict, choice: str) -> dict:
    """The definition with a person's choice ("shrink" or "wait") in its choose step, frozen into the execution."""
    if choice not in CHOICES:
        raise PlaybookError(f"Choose one of {', '.join(CHOICES)}, not {choice!r}.")
    if not any(step["operation"] == "choose_shrink" for step in definition["steps"]):
        raise PlaybookError(f"{definition['name']} has no choice to make: it only replaces.")
    steps = [
        {**step, "choice": choice} if step["operation"] == "choose_shrink" else step for step in definition["steps"]
    ]
    return {**definition, "steps": steps}


# A dry run's statuses read as what the real run would do: its "succeeded" is no success of anything (issue 46).
DRY_RUN_WORDS = {"succeeded": "would succeed", "failed": "would not succeed", "running": "being evaluated"}
DRY_RUN_STEP_WORDS = {"succeeded": "would pass", "failed": "would stop here", "skipped": "not reached"}


def status_words(status: str, *, dry_run: bool = False, step: bool = False) -> str:
    """A playbook's (or, with `step`, a step's) status for reading: waiting_approval -> "waiting for approval"; a dry
    run's in its own words (DRY_RUN_WORDS)."""
    words = (DRY_RUN_STEP_WORDS if step else DRY_RUN_WORDS) if dry_run else {}
    return words.get(status) or ("waiting for approval" if status == "waiting_approval" else status.replace("_", " "))


class StillWaiting(Exception):  # noqa: N818 -- not an error: the step looks again later
    """A polled step found the cluster not yet as it waits for it (no spare back yet): look again in poll_s."""


# Who must approve an action at a severity: "" (automatic), "oncall" or "admin".
DEFAULT_APPROVALS = {
    "drain": {"SEV1": "", "SEV2": "", "SEV3": "", "SEV4": "oncall"},
    "requeue": {"SEV1": "", "SEV2": "", "SEV3": "", "SEV4": "oncall"},
    "repair": {"SEV1": "", "SEV2": "", "SEV3": "", "SEV4": ""},
    "resume": {"SEV1": "oncall", "SEV2": "oncall", "SEV3": "oncall", "SEV4": "oncall"},
    "read": {},
}


def approver_for(*, action: str, severity: str | None, policy: dict | None = None) -> str:
    """The role that must approve this action at this severity; "" when it runs on its own.

    Without an incident (a playbook started by hand) the SEV4 rule applies: the least automatic one.
    """
    rules = (policy or DEFAULT_APPROVALS).get(action, {})
    return rules.get(severity or "SEV4", "")


def breaker_open(*, taken_out: int, fleet: int, max_share: float) -> bool:
    """True when taking one more node out would put more than max_share of the fleet out of service."""
    if fleet <= 0:
        return True
    return (taken_out + 1) / fleet > max_share


def _percent(share: float) -> str:
    """0.5 -> "50%", 0.025 -> "2.5%", 2/3 -> "66.7%": a small cluster's shares are not whole percents."""
    return f"{share * 100:.3g}%"


@dataclass(frozen=True)
class BreakerFigures:
    """What the circuit breaker decides a drain on: nodes out of service now and the scheduler's fleet (counts), the
    caps (a share of the fleet, a node count, drains an hour), and FleetOps' drains in the cluster's last hour."""

    taken_out: int
    fleet: int
    max_share: float
    max_nodes: int
    drains_in_window: int
    max_drains: int

    def numbers(self) -> str:
        """Every figure, in words, whether the breaker opens or not: out now, what the drain itself would make it,
        the drains in the last hour, the caps."""
        after = self.taken_out + 1
        share = f" of {self.fleet} = {_percent(after / self.fleet)}" if self.fleet > 0 else ""
        return (
            f"out of service now: {self.taken_out} of {self.fleet}; with this drain: {after}{share}; "
            f"drains by FleetOps in the last hour: {self.drains_in_window}; "
            f"caps: {_percent(self.max_share)} of the cluster, {self.max_nodes} nodes out, "
            f"{self.max_drains} drains an hour"
        )

    def reason(self) -> str | None:
        """Why one more drain must wait for a human, or None when it may go ahead. Three limits, any of which opens
        the breaker: the share of the cluster out of service, an absolute number of nodes out (a share of a large
        cluster is many nodes), and the drains FleetOps made in the last window (a flood of forged or real failures
        drains at most this many before a person looks). It names the limit the drain itself would cross (0 out of 2
        is under 5%; the drain makes it 1 of 2, 50%), then every figure."""
        after = self.taken_out + 1
        if self.fleet <= 0:
            return f"the scheduler lists no node in this cluster, so no drain is a share of it ({self.numbers()})"
        if breaker_open(taken_out=self.taken_out, fleet=self.fleet, max_share=self.max_share):
            lead = f"the drain would take {after} of {self.fleet} nodes out of service, {_percent(after / self.fleet)}"
            return f"{lead}, over the {_percent(self.max_share)} cap ({self.numbers()})"
        if after > self.max_nodes:
            lead = f"the drain would take {after} nodes out of service"
            return f"{lead}, over the cap of {self.max_nodes} ({self.numbers()})"
        if self.drains_in_window + 1 > self.max_drains:
            lead = f"the drain would be FleetOps' drain number {self.drains_in_window + 1} in the last hour"
            return f"{lead}, over the cap of {self.max_drains} ({self.numbers()})"
        return None


def breaker_reason(**figures) -> str | None:
    """BreakerFigures(**figures).reason(): why one more drain must wait for a human, or None."""
    return BreakerFigures(**figures).reason()


def backoff_s(attempt: int, *, base_s: float = 2.0, cap_s: float = 60.0) -> float:
    """Seconds before retry number `attempt` (1-based): exponential, capped."""
    return min(base_s * 2 ** max(attempt - 1, 0), cap_s)


def spares_needed(
    *, failures_per_hour: float, repair_hours: float, target: float = 0.01, max_spares: int = 1000
) -> int:
    """The smallest hot-spare pool with P(more failures within one repair window than spares) < target.

    Failures in a repair window are Poisson with mean failures_per_hour x repair_hours (docs/DOMAIN.md section 5).
    """
    mean = failures_per_hour * repair_hours
    if mean <= 0:
        return 0
    term = cumulative = math.exp(-mean)
    for spares in range(max_spares + 1):
        if 1 - cumulative < target:
            return spares
        term *= mean / (spares + 1)
        cumulative += term
    return max_spares


class PlaybookError(Exception):
    """What a person asked for cannot be done; the message says why."""
