"""GPU readings: ECC counters and remapped rows, and health (temperature, throttling, NVLink, recovery
action)."""

import math
from functools import partial

from incidents.domain.alert_kinds import AlertKind
from incidents.domain.detectors.findings import Finding, _num, _plural
from incidents.domain.xid import RECOVERY_ACTIONS, Action, recovery_action_info, recovery_action_label


def _gpu_finding(
    kind: str,
    node: str,
    gpu: int,
    name: str,
    severity: str,
    summary: str,
    explanation: str,
    action: Action,
    **evidence,
) -> Finding:
    """A finding about one GPU, fingerprinted <kind>:<node>:<gpu>:<name> so each condition folds on its own."""
    return Finding(
        kind=kind,
        fingerprint=f"{kind}:{node}:{gpu}:{name}",
        severity=severity,
        summary=f"{node} GPU {gpu}: {summary}",
        explanation=explanation,
        node=node,
        gpu=gpu,
        evidence=evidence,
        action=action,
    )


def gpu_ecc(
    *,
    node: str,
    gpu: int,
    uncorrected_delta: int,
    remapped_rows_failure: bool,
    remapped_rows_pending: bool,
    retired_pages: int,
    retired_pages_threshold: int,
) -> list[Finding]:
    """Memory errors from one ECC reading: double-bit errors, row-remap failure or pending, retired pages.

    uncorrected_delta is the rise of the uncorrected (double-bit) total since the previous reading.
    Retired pages count once they reach retired_pages_threshold (at or over it).
    """
    where = f"{node} GPU {gpu}"
    finding = partial(_gpu_finding, AlertKind.ECC, node, gpu)

    findings = []
    if uncorrected_delta > 0:
        findings.append(
            finding(
                "double_bit",
                "error",
                "double-bit ECC errors",
                f"{where} reported {_plural(uncorrected_delta, 'new uncorrected (double-bit) ECC error')} since "
                "the previous reading; the data in that memory was lost. Reset the GPU.",
                Action.RESET_GPU,
                uncorrected_delta=uncorrected_delta,
            )
        )
    if remapped_rows_failure:
        findings.append(
            finding(
                "remap_failure",
                "critical",
                "row remapping failed",
                f"{where} could not remap a failing memory row (usually no spare rows were left in that bank). "
                "Drain it and send it for RMA.",
                Action.DRAIN_RMA,
                remapped_rows_failure=True,
            )
        )
    if remapped_rows_pending:
        findings.append(
            finding(
                "remap_pending",
                "warning",
                "row remap pending",
                f"{where} has a memory row remap waiting; it takes effect at the next GPU reset. "
                "Reset the GPU at the next opportunity.",
                Action.RESET_GPU,
                remapped_rows_pending=True,
            )
        )
    if retired_pages >= retired_pages_threshold:
        findings.append(
            finding(
                "retired_pages",
                "error",
                "too many retired pages",
                f"{where} has retired {retired_pages} memory pages, at or over the threshold of "
                f"{retired_pages_threshold}. Drain it and send it for RMA.",
                Action.DRAIN_RMA,
                retired_pages=retired_pages,
                threshold=retired_pages_threshold,
            )
        )
    return findings


# Clock event (throttle) reasons that mean the hardware is slowing itself down. The others (idle, application
# clocks, software power cap, sync boost, display clock) are normal operation. Compared without case,
# underscores or spaces, so "HwThermalSlowdown" and "hw_thermal_slowdown" both match.
HARDWARE_THROTTLE_REASONS = frozenset({"hwslowdown", "hwthermalslowdown", "hwpowerbrakeslowdown", "swthermalslowdown"})


def gpu_health(
    *,
    node: str,
    gpu: int,
    recovery_action: int,
    temperature_c: float,
    slowdown_c: float,
    throttle_reasons: list[str],
    nvlink_errors_delta: int,
) -> list[Finding]:
    """Findings from one polled health reading: the driver's recovery action, heat, throttling, NVLink errors.

    recovery_action is NVML field 230 (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset).
    Heat counts at or above slowdown_c; nvlink_errors_delta is the rise of the counter since the last reading.
    """
    where = f"{node} GPU {gpu}"
    finding = partial(_gpu_finding, AlertKind.GPU_HEALTH, node, gpu)

    findings = []
    if recovery_action != 0:
        action = recovery_action_info(recovery_action)
        label = recovery_action_label(recovery_action)
        severity = RECOVERY_ACTIONS[recovery_action][2] if recovery_action in RECOVERY_ACTIONS else "warning"
        findings.append(
            finding(
                "recovery_action",
                severity,
                f"driver recommends {label}",
                f"The driver on {where} set its recovery action (NVML field 230) to {recovery_action}, "
                f"{label}. Recommended: {action.label}.",
                action,
                recovery_action=recovery_action,
            )
        )
    if math.isfinite(temperature_c) and slowdown_c > 0 and temperature_c >= slowdown_c:
        findings.append(
            finding(
                "thermal",
                "warning",
                f"at {_num(temperature_c)} °C",
                f"{where} is at {_num(temperature_c)} °C, at or above its slowdown threshold of "
                f"{_num(slowdown_c)} °C, so its clocks are cut and the whole job waits for it.",
                Action.WATCH,
                temperature_c=_num(temperature_c),
                slowdown_c=_num(slowdown_c),
            )
        )
    hardware = sorted({r for r in throttle_reasons if _reason_key(r) in HARDWARE_THROTTLE_REASONS})
    if hardware:
        findings.append(
            finding(
                "throttle",
                "warning",
                "hardware clock slowdown",
                f"{where} is throttled by {', '.join(hardware)}: the hardware is slowing itself down "
                "(heat, power brake), which makes it a straggler.",
                Action.WATCH,
                throttle_reasons=hardware,
            )
        )
    if nvlink_errors_delta > 0:
        findings.append(
            finding(
                "nvlink",
                "warning",
                "NVLink errors",
                f"{where} counted {_plural(nvlink_errors_delta, 'new NVLink error')} since the previous reading; "
                "errors that keep rising point at a link or cable (an Xid 74 means drain and investigate).",
                Action.WATCH,
                nvlink_errors_delta=nvlink_errors_delta,
            )
        )
    return findings


def _reason_key(reason: str) -> str:
    return "".join(ch for ch in reason.lower() if ch.isalnum())
