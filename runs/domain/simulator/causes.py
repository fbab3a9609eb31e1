"""Causes and their signals: the Xid, ECC and health readings a GPU fault comes with, the reasons a scheduler
gives, and planned maintenance."""

from dataclasses import dataclass

from runs.domain.taxonomy import CAUSES, Cause

_DRAWN_CAUSES = [cause for cause, (_, _, count) in CAUSES.items() if count > 0]


_CAUSE_WEIGHTS = [CAUSES[cause][2] for cause in _DRAWN_CAUSES]


_TOTAL_WEIGHT = sum(_CAUSE_WEIGHTS)


# Noticed by a timeout, not a crash: the job hangs in a collective, or keeps training on wrong numbers.
HANG_CAUSES = (Cause.NCCL_WATCHDOG, Cause.NETWORK_SWITCH_CABLE, Cause.NIC, Cause.SILENT_DATA_CORRUPTION)


# No hardware to blame: the job restarts on the same nodes.
NO_CULPRIT_CAUSES = (Cause.SOFTWARE_BUG, Cause.DEPENDENCY, Cause.NCCL_WATCHDOG)


# NVIDIA's Xid catalog (docs/DOMAIN.md section 4): message and the recovery action NVML reports (field 230).
XID_MESSAGES = {
    48: ("DBE (Double Bit Error) ECC Error", 1),
    62: ("Internal micro-controller halt", 1),
    64: ("ECC page retirement or row remapper recording failure", 4),
    79: ("GPU has fallen off the bus", 2),
    94: ("Contained ECC error", 0),
    95: ("Uncontained ECC error", 1),
    119: ("GSP RPC timeout", 1),
    120: ("GSP error", 1),
}


@dataclass(frozen=True)
class _GpuSignal:
    xids: tuple[int, ...]  # one is drawn; () when the fault raises no Xid
    ecc: bool = False  # an uncorrectable ECC error shows in the running totals
    thermal: bool = False  # the health reading shows thermal slowdown
    health: bool = True  # the agent reads health at the fault


_GPU_SIGNALS = {
    Cause.FAULTY_GPU: _GpuSignal((79,)),
    Cause.GPU_HBM3: _GpuSignal((48, 95, 64), ecc=True),
    Cause.GPU_SRAM: _GpuSignal((94, 95), ecc=True),
    Cause.GPU_SYSTEM_PROCESSOR: _GpuSignal((119, 120, 62)),
    Cause.GPU_THERMAL: _GpuSignal((), thermal=True),
    Cause.SILENT_DATA_CORRUPTION: _GpuSignal((), health=False),  # nothing shows but the loss
}


_REASONS = {
    Cause.SOFTWARE_BUG: "Trainer crashed: unhandled exception in the training loop",
    Cause.DEPENDENCY: "Trainer crashed: incompatible library after an image update",
    Cause.NETWORK_SWITCH_CABLE: "NCCL watchdog: collective operation timeout; InfiniBand link down",
    Cause.HOST_MAINTENANCE: "Host taken down for unplanned maintenance",
    Cause.NIC: "NCCL watchdog: collective operation timeout; NIC reset",
    Cause.NCCL_WATCHDOG: "NCCL watchdog: collective operation timeout",
    Cause.GPU_THERMAL: "GPU thermal slowdown, then shutdown",
    Cause.SILENT_DATA_CORRUPTION: "Loss spike traced to silent data corruption",
    Cause.SSD: "Local SSD I/O errors",
    Cause.POWER_SUPPLY: "Node lost power: power supply failure",
    Cause.SERVER_CHASSIS: "Server chassis fault: node unreachable",
    Cause.IO_EXPANSION_BOARD: "IO expansion board fault: PCIe devices lost",
    Cause.CPU: "Machine check exception on a CPU",
    Cause.SYSTEM_MEMORY: "Uncorrectable host memory error",
}


_MAINTENANCE = (
    "kernel and driver upgrade",
    "firmware update",
    "switch firmware rollout",
    "storage maintenance",
    "training configuration change",
)


def _culprit_share() -> float:
    culprit = sum(CAUSES[c][2] for c in _DRAWN_CAUSES if c not in NO_CULPRIT_CAUSES)
    return culprit / _TOTAL_WEIGHT


def _hang_share() -> float:
    return sum(CAUSES[c][2] for c in HANG_CAUSES) / _TOTAL_WEIGHT
