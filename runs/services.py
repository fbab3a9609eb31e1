"""Writes to the fleet record. Views, tasks and commands call these; nothing else writes.

The path of an event: `events_ingest` stores validated events (one transaction, all or nothing) and
queues `runs.tasks.apply_events` on commit; the task calls `events_apply`, which claims the events and
folds each into the record. Every applier is safe to run twice and in any order.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from .domain import lifecycle
from .domain.cloudevents import CloudEvent, parse_time
from .models import GPU, Attempt, Checkpoint, Cluster, Event, Interruption, Node, Run

log = logging.getLogger(__name__)

APPLY_CHUNK = 500


@dataclass(frozen=True)
class IngestResult:
    accepted: list[CloudEvent]
    duplicates: list[CloudEvent]
    event_ids: list[int]


def events_ingest(*, events: list[CloudEvent]) -> IngestResult:
    """Store new events durably and queue their application; repeats of stored events are skipped."""
    with transaction.atomic():
        stored = set(Event.objects.filter(event_id__in={e.id for e in events}).values_list("source", "event_id"))
        new = [e for e in events if (e.source, e.id) not in stored]
        duplicates = [e for e in events if (e.source, e.id) in stored]
        rows = [_event_row(e) for e in new]
        try:
            with transaction.atomic():
                created = Event.objects.bulk_create(rows, batch_size=1000)
        except IntegrityError:
            # A concurrent request stored some of these first: fall back to one insert each.
            created = []
            for event, row in zip(new, rows, strict=True):
                try:
                    with transaction.atomic():
                        row.save(force_insert=True)
                    created.append(row)
                except IntegrityError:
                    duplicates.append(event)
            new = [e for e in new if e not in duplicates]
        event_ids = [row.pk for row in created]
        if event_ids:
            from .tasks import apply_events  # tasks import services: import here to keep the arrow one way

            for start in range(0, len(event_ids), APPLY_CHUNK):
                chunk = event_ids[start : start + APPLY_CHUNK]
                transaction.on_commit(lambda chunk=chunk: apply_events.delay(chunk))
    return IngestResult(accepted=new, duplicates=duplicates, event_ids=event_ids)


def _event_row(event: CloudEvent) -> Event:
    data = event.data
    return Event(
        source=event.source,
        event_id=event.id,
        type=event.type,
        subject=event.subject,
        time=event.time,
        data=data,
        run_name=data.get("run", ""),
        node_name=data.get("node", ""),
    )


def events_apply(*, event_ids: list[int]) -> int:
    """Fold stored events into the record; returns how many this call applied.

    Events another worker holds or has applied are skipped. Claim and effects share one transaction,
    so a crash leaves the event unapplied for the sweeper, never half-applied.
    """
    applied = 0
    for start in range(0, len(event_ids), APPLY_CHUNK):
        applied += _apply_chunk(event_ids[start : start + APPLY_CHUNK])
    return applied


def _apply_chunk(event_ids: list[int]) -> int:
    with transaction.atomic():
        events = list(
            Event.objects.select_for_update(skip_locked=True)
            .filter(pk__in=event_ids, applied_at__isnull=True)
            .order_by("time", "id")
        )
        if not events:
            return 0  # another worker got there first
        Event.objects.filter(pk__in=[e.pk for e in events]).update(applied_at=timezone.now())
        _lock_subjects(events)
        lifecycle_runs: set[str] = set()
        for event in events:
            if event.type in lifecycle.LIFECYCLE_TYPES:
                lifecycle_runs.add(event.run_name)
            else:
                APPLIERS[event.type](event)
        for name in sorted(lifecycle_runs):
            run_lifecycle_rebuild(run=_run_locked(name))
    return len(events)


def _lock_subjects(events: list[Event]) -> None:
    """Create and lock every run and node these events touch, runs then nodes, each in name order.

    One global order means two workers can never wait on each other (no deadlock). NO KEY UPDATE
    locks still let other transactions insert rows that point at these (attempts, GPUs).
    """
    runs = sorted({e.run_name for e in events if e.run_name})
    nodes = sorted({e.node_name for e in events if e.node_name} | {h for e in events for h in e.data.get("nodes", [])})
    _create_missing(Run, "name", runs)
    _create_missing(Node, "hostname", nodes)
    list(Run.objects.select_for_update(no_key=True).filter(name__in=runs).order_by("name").values_list("pk"))
    list(Node.objects.select_for_update(no_key=True).filter(hostname__in=nodes).order_by("hostname").values_list("pk"))


def _create_missing(model, field: str, names: list[str]) -> None:
    missing = set(names) - set(model.objects.filter(**{f"{field}__in": names}).values_list(field, flat=True))
    if missing:
        # ignore_conflicts: a concurrent worker may create the same row between the read and the insert.
        model.objects.bulk_create([model(**{field: name}) for name in sorted(missing)], ignore_conflicts=True)


def _run_locked(name: str) -> Run:
    """The run's row; `_lock_subjects` has created and locked it for this transaction."""
    return Run.objects.select_for_update(no_key=True).get(name=name)


