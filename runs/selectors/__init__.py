"""Reads of the fleet record for pages and the API, one module a topic; every public name is here too.

- fleet: clusters, racks, nodes and runs as lists and counts.
- events: the event log (accepted, waiting, quarantined), a node's events and rolled-up samples, events' clusters.
- timeline: a run as the goodput engine sees it, and the record-version cache of what is computed from it.
- goodput: a run's and the fleet's goodput breakdown over a window.
- advice: the checkpoint advisor's inputs (delta, M, R), its two-tier plan and scale projection, and the levers.
- checkpoint_io: a run's checkpoint writes measured and the write designs priced for its cluster.
- quality: a run's data-quality findings.
"""

from runs.selectors.advice import (
    SCALE_GPUS,
    AdviceInputs,
    RunLevers,
    advice_at_scale,
    fleet_failure_rate_get,
    run_advice_inputs_get,
    run_levers_get,
    run_mtbf_s,
    run_restart_s_get,
    run_tier_advice_get,
    tier_measure,
)
from runs.selectors.checkpoint_io import (
    CLUSTER_LOAD_WINDOW,
    RunCheckpointIO,
    run_checkpoint_io_get,
)
from runs.selectors.events import (
    DailySamples,
    EventsAccepted,
    EventsUnapplied,
    event_clusters,
    events_accepted_get,
    events_pending_count,
    events_quarantined_count,
    events_unapplied_get,
    node_recent_events,
    node_rollups_get,
    node_xid_events,
    record_clusters,
    sources_owned_elsewhere,
)
from runs.selectors.fleet import (
    ClusterSummary,
    FlaggedNode,
    RackRow,
    attempts_latest,
    interruptions_recent,
    node_grid_get,
    node_states_by_cluster,
    runs_count,
    runs_gpus_capped,
    runs_list,
    suspect_nodes_get,
)
from runs.selectors.goodput import (
    FleetReport,
    GoodputReport,
    fleet_goodput_get,
    run_goodput_get,
    runs_in_window,
)
from runs.selectors.quality import (
    findings_in,
    run_quality_get,
)
from runs.selectors.timeline import (
    RECORD_CACHE_S,
    T,
    run_costs_get,
    run_record_cached,
    run_record_version,
    run_record_versions,
    run_timeline_get,
    run_timelines_get,
    runs_heard_until_get,
)

__all__ = [
    "AdviceInputs",
    "CLUSTER_LOAD_WINDOW",
    "ClusterSummary",
    "DailySamples",
    "EventsAccepted",
    "EventsUnapplied",
    "FlaggedNode",
    "FleetReport",
    "GoodputReport",
    "RECORD_CACHE_S",
    "RackRow",
    "RunCheckpointIO",
    "RunLevers",
    "SCALE_GPUS",
    "T",
    "advice_at_scale",
    "attempts_latest",
    "event_clusters",
    "record_clusters",
    "sources_owned_elsewhere",
    "events_accepted_get",
    "events_pending_count",
    "events_quarantined_count",
    "events_unapplied_get",
    "findings_in",
    "fleet_failure_rate_get",
    "fleet_goodput_get",
    "interruptions_recent",
    "node_grid_get",
    "node_recent_events",
    "node_rollups_get",
    "node_states_by_cluster",
    "node_xid_events",
    "run_advice_inputs_get",
    "run_checkpoint_io_get",
    "run_costs_get",
    "run_goodput_get",
    "run_levers_get",
    "run_mtbf_s",
    "run_quality_get",
    "run_record_cached",
    "run_record_version",
    "run_record_versions",
    "run_restart_s_get",
    "run_tier_advice_get",
    "run_timeline_get",
    "run_timelines_get",
    "runs_count",
    "runs_gpus_capped",
    "runs_heard_until_get",
    "runs_in_window",
    "runs_list",
    "suspect_nodes_get",
    "tier_measure",
]
