"""Reads for incidents: live impact, lists, response metrics. One module a topic; every public name is here too.

- impact: what an incident costs (GPUs idled, GPU-hours lost, runs affected) from the record, live or as it was.
- board: the incident board, its counts and filters, and the open incidents' figures every page's badge shows.
- timeline: an incident's timeline as shown (alert bursts folded) and its alerts grouped by kind.
- nodes: the nodes of an incident, its playbooks, and the lemon nodes.
- figures: response metrics and the counts /metrics exports.
- preferences: a person's time zone.
"""

from incidents.selectors.board import (
    CLOSED,
    NEEDS_PERSON,
    OTHER_OPEN,
    BoardPage,
    OpenFigures,
    OpenSummary,
    SeverityCount,
    gpus_idle_get,
    incident_board_get,
    incident_counts_get,
    incidents_list,
    needs_a_person,
    nodes_in_open_incidents,
    open_incidents_figures_get,
    open_incidents_get,
    open_incidents_summary,
)
from incidents.selectors.figures import (
    delivery_counts_get,
    playbook_counts_get,
    response_metrics_get,
)
from incidents.selectors.impact import (
    NO_IMPACT,
    Impact,
    cost_per_minute_usd,
    incident_faults_span_get,
    incident_impact,
    incident_impacts_get,
    incidents_burning_get,
)
from incidents.selectors.nodes import (
    AFFECTED_LISTED,
    NODE_CHOICES,
    AffectedNodes,
    ListedNode,
    incident_nodes_get,
    incident_playbooks_get,
    lemon_nodes_get,
    playbook_active_get,
)
from incidents.selectors.preferences import (
    time_zone_get,
    zone_names,
)
from incidents.selectors.timeline import (
    ALERTS_SHOWN,
    BURST,
    AlertBurst,
    AlertGroup,
    incident_alert_groups_get,
    incident_refusals_get,
    incident_timeline_get,
)

__all__ = [
    "AFFECTED_LISTED",
    "ALERTS_SHOWN",
    "AffectedNodes",
    "AlertBurst",
    "AlertGroup",
    "BURST",
    "BoardPage",
    "CLOSED",
    "Impact",
    "ListedNode",
    "NEEDS_PERSON",
    "NODE_CHOICES",
    "NO_IMPACT",
    "OTHER_OPEN",
    "OpenFigures",
    "OpenSummary",
    "SeverityCount",
    "cost_per_minute_usd",
    "delivery_counts_get",
    "gpus_idle_get",
    "incident_alert_groups_get",
    "incident_board_get",
    "incident_counts_get",
    "incident_faults_span_get",
    "incident_impact",
    "incident_impacts_get",
    "incident_nodes_get",
    "incident_playbooks_get",
    "incident_refusals_get",
    "incident_timeline_get",
    "incidents_burning_get",
    "incidents_list",
    "lemon_nodes_get",
    "needs_a_person",
    "nodes_in_open_incidents",
    "open_incidents_figures_get",
    "open_incidents_get",
    "open_incidents_summary",
    "playbook_active_get",
    "playbook_counts_get",
    "response_metrics_get",
    "time_zone_get",
    "zone_names",
]