def _node(hostname: str, cluster_name: str | None = None) -> Node:
    node, created = Node.objects.get_or_create(hostname=hostname)
    if cluster_name and node.cluster_id is None:
        node.cluster = _cluster(cluster_name)
        node.save(update_fields=["cluster"])
    return node


def _cluster(name: str, scheduler: str | None = None) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(
        name=name, defaults={"scheduler": scheduler or Cluster.Scheduler.SIMULATED}
    )
    return cluster


def _gpu(hostname: str, index: int, uuid: str | None = None) -> GPU:
    gpu, _ = GPU.objects.get_or_create(node=_node(hostname), index=index)
    if uuid and gpu.uuid != uuid:
        gpu.uuid = uuid
        gpu.save(update_fields=["uuid"])
    return gpu


def _newer(field: str, time: datetime) -> Q:
    """Rows whose `field` is older than `time`: a late event never overwrites a newer reading."""
    return Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__lt": time})


# --- Appliers: one per non-lifecycle event type; each commutes with the others and with itself. ---


def _apply_step(event: Event) -> None:
    run, _ = Run.objects.get_or_create(name=event.run_name)
    step = event.data["step"]
    Run.objects.filter(pk=run.pk).filter(
        _newer("last_step_at", event.time) | Q(last_step_at=event.time, last_step__lt=step)
    ).update(last_step=step, last_step_at=event.time)


def _checkpoint(event: Event) -> Checkpoint:
    run, _ = Run.objects.get_or_create(name=event.run_name)
    checkpoint, _ = Checkpoint.objects.get_or_create(run=run, step=event.data["step"])
    return checkpoint


def _apply_checkpoint_started(event: Event) -> None:
    # The latest start wins: a write lost to a fault is taken again at the same step after the restart,
    # and it is the retry whose blocking the completion reports.
    checkpoint = _checkpoint(event)
    Checkpoint.objects.filter(pk=checkpoint.pk).filter(_newer("started_at", event.time)).update(started_at=event.time)


def _apply_checkpoint_completed(event: Event) -> None:
    checkpoint, data = _checkpoint(event), event.data
    durable_at = parse_time(data["durable_at"]) if data.get("durable_at") else None
    if durable_at is None and data["tier"] == "durable":
        durable_at = event.time
    Checkpoint.objects.filter(pk=checkpoint.pk).update(
        status=Checkpoint.Status.COMPLETED,
        completed_at=event.time,
        blocking_s=data["blocking_s"],
        bytes=data["bytes"],
        tier=data["tier"],
        durable_at=durable_at,
        failure_reason="",
    )


def _apply_checkpoint_failed(event: Event) -> None:
    checkpoint = _checkpoint(event)
    # A completion wins over a failure report, whichever arrives first.
    Checkpoint.objects.filter(pk=checkpoint.pk).exclude(status=Checkpoint.Status.COMPLETED).update(
        status=Checkpoint.Status.FAILED, failure_reason=event.data["reason"]
    )


def _apply_heartbeat(event: Event) -> None:
    node = _node(event.node_name, event.data.get("cluster"))
    Node.objects.filter(pk=node.pk).filter(_newer("last_heartbeat_at", event.time)).update(last_heartbeat_at=event.time)


def _apply_node_state(event: Event) -> None:
    node = _node(event.node_name, event.data.get("cluster"))
    Node.objects.filter(pk=node.pk).filter(_newer("state_changed_at", event.time)).update(
        state=event.data["state"], state_reason=event.data["reason"], state_changed_at=event.time
    )


