"""Alert kinds: what a finding, and the alert it becomes, is about. One name a kind here; every list of kinds is
built from them, so a kind renamed or added is changed in one place.

Pure: standard library only. A kind is a str (StrEnum): it is stored in Alert.kind and compared with it as the
string it always was."""

from enum import StrEnum


class AlertKind(StrEnum):
    XID = "xid"  # an Xid fault on a GPU (incidents/domain/xid.py)
    ECC = "ecc"  # uncorrectable ECC errors, remapped rows, retired pages
    GPU_HEALTH = "gpu_health"  # temperature, throttling, NVLink, a recovery action
    HANG = "hang"  # the hang watchdog: no step for too long
    RUN_FAILED = "run_failed"  # the scheduler or trainer reported the run stopped
    RUN_SILENT = "run_silent"  # a restarting run that has said nothing for too long
    JOB_UNKNOWN = "job_unknown"  # the record's run is on a job its scheduler no longer knows (the reconciliation)
    HEARTBEAT = "heartbeat"  # a node's agent stopped heartbeating
    NODE_STATE = "node_state"  # the scheduler took a node out
    STRAGGLER = "straggler"  # a rank slower than its peers, consistently
    SDC = "sdc"  # silent data corruption: a rank's gradient norms off its peers'
    LEMON = "lemon"  # a node that keeps failing
    ALERTMANAGER = "alertmanager"  # an alert from Prometheus' Alertmanager
    PAGERDUTY = "pagerduty"  # an incident triggered through the PagerDuty Events API


# The run stopped: its GPUs idle until it trains again.
RUN_STOPS = (AlertKind.RUN_FAILED, AlertKind.HANG)
# A node's own condition: cleared when the node is back in service.
NODE_KINDS = (
    AlertKind.XID,
    AlertKind.ECC,
    AlertKind.GPU_HEALTH,
    AlertKind.NODE_STATE,
    AlertKind.HEARTBEAT,
    AlertKind.STRAGGLER,
    AlertKind.SDC,
)
# Found by statistics over many ranks or nodes: evidence on a node's page and in the weekly report.
EVIDENCE_KINDS = (AlertKind.LEMON, AlertKind.STRAGGLER, AlertKind.SDC)
