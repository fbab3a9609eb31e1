"""NVIDIA Xid errors: what each means, how bad it is, what to do, and how storms fold into faults.

docs/DOMAIN.md section 4, following NVIDIA's Xid catalog. Pure: no Django import, standard library only.

A GPU in trouble can log the same Xid hundreds of thousands of times; `dedupe_xids` folds a run of
identical (node, gpu, xid) samples into one `XidFault` that keeps the count, so a storm is one fault
and no repeat is lost. Times are timezone-aware datetimes; windows are seconds.
"""

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from operator import attrgetter

SEVERITIES = ("critical", "error", "warning", "info")  # most severe first


class Action(StrEnum):
    """What to do about a fault. `value` is stored; `label` is what the on-call sees."""

    NONE = "none"
    RESTART_JOB = "restart_job"
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    DRAIN_RMA = "drain_rma"
    DRAIN_INVESTIGATE = "drain_investigate"
    WATCH = "watch"

    @property
    def label(self) -> str:
        return _ACTION_LABELS[self]


_ACTION_LABELS = {
    Action.NONE: "none",
    Action.RESTART_JOB: "restart job",
    Action.RESET_GPU: "reset GPU",
    Action.REBOOT_NODE: "reboot node, drain",
    Action.DRAIN_RMA: "drain and RMA",
    Action.DRAIN_INVESTIGATE: "drain, investigate",
    Action.WATCH: "watch",
}


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    severity: str  # critical, error, warning, info
    action: Action
    note: str = ""  # the catalog's caveat, when the action alone would mislead

    @property
    def recommended(self) -> str:
        """The recommended action as the on-call reads it, e.g. "reboot node, drain" for Xid 79."""
        return self.action.label


_CATALOG = (
    XidInfo(13, "Graphics engine exception (application error)", "error", Action.RESTART_JOB, "no drain"),
    XidInfo(31, "GPU memory page fault (application error)", "error", Action.RESTART_JOB, "no drain"),
    XidInfo(43, "GPU stopped processing", "info", Action.NONE, "ignore unless repeated"),
    XidInfo(45, "Preemptive cleanup, due to previous errors", "info", Action.NONE, "follows another fault"),
    XidInfo(48, "Double-bit ECC error", "error", Action.RESET_GPU, "with Xid 63/64 on the same GPU: drain and reset"),
    XidInfo(62, "Internal micro-controller halt", "error", Action.RESET_GPU),
    XidInfo(63, "ECC page retirement or row remapping recording event", "info", Action.NONE, "the remap worked"),
    XidInfo(64, "ECC page retirement or row remapper recording failure", "critical", Action.DRAIN_RMA, "reset, RMA"),
    XidInfo(74, "NVLink error", "critical", Action.DRAIN_INVESTIGATE),
    XidInfo(79, "GPU has fallen off the bus", "critical", Action.REBOOT_NODE),
    XidInfo(92, "High single-bit ECC error rate", "warning", Action.WATCH),
    XidInfo(94, "Contained ECC error", "error", Action.RESTART_JOB, "only the application that hit it is affected"),
    XidInfo(95, "Uncontained ECC error", "critical", Action.RESET_GPU, "every application on the GPU is affected"),
    XidInfo(109, "Context switch timeout", "error", Action.RESET_GPU),
    XidInfo(119, "GSP RPC timeout", "error", Action.RESET_GPU),
    XidInfo(120, "GSP error", "error", Action.RESET_GPU),
    XidInfo(140, "Unrecovered ECC error", "error", Action.RESET_GPU),
    XidInfo(154, "GPU recovery action changed", "warning", Action.WATCH, "the action comes with the event"),
)
XIDS: dict[int, XidInfo] = {info.code: info for info in _CATALOG}

# NVML field 230 (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): the driver's own recommendation.
RECOVERY_ACTIONS: dict[int, tuple[str, Action, str]] = {
    0: ("none", Action.NONE, "info"),
    1: ("GPU reset", Action.RESET_GPU, "error"),
    2: ("node reboot", Action.REBOOT_NODE, "critical"),
    3: ("drain P2P", Action.DRAIN_INVESTIGATE, "critical"),
    4: ("drain and reset", Action.DRAIN_RMA, "critical"),
}


