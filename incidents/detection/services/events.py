"""Event-driven detection: each applied batch's events become findings, then alerts; alerts cleared by the
events that end their condition."""

import json
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from incidents import services
from incidents.domain import detectors
from incidents.domain.alert_kinds import NODE_KINDS, RUN_STOPS, AlertKind
from incidents.domain.detectors import Finding
from incidents.domain.playbooks import OWN_REASON_PREFIX
from incidents.domain.xid import Action, XidSample, classify, dedupe_xids
from incidents.models import Alert, PlaybookExecution
from runs.domain.cloudevents import parse_time
from runs.models import Event, Node, Run
from runs.selectors import runs_heard_until_get

WATCHDOG = "fleetops/watchdog"


DETECTOR = "fleetops/detector"


_TAKEN_OUT = ("draining", "cordoned")


_BACK = ("in_service", "hot_spare")


CHUNK = 500


def events_detect(*, event_ids: list[int]) -> int:
    """Run the event-driven detectors over applied events; returns the findings recorded.

    Each event is claimed (detected_at) in the same transaction as what it causes, so a task run twice, or
    by two workers, counts every event once. A row another transaction holds is waited for, not skipped: the second
    of two detections finds it claimed once the first commits, and an applier's scan may hold a row it found applied
    until its own chunk commits (tests/incidents/detection/test_claims.py); a skipped event would wait for the
    sweeper. Every detection locks its chunk in the same (time, id) order, so two never deadlock on events.
    """
    recorded = 0
    for start in range(0, len(event_ids), CHUNK):
        with transaction.atomic():
            events = list(
                Event.objects.select_for_update()
                .filter(pk__in=event_ids[start : start + CHUNK], applied_at__isnull=False, detected_at__isnull=True)
                .exclude(quarantined_at__isnull=False)  # out of the record until replayed: nothing to detect on
                .order_by("time", "id")
            )
            Event.objects.filter(pk__in=[e.pk for e in events]).update(detected_at=timezone.now())
            recorded += _detect(events)
    return recorded


def pending_detect(*, older_than: timedelta = timedelta(seconds=30)) -> int:
    """Detect on applied events whose detection task never ran."""
    cutoff = timezone.now() - older_than
    ids = list(
        Event.objects.filter(applied_at__lt=cutoff, detected_at__isnull=True, quarantined_at=None)
        .order_by("time", "id")
        .values_list("id", flat=True)[:10_000]
    )
    return events_detect(event_ids=ids)


def _detect(events: list[Event]) -> int:
    recorded = 0
    previous = _previous_readings([event for event in events if event.type in ("gpu.ecc", "gpu.health")])
    samples: list[XidSample] = []
    heard: dict[str, datetime] = {}  # hostname -> its first heartbeat in these events
    runs_heard: dict[str, datetime] = {}  # run name -> its latest event in these events
    for event in events:
        data = event.data
        if event.run_name:
            runs_heard[event.run_name] = event.time  # in time order: the latest stays
        if event.type == "gpu.xid":
            # A storm of identical Xids on one GPU is one fault: counted into one alert, not one alert each.
            # An agent may have folded a storm into one event: its count is a weight, never expanded into samples.
            samples.append(
                XidSample(
                    event.time, event.node_name, data["gpu"], data["xid"], data["message"], count=data.get("count", 1)
                )
            )
        elif event.type == "run.failed" and not data.get("planned"):
            # A planned stop is no incident: the run's record counts its cost, nobody has to answer it.
            recorded += _record(_run_failed(event), event.time, action=_failure_action(data))
        elif event.type == "run.restored":
            _run_restored(event)
        elif event.type in ("run.completed", "run.cancelled"):
            _run_ended(event)
        elif event.type == "node.state":
            if event.node_name in heard:  # a heartbeat came first: it clears the node's alert, as it did in turn
                _heartbeats_back({event.node_name: heard.pop(event.node_name)})
            if any(sample.node == event.node_name for sample in samples):
                # The node's Xids came first: alerted before its state moves (a batch of a replay holds the storm,
                # the repair and the return), as the live stream, one event at a time, would have.
                recorded += _xids_record(samples)
                samples = []
            recorded += _node_state(event)
        elif event.type == "node.heartbeat":
            heard.setdefault(event.node_name, event.time)  # events come in time order: the first is the earliest
        elif event.type == "gpu.ecc":
            recorded += sum(_record(f, event.time) for f in _ecc(event, previous[event.pk]))
        elif event.type == "gpu.health":
            recorded += sum(_record(f, event.time) for f in _gpu_health(event, previous[event.pk]))
    _heartbeats_back(heard)
    _runs_heard(runs_heard)
    return recorded + _xids_record(samples)


