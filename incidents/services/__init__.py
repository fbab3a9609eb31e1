"""Writes to incidents: detector findings become alerts, alerts group into incidents, people act on them. One module a
topic; every public name is here too.

Every change writes a TimelineEntry (append-only), which is both the incident's timeline and the audit log.

- timeline: who acts (Actor), and the timeline entry every change writes (its notifications go with it).
- alerts: detection's findings become alerts, and alerts group into incidents; alerts cleared.
- severity: an incident's severity graded from its impact, and its recommended action, kept up to date.
- mitigation: automation's side: an incident mitigated when its run trains again or its nodes are out of service,
  a human paged when automation stops, a test run discarded.
- actions: people's actions (acknowledge, assign, escalate, resolve, close, reopen, notes) and the quiet incidents
  resolved by themselves.
"""

from incidents.services.actions import (
    incident_acknowledge,
    incident_assign,
    incident_close,
    incident_commander_set,
    incident_escalate,
    incident_note_add,
    incident_reopen,
    incident_resolve,
    incident_severity_set,
    incidents_auto_resolve,
    time_zone_set,
)
from incidents.services.alerts import (
    alerts_resolve,
    finding_record,
    findings_record,
)
from incidents.services.mitigation import (
    BACK_IN_SERVICE,
    OUT_OF_SERVICE,
    incident_mitigate,
    incident_page_human,
    nodes_mitigated,
    run_discard,
    run_mitigated,
)
from incidents.services.severity import (
    incident_refresh,
    incidents_reassess,
)
from incidents.services.timeline import (
    FLEETOPS,
    REFUSAL_REPEAT_S,
    SYSTEM,
    Actor,
    IncidentError,
    action_refused,
    actions_refused,
    timeline_add,
)

__all__ = [
    "Actor",
    "BACK_IN_SERVICE",
    "FLEETOPS",
    "IncidentError",
    "OUT_OF_SERVICE",
    "SYSTEM",
    "REFUSAL_REPEAT_S",
    "action_refused",
    "actions_refused",
    "alerts_resolve",
    "finding_record",
    "findings_record",
    "incident_acknowledge",
    "incident_assign",
    "incident_close",
    "incident_commander_set",
    "incident_escalate",
    "incident_mitigate",
    "incident_note_add",
    "incident_page_human",
    "incident_refresh",
    "incident_reopen",
    "incident_resolve",
    "incident_severity_set",
    "incidents_auto_resolve",
    "incidents_reassess",
    "nodes_mitigated",
    "run_discard",
    "run_mitigated",
    "time_zone_set",
    "timeline_add",
]