def _apply_xid(event: Event) -> None:
    data = event.data
    gpu = _gpu(event.node_name, data["gpu"], data.get("uuid"))
    # Every Xid counts, storms included; detection (a later issue) dedupes them into faults.
    GPU.objects.filter(pk=gpu.pk).update(xid_count=F("xid_count") + data.get("count", 1))
    GPU.objects.filter(pk=gpu.pk).filter(_newer("last_xid_at", event.time)).update(
        last_xid=data["xid"], last_xid_at=event.time, last_xid_message=data["message"][:1000]
    )


_ECC_FIELDS = (
    "remapped_rows_corrected",
    "remapped_rows_uncorrected",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "retired_pages",
)


def _apply_ecc(event: Event) -> None:
    data = event.data
    gpu = _gpu(event.node_name, data["gpu"])
    values = {"ecc_corrected": data["corrected"], "ecc_uncorrected": data["uncorrected"], "ecc_at": event.time}
    values.update({name: data[name] for name in _ECC_FIELDS if name in data})
    GPU.objects.filter(pk=gpu.pk).filter(_newer("ecc_at", event.time)).update(**values)


def _apply_gpu_health(event: Event) -> None:
    data = event.data
    gpu = _gpu(event.node_name, data["gpu"])
    GPU.objects.filter(pk=gpu.pk).filter(_newer("health_at", event.time)).update(
        temperature_c=data["temperature_c"],
        throttle_reasons=data["throttle_reasons"],
        nvlink_errors=data["nvlink_errors"],
        recovery_action=data["recovery_action"],
        health_at=event.time,
    )


def _apply_node_sample(event: Event) -> None:
    """Rank samples and health checks stay in the event log for detection; the record needs the node."""
    _node(event.node_name)
    if event.run_name:
        Run.objects.get_or_create(name=event.run_name)


APPLIERS = {
    "run.step": _apply_step,
    "checkpoint.started": _apply_checkpoint_started,
    "checkpoint.completed": _apply_checkpoint_completed,
    "checkpoint.failed": _apply_checkpoint_failed,
    "node.heartbeat": _apply_heartbeat,
    "node.state": _apply_node_state,
    "gpu.xid": _apply_xid,
    "gpu.ecc": _apply_ecc,
    "gpu.health": _apply_gpu_health,
    "rank.step_time": _apply_node_sample,
    "rank.grad_norm": _apply_node_sample,
    "healthcheck.result": _apply_node_sample,
}


# --- The run lifecycle: re-derived whole from the run's lifecycle events, then synced row by row. ---


def run_lifecycle_rebuild(*, run: Run) -> None:
    """Bring the run's state, attempts and interruptions in line with all its lifecycle events."""
    rows = Event.objects.filter(run_name=run.name, type__in=lifecycle.LIFECYCLE_TYPES).values_list(
        "time", "type", "data", "source", "event_id"
    )
    derived = lifecycle.derive([lifecycle.LifecycleEvent(*row) for row in rows])
    settings = derived.settings
    run.state, run.started_at, run.ended_at = derived.state, derived.started_at, derived.ended_at
    if "cluster" in settings:
        run.cluster = _cluster(settings["cluster"])
    run.gpu_count = settings.get("gpus", run.gpu_count)
    run.model_params = settings.get("model_params", run.model_params)
    run.checkpoint_interval_s = settings.get("checkpoint_interval_s", run.checkpoint_interval_s)
    run.save()

    hostnames = sorted(
        {h for a in derived.attempts for h in a.nodes} | {i.node for i in derived.interruptions if i.node}
    )
    node_ids = _node_ids(hostnames, run.cluster_id if "cluster" in settings else None)
    attempts = _sync_attempts(run, derived.attempts, node_ids)
    _sync_interruptions(run, derived.interruptions, attempts, node_ids)


def _node_ids(hostnames: list[str], cluster_id: int | None) -> dict[str, int]:
    """hostname -> Node id for every node the run touched, created if new: a few queries, however many nodes."""
    _create_missing(Node, "hostname", hostnames)
    if cluster_id is not None:
        Node.objects.filter(hostname__in=hostnames, cluster__isnull=True).update(cluster_id=cluster_id)
    return dict(Node.objects.filter(hostname__in=hostnames).values_list("hostname", "pk"))