def _xids_record(samples: list[XidSample]) -> int:
    faults = dedupe_xids(samples, window_s=settings.XID_DEDUPE_WINDOW_S)
    first_at = {}
    for fault in faults:
        key = f"xid:{fault.node}:{fault.gpu}:{fault.xid}"
        first_at[key] = min(first_at.get(key, fault.first_at), fault.first_at)
    recorded = 0
    for finding in detectors.xids(faults):
        if finding.action != Action.NONE:  # informational Xids are counted on the GPU, not alerted
            recorded += _record(finding, first_at[finding.fingerprint], count=finding.count)
    return recorded


def _heartbeats_back(heard: dict[str, datetime]) -> None:
    """Clear the lost-heartbeat alerts of nodes heard from again, each at its first heartbeat here.

    A chunk carries a heartbeat of most nodes (2,048 on a big fleet) and almost none has such an alert: one query
    finds the few, instead of two queries a heartbeat. Only the periodic watcher raises these alerts, never the
    events of this chunk, and the one other thing in a chunk that clears them, a node.state saying the node is
    back, first clears its node's heartbeats seen before it: so looking once sees what looking at each heartbeat
    in turn would.
    """
    if not heard:
        return
    silent = Alert.objects.filter(status="firing", kind=AlertKind.HEARTBEAT, node__hostname__in=heard)
    for node in {alert.node for alert in silent.select_related("node")}:
        back = heard[node.hostname]
        services.alerts_resolve(at=back, reason="heartbeat back", node=node, kinds=(AlertKind.HEARTBEAT,))


# Faults whose remedy takes the node out: FleetOps starts drain-and-replace for them (approval policy permitting).
_STABILIZE = (Action.REBOOT_NODE.label, Action.DRAIN_RMA.label)


def _record(finding: Finding | None, at: datetime, *, count: int = 1, action: str = "") -> int:
    if finding is None:
        return 0
    action = action or (finding.recommended_action if finding.action != Action.NONE else "")
    alert = services.finding_record(finding=finding, at=at, count=count, recommended_action=action)
    if action in _STABILIZE and settings.PLAYBOOK_AUTO_START:
        _stabilize(alert)
    return 1


def _stabilize(alert) -> None:
    """Stabilize before diagnosing: take the bad node out of the running job and put the job on a spare."""
    incident = alert.incident
    if alert.node is None or incident.run is None or not incident.is_open:
        return
    if alert.first_seen_at < timezone.now() - timedelta(seconds=settings.PLAYBOOK_AUTO_START_MAX_AGE_S):
        return  # a fault from the past (a backfill, the demo's history) is not drained now
    tried = incident.playbooks.filter(
        playbook="drain-and-replace", node=alert.node, started_by=services.SYSTEM, dry_run=False
    )
    if tried.exists():
        # FleetOps tried this node once for this incident (its Xid, then the scheduler's report of the same fault):
        # running or done, or failed and a person paged, who decides now; a second try would page them again.
        return
    from incidents.playbooks.engine import playbook_start  # the engine imports the cluster adapters: only when needed

    playbook_start(
        playbook="drain-and-replace", actor=services.FLEETOPS, node=alert.node, run=incident.run, incident=incident
    )


