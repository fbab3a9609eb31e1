"""What Slurm's clients say, read: their errors classified, host lists expanded, node and job states mapped
to FleetOps' words."""

import re
from datetime import UTC, datetime

from incidents.playbooks.clusters.base import (
    ClusterError,
    JobStatus,
    NotFoundError,
    RefusedError,
    TransientError,
)

CHECK_JOB_PREFIX = "fleetops-hc:"


# The clients' messages, matched as substrings (Slurm 22.05 wording).
_TRANSIENT = (
    "Unable to contact slurm controller",
    "connect failure",
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Unexpected message received",  # what `scontrol requeue` says when the controller is unreachable
    "Communication connection failure",
    "Connection refused",
    "Connection timed out",
    "backup controller in standby mode",
    "Resource temporarily unavailable",
    "Transport endpoint is not connected",
)


_NOT_FOUND = (
    "Invalid node name specified",
    "Invalid job id specified",
    "Invalid partition name specified",
    "not found",
)


_JOB_STATES = {
    "PENDING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESV_DEL_HOLD": "pending",
    "CONFIGURING": "running",
    "RUNNING": "running",
    "SUSPENDED": "running",
    "RESIZING": "running",
    "SIGNALING": "running",
    "STAGE_OUT": "running",
    "COMPLETING": "completing",
    "COMPLETED": "completed",
    "CANCELLED": "cancelled",
    # Ended without success: a playbook may requeue these (a node fault ends a job FAILED or NODE_FAIL).
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "TIMEOUT": "failed",
    "PREEMPTED": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "OUT_OF_MEMORY": "failed",
}


_ON_NODE = ("running", "completing")
_ENDED = ("completed", "failed", "cancelled")


def classify(message: str) -> ClusterError:
    """The typed error for a Slurm client's complaint; anything not known to be transient stops the playbook."""
    text = message.strip() or "the Slurm client failed without a message"
    if any(pattern in text for pattern in _TRANSIENT):
        return TransientError(text)
    if any(pattern in text for pattern in _NOT_FOUND):
        return NotFoundError(text)
    return RefusedError(text)


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list ("gpu-[001-003,007],login1") as names, in order."""
    names: list[str] = []
    for item in _split_top_level(hostlist):
        names.extend(_expand_one(item))
    return names


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip() and item.strip() != "(null)"]


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    names = []
    for part in match.group(1).split(","):
        low, _, high = part.partition("-")
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            names.extend(head + str(number).zfill(width) + rest for rest in _expand_one(tail))
    return names


def node_state(base: str, flags: list[str], *, running_jobs: bool, pool: str) -> str:
    """FleetOps' state of a node from sinfo's state ("mixed"), its flags (["DRAIN"]) and its pool."""
    base = base.lower()
    drained = "DRAIN" in flags or "FAIL" in flags
    if pool == "repair":
        return "in_repair"
    if drained:
        return "draining" if running_jobs or base in ("mixed", "allocated", "completing") else "cordoned"
    if base in ("down", "error", "unknown", "future") or "NOT_RESPONDING" in flags:
        return "suspect"
    if pool == "spare":
        return "hot_spare"
    return "in_service"


def job_state(raw: str) -> str:
    return _JOB_STATES.get(raw.upper(), "failed")


def squeue_job(raw: dict) -> JobStatus:
    """A job as `squeue --json` shows it (22.05): flat fields, `exit_code` a wait(2) status, `end_time` in epoch
    seconds (while it runs, when its time limit will end it: only an ended job's is kept)."""
    state = raw["job_state"]
    ended = job_state(state) in _ENDED
    status = int(raw.get("exit_code") or 0)
    return JobStatus(
        job_id=str(raw["job_id"]),
        state=job_state(state),
        raw_state=state,
        nodes=expand_hostlist(raw.get("nodes") or ""),
        restart_count=int(raw.get("restart_cnt") or 0),
        ended_at=_epoch(raw.get("end_time")) if ended else None,
        reason=_end_reason(raw.get("state_reason"), status >> 8, status & 0x7F) if ended else "",
    )


def sacct_job(raw: dict) -> JobStatus | None:
    """A job as `sacct --json` shows it (its dbv0.0.38 schema: `state` {current, reason}, `exit_code` {return_code,
    signal {signal_id}}, `time` {end}; later versions wrap numbers as {"number": n} and states in lists). Accounting
    does not say how often the job was restarted, and lists a requeued job's latest run: restart_count stays 0.
    None when the record says no state (job_state would read that as a failure)."""
    state = raw.get("state") or {}
    current = state.get("current") or ""
    raw_state = str(current[0] if isinstance(current, list) and current else current)
    if not raw_state:
        return None
    exit_code = raw.get("exit_code") or {}
    code, signal = _number(exit_code.get("return_code")), _number((exit_code.get("signal") or {}).get("signal_id"))
    ended = job_state(raw_state) in _ENDED
    return JobStatus(
        job_id=str(raw["job_id"]),
        state=job_state(raw_state),
        raw_state=raw_state,
        nodes=expand_hostlist(raw.get("nodes") or ""),
        ended_at=_epoch((raw.get("time") or {}).get("end")) if ended else None,
        reason=_end_reason(state.get("reason"), code, signal) if ended else "",
    )


def _number(value) -> int:
    """An integer field of Slurm's JSON: plain (22.05) or {"set": true, "number": n} (23.02 on)."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    return int(value or 0)


def _epoch(value) -> datetime | None:
    seconds = _number(value)
    return datetime.fromtimestamp(seconds, UTC) if seconds > 0 else None


def _end_reason(state_reason: str | None, code: int, signal: int) -> str:
    """How Slurm says a job ended, in its own words: "NonZeroExitCode, exit code 3", "TimeLimit, signal 15"."""
    words = [state_reason] if state_reason and state_reason != "None" else []
    if code:
        words.append(f"exit code {code}")
    if signal:
        words.append(f"signal {signal}")
    return ", ".join(words)