def recovery_action_info(code: int) -> Action:
    """The Action for a recovery_action value (NVML field 230); an unknown code is only watched."""
    return RECOVERY_ACTIONS[code][1] if code in RECOVERY_ACTIONS else Action.WATCH


def recovery_action_label(code: int) -> str:
    return RECOVERY_ACTIONS[code][0] if code in RECOVERY_ACTIONS else f"unknown recovery action {code}"


def classify(xid: int, *, recovery_action: int | None = None) -> XidInfo:
    """The catalog entry for an Xid. 154 takes its action from recovery_action; unknown codes are watched."""
    if xid == 154:
        base = XIDS[154]
        if recovery_action not in RECOVERY_ACTIONS:
            return base
        label, action, severity = RECOVERY_ACTIONS[recovery_action]
        return XidInfo(154, base.meaning, severity, action, f"recovery action {recovery_action}: {label}")
    if xid in XIDS:
        return XIDS[xid]
    return XidInfo(xid, f"unknown Xid {xid}", "warning", Action.WATCH, "not in the catalog")


_RECOVERY_IN_MESSAGE = re.compile(r"\bto\s+0x([0-9a-f]+)", re.IGNORECASE)


def recovery_action_from_message(message: str) -> int | None:
    """The new recovery action in an Xid 154 line ("... changed from 0x0 (None) to 0x2 (Node Reboot Required)")."""
    found = _RECOVERY_IN_MESSAGE.search(message or "")
    return int(found.group(1), 16) if found else None


@dataclass(frozen=True)
class XidSample:
    """One gpu.xid event. recovery_action is for Xid 154 when the reporter parsed it; else read from message. `count`:
    the occurrences it stands for (an agent folds a storm into one event), a weight, never expanded into samples."""

    time: datetime
    node: str
    gpu: int
    xid: int
    message: str = ""
    recovery_action: int | None = None
    count: int = 1


@dataclass(frozen=True)
class XidFault:
    """Identical samples folded together: count of them, between first_at and last_at."""

    node: str
    gpu: int
    xid: int
    first_at: datetime
    last_at: datetime
    count: int
    info: XidInfo
    message: str = ""  # the first sample's message


_TIME = attrgetter("time")


def dedupe_xids(events: Iterable[XidSample], *, window_s: float) -> list[XidFault]:
    """Fold repeated identical (node, gpu, xid) samples into faults, ordered by first_at.

    A sample joins the open fault of its (node, gpu, xid) when it comes at most window_s seconds after the
    previous sample of that fault (the window slides, so a storm of any length stays one fault); a longer
    gap starts a new fault. Sum of the faults' counts == sum of the samples' counts (each sample its `count`). One
    pass to group, one sort by time per group, one pass to fold: a storm of 100,000 samples takes well under a second.
    For Xid 154 the fault takes the latest recovery action seen: the driver's current recommendation.
    """
    if not window_s >= 0:
        raise ValueError(f"window_s must be >= 0, got {window_s}")
    window = timedelta(seconds=window_s)
    groups: dict[tuple[str, int, int], list[XidSample]] = defaultdict(list)
    for sample in events:
        groups[(sample.node, sample.gpu, sample.xid)].append(sample)
    faults: list[XidFault] = []
    for key, samples in groups.items():
        samples.sort(key=_TIME)
        start = 0
        for i in range(1, len(samples) + 1):
            if i == len(samples) or samples[i].time - samples[i - 1].time > window:
                faults.append(_fault(key, samples[start:i]))
                start = i
    faults.sort(key=attrgetter("first_at", "node", "gpu", "xid"))
    return faults


def _fault(key: tuple[str, int, int], samples: list[XidSample]) -> XidFault:
    node, gpu, xid = key
    recovery = None
    if xid == 154:
        # The latest sample that says which action: the driver's current recommendation.
        recovery = next((r for s in reversed(samples) if (r := _recovery(s)) is not None), None)
    info = classify(xid, recovery_action=recovery)
    count = sum(sample.count for sample in samples)
    return XidFault(node, gpu, xid, samples[0].time, samples[-1].time, count, info, samples[0].message)


def _recovery(sample: XidSample) -> int | None:
    if sample.recovery_action is not None:
        return sample.recovery_action
    return recovery_action_from_message(sample.message)