def _run_failed(event: Event) -> Finding:
    data = event.data
    kind = data.get("kind", "crash")
    where = (
        f" on {data['node']}" + (f" gpu{data['gpu']}" if data.get("gpu") is not None else "")
        if data.get("node")
        else ""
    )
    return Finding(
        kind=AlertKind.HANG if kind == "hang" else AlertKind.RUN_FAILED,
        fingerprint=f"{'hang' if kind == 'hang' else 'run_failed'}:{event.run_name}:{event.time.isoformat()}",
        severity="critical",
        summary=f"Run {event.run_name} {'hung' if kind == 'hang' else 'stopped'}{where}: {data['reason'][:200]}",
        explanation=f"The {'watchdog' if kind == 'hang' else 'scheduler or trainer'} reported the run stopped at "
        f"{event.time:%Y-%m-%d %H:%M:%S} UTC"
        + (f" with Xid {data['xid']}" if data.get("xid") is not None else "")
        + ".",
        node=data.get("node"),
        gpu=data.get("gpu"),
        run=event.run_name,
        evidence={k: v for k, v in data.items() if k in ("reason", "xid", "category", "kind", "detected_at")},
        detected_at=parse_time(data["detected_at"]) if data.get("detected_at") else event.time,
    )


def _failure_action(data: dict) -> str:
    if data.get("xid") is not None:
        return classify(data["xid"]).action.label
    return Action.RESTART_JOB.label


def _run_restored(event: Event) -> None:
    run = Run.objects.filter(name=event.run_name).first()
    if run is None:
        return
    text = f"Run {run.name} trains again from step {event.data['from_step']:,}"
    services.run_mitigated(run=run, at=event.time, text=text)
    services.alerts_resolve(at=event.time, reason="the run trains again", run=run, kinds=RUN_STOPS)


def _run_ended(event: Event) -> None:
    """A run that ended loses nothing more: its open incident is mitigated (resolving it stays a person's call)."""
    run = Run.objects.filter(name=event.run_name).first()
    if run is None:
        return
    how = "completed" if event.type == "run.completed" else "was cancelled"
    services.run_mitigated(run=run, at=event.time, text=f"Run {run.name} {how}: nothing more is lost")
    services.alerts_resolve(at=event.time, reason=f"the run {how}", run=run, kinds=RUN_STOPS)


def _node_state(event: Event) -> int:
    state, node = event.data["state"], Node.objects.filter(hostname=event.node_name).first()
    if node is not None and state in _BACK:
        services.alerts_resolve(
            at=event.time, reason=f"node back {state.replace('_', ' ')}", node=node, kinds=NODE_KINDS
        )
        services.nodes_mitigated(node=node, at=event.time, state=state)
        return 0
    if event.source in (WATCHDOG, DETECTOR):
        return 0  # our own flag, already explained by the alert that raised it
    if _drained_by_a_playbook(node, event):
        services.nodes_mitigated(node=node, at=event.time, state=state)
        return 0
    recorded = _record(detectors.node_state(node=event.node_name, state=state, reason=event.data["reason"]), event.time)
    if node is not None:
        services.nodes_mitigated(node=node, at=event.time, state=state)
    return recorded


def _drained_by_a_playbook(node: Node | None, event: Event) -> bool:
    """FleetOps' own drain, as the scheduler (or the simulated cluster) reports it back: the reason its playbook gave
    (playbooks.steps.reason_of), on a node a FleetOps playbook was at work on then. Its timeline says so already; an
    alert "node drained by the scheduler" would page the on-call with FleetOps' own step as news."""
    if node is None or not event.data["reason"].startswith(OWN_REASON_PREFIX):
        return False
    slack = timedelta(minutes=5)  # the scheduler's clock against FleetOps'
    return (
        PlaybookExecution.objects.filter(node=node, dry_run=False, started_at__lte=event.time + slack)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=event.time - slack))
        .exists()
    )


