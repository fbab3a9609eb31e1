"""The node page: GPUs, recent events and daily rollups, the Xid history folded as detection folds it, alerts."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from fleetops.pagecache import page_cached
from incidents.domain.alert_kinds import EVIDENCE_KINDS
from incidents.domain.xid import XidSample, dedupe_xids
from runs import selectors
from runs.models import Node
from runs.retention import rank_hours_own


@login_required
@page_cached
def node_detail(request, hostname):
    node = get_object_or_404(Node.objects.select_related("cluster"), hostname=hostname)
    alerts = list(node.alerts.select_related("incident", "gpu").order_by("status", "-last_seen_at")[:50])
    context = {
        "node": node,
        "gpus": node.gpus.all(),
        "events": selectors.node_recent_events(node=node),
        "rollups": selectors.node_rollups_get(node=node),
        "raw_retention_days": settings.EVENTS_RAW_RETENTION_DAYS,
        "rank_retention_hours": rank_hours_own(),
        **_xid_history(node),
        "alerts": alerts,
        # Statistical evidence against the node: slow ranks, disagreeing gradients, too many interruptions.
        "evidence_alerts": [a for a in alerts if a.kind in EVIDENCE_KINDS],
        "interruptions": node.interruptions.select_related("run").order_by("-fault_at")[:20],
    }
    return render(request, "console/node_detail.html", context)


def _xid_history(node: Node, *, bursts: int = 50) -> dict:
    """The node's Xids newest first, a storm folded into one row with its count (as detection folds it)."""
    events = selectors.node_xid_events(node=node)
    samples = [
        XidSample(time, node.hostname, data["gpu"], data["xid"], data.get("message", ""), data.get("recovery_action"))
        for time, data in events
    ]
    faults = dedupe_xids(samples, window_s=settings.XID_DEDUPE_WINDOW_S)
    return {"xids": sorted(faults, key=lambda f: f.last_at, reverse=True)[:bursts], "xid_events": len(events)}