def _gpu_ids(pairs: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """(node id, index) -> GPU id, creating the GPUs not seen yet."""
    if not pairs:
        return {}
    node_ids = {node_id for node_id, _ in pairs}
    existing = {
        (n, i): pk for n, i, pk in GPU.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "pk")
    }
    missing = pairs - set(existing)
    if missing:
        GPU.objects.bulk_create([GPU(node_id=n, index=i) for n, i in sorted(missing)], ignore_conflicts=True)
        existing = {
            (n, i): pk for n, i, pk in GPU.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "pk")
        }
    return existing


def _sync(model, run: Run, wanted: dict[int, dict]) -> dict[int, object]:
    """Make the run's rows of `model` (keyed by number) hold exactly `wanted`; write only what differs."""
    existing = {row.number: row for row in model.objects.filter(run=run)}
    model.objects.filter(run=run, number__in=set(existing) - set(wanted)).delete()
    result = {}
    for number, values in wanted.items():
        row = existing.get(number)
        if row is None:
            row = model.objects.create(run=run, number=number, **values)
        elif any(getattr(row, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(row, name, value)
            row.save()
        result[number] = row
    return result


def _sync_attempts(run: Run, derived: list[lifecycle.Attempt], node_ids: dict[str, int]) -> dict[int, Attempt]:
    wanted = {
        a.number: {
            "job_id": a.job_id,
            "started_at": a.started_at,
            "ended_at": a.ended_at,
            "end_reason": a.end_reason,
            "resumed_from_step": a.resumed_from_step,
        }
        for a in derived
    }
    attempts = _sync(Attempt, run, wanted)
    members = {}
    for attempt_id, node_id in Attempt.nodes.through.objects.filter(attempt__run=run).values_list(
        "attempt_id", "node_id"
    ):
        members.setdefault(attempt_id, set()).add(node_id)
    for a in derived:
        row = attempts[a.number]
        wanted_nodes = {node_ids[h] for h in a.nodes}
        if members.get(row.pk, set()) != wanted_nodes:
            row.nodes.set(wanted_nodes)
    return attempts


def _sync_interruptions(run, derived: list[lifecycle.Interruption], attempts, node_ids) -> None:
    gpu_ids = _gpu_ids({(node_ids[i.node], i.gpu) for i in derived if i.node and i.gpu is not None})
    wanted = {}
    for i in derived:
        node_id = node_ids[i.node] if i.node else None
        attempt = attempts.get(i.attempt_number)
        # Ids, not objects: comparing a row's FK by object would load it, one query per interruption.
        wanted[i.number] = {
            "attempt_id": attempt.pk if attempt else None,
            "fault_at": i.fault_at,
            "detected_at": i.detected_at,
            "running_at": i.running_at,
            "resumed_at": i.resumed_at,
            "resumed_from_step": i.resumed_from_step,
            "cause": i.cause,
            "planned": i.planned,
            "kind": i.kind,
            "reason": i.reason[:1000],
            "node_id": node_id,
            "gpu_id": gpu_ids.get((node_id, i.gpu)) if node_id and i.gpu is not None else None,
            "xid": i.xid,
        }
    _sync(Interruption, run, wanted)


def record_rebuild() -> int:
    """Throw away the derived record and fold every stored event in again; returns events applied.

    Clusters and nodes stay (they carry inventory that events do not: racks, switches, API addresses);
    their derived fields are reset.
    """
    with transaction.atomic():
        Run.objects.all().delete()
        GPU.objects.all().delete()
        Node.objects.update(state="in_service", state_reason="", state_changed_at=None, last_heartbeat_at=None)
        Event.objects.update(applied_at=None, error="")
    ids = list(Event.objects.order_by("time", "id").values_list("id", flat=True))
    return events_apply(event_ids=ids)


def pending_events_apply(*, older_than: timedelta = timedelta(seconds=30)) -> int:
    """Apply events whose task never ran (lost with a broker or a killed worker)."""
    cutoff = timezone.now() - older_than
    ids = list(
        Event.objects.filter(applied_at__isnull=True, received_at__lt=cutoff)
        .order_by("time", "id")
        .values_list("id", flat=True)[:10_000]
    )
    return events_apply(event_ids=ids)