def _previous_readings(events: list[Event]) -> dict[int, dict | None]:
    """Each reading's previous reading of the same GPU and type in the log (by time), for counters that only grow:
    event id -> its data, or None. On PostgreSQL one query for all (a lateral lookup per reading on the node's index);
    the embedded default asks once a reading."""
    if not events:
        return {}
    if connection.vendor != "postgresql":
        return {event.pk: _previous(event) for event in events}
    previous = {}
    for type_ in ("gpu.ecc", "gpu.health"):
        readings = [
            {"k": e.pk, "n": e.node_name, "g": e.data["gpu"], "w": e.time.isoformat()}
            for e in events
            if e.type == type_
        ]
        if not readings:
            continue
        batch = json.dumps(readings)
        # The type a literal, so that the planner may use the partial index of that type's events on (node, time).
        statement = f"""
            SELECT v.k, p.data FROM json_to_recordset(%s::json) AS v(k bigint, n text, g int, w timestamptz)
            LEFT JOIN LATERAL (
                SELECT e.data FROM {Event._meta.db_table} e
                WHERE e.node_name = v.n AND e.type = '{type_}' AND e.time < v.w AND e.data -> 'gpu' = to_jsonb(v.g)
                ORDER BY e.time DESC LIMIT 1
            ) p ON true
        """
        with connection.cursor() as cursor:
            cursor.execute(statement, [batch])
            previous |= {pk: json.loads(data) if isinstance(data, str) else data for pk, data in cursor.fetchall()}
    return previous


def _previous(event: Event) -> dict | None:
    """The same GPU's previous reading of this type."""
    earlier = (
        Event.objects.filter(node_name=event.node_name, type=event.type, time__lt=event.time)
        .filter(data__gpu=event.data["gpu"])
        .order_by("-time")
        .values_list("data", flat=True)
        .first()
    )
    return earlier


def _ecc(event: Event, previous: dict | None) -> list[Finding]:
    data, before = event.data, previous or {}
    return detectors.gpu_ecc(
        node=event.node_name,
        gpu=data["gpu"],
        uncorrected_delta=data["uncorrected"] - before.get("uncorrected", 0),
        remapped_rows_failure=data.get("remapped_rows_failure", False),
        remapped_rows_pending=data.get("remapped_rows_pending", False),
        retired_pages=data.get("retired_pages", 0),
        retired_pages_threshold=settings.RETIRED_PAGES_THRESHOLD,
    )


def _gpu_health(event: Event, previous: dict | None) -> list[Finding]:
    data, before = event.data, previous or {}
    return detectors.gpu_health(
        node=event.node_name,
        gpu=data["gpu"],
        recovery_action=data["recovery_action"],
        temperature_c=data["temperature_c"],
        slowdown_c=settings.GPU_SLOWDOWN_C,
        throttle_reasons=data["throttle_reasons"],
        nvlink_errors_delta=max(data["nvlink_errors"] - before.get("nvlink_errors", data["nvlink_errors"]), 0),
    )


def _runs_heard(heard: dict[str, datetime]) -> None:
    """Runs heard from again: their silence alerts clear, at the latest of their events here. A late event from
    before the silence (its record still ends where the alert began) clears nothing."""
    if not heard:
        return
    silent = Alert.objects.filter(status="firing", kind=AlertKind.RUN_SILENT, run__name__in=heard).select_related("run")
    for alert in silent:
        heard_until = runs_heard_until_get(runs=[alert.run]).get(alert.run.pk)
        if heard_until is not None and heard_until <= alert.first_seen_at:
            continue
        services.alerts_resolve(
            at=max(heard[alert.run.name], alert.first_seen_at),  # a late event cannot clear it before it was raised
            reason="the run was heard from again",
            fingerprint=alert.fingerprint,
        )
