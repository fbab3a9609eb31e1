"""Appliers: one per non-lifecycle event type; each commutes with the others and with itself."""

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

import psycopg
from django.db import connection
from django.db.models import Case, DateTimeField, F, Q, Value, When
from django.db.models.functions import Coalesce, Greatest

from runs.domain.cloudevents import named_subjects, parse_time
from runs.models import GPU, Checkpoint, Cluster, Event, Node, Run


def _raw(statement: str, params: list) -> list[tuple]:
    """One statement through psycopg itself on Django's connection (PostgreSQL): its parameters bound server-side,
    where Django would quote a large JSON array into the statement. The intake's insert and the appliers' bulk
    updates; returns the rows it answers, if any."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def _fold(folded: dict[tuple, Event], event: Event) -> None:
    key = (event.type, *FOLDED[event.type].subject(event))
    kept = folded.get(key)
    if kept is None:
        folded[key] = event
        return
    if event.type == "node.heartbeat" and kept.data.get("cluster"):
        # A node's cluster is set once, from the first heartbeat (in order) that names one: carry it on.
        event.data = dict(event.data, cluster=kept.data["cluster"])
    if _fold_rank(event) > _fold_rank(kept):
        folded[key] = event
    elif event.type == "node.heartbeat" and not kept.data.get("cluster") and event.data.get("cluster"):
        kept.data = dict(kept.data, cluster=event.data["cluster"])


def _fold_rank(event: Event) -> tuple:
    """What makes a reading win: the newer time; for steps at the same time, the higher step."""
    return (event.time, event.data["step"]) if event.type == "run.step" else (event.time,)


def _name_of(value) -> str:
    """The run or node an event names, for the indexed columns and the rows made for it; an older row may hold
    anything there."""
    return value if isinstance(value, str) and len(value) <= 200 else ""


def _subjects(events: Iterable) -> tuple[list[str], list[str]]:
    """The runs and the nodes these events (CloudEvents or stored rows) name, each sorted: read as
    `runs.domain.cloudevents.named_subjects` says, so the intake making them for the events it stores applied,
    `_lock_subjects` for the events it applies and a rebuild for every event make the same rows."""
    runs, nodes = set(), set()
    for event in events:  # rank samples, most of the intake's stream: names checked once a distinct name
        run, node, listed = named_subjects(event.type, event.data)
        runs.add(run if isinstance(run, str) else "")
        nodes.add(node if isinstance(node, str) else "")
        if listed:
            nodes.update(name for name in listed if isinstance(name, str))
    return sorted(filter(_name_of, runs)), sorted(filter(_name_of, nodes))


def _create_missing(model, field: str, names: list[str]) -> None:
    missing = set(names) - set(model.objects.filter(**{f"{field}__in": names}).values_list(field, flat=True))
    if missing:
        # ignore_conflicts: a concurrent worker may create the same row between the read and the insert.
        model.objects.bulk_create([model(**{field: name}) for name in sorted(missing)], ignore_conflicts=True)


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
    # The latest completion of a step wins, whichever arrives last (a step written again after a rewind); at the same
    # time, the larger blocking (a re-report never raises goodput by arriving first).
    newer = _newer("completed_at", event.time) | Q(completed_at=event.time, blocking_s__lt=data["blocking_s"])
    Checkpoint.objects.filter(pk=checkpoint.pk).filter(newer).update(
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


def _apply_heartbeats(events: list[Event]) -> None:
    """The newest heartbeat of each node (one event a node): one UPDATE for all, each node's time moving only
    forward (the greater of the stored time and the event's)."""
    if not events:
        return
    naming: dict[str, list[str]] = {}  # cluster -> the nodes that name it, set where a node has no cluster yet
    for e in events:
        if e.data.get("cluster"):
            naming.setdefault(e.data["cluster"], []).append(e.node_name)
    for cluster_name, hostnames in naming.items():
        unclaimed = Node.objects.filter(hostname__in=hostnames, cluster__isnull=True)
        if unclaimed.exists():  # a cluster is made only for a node it claims, as one at a time did
            unclaimed.update(cluster=_cluster(cluster_name))
    # _lock_subjects created and locked these nodes.
    if connection.vendor == "postgresql":
        # One row a node from a JSON array: a CASE of a branch a node is evaluated per node, quadratic in the chunk
        # (180 ms for the 170 nodes of a chunk at 131,072 GPUs); a row already as new is left unwritten.
        batch = json.dumps([{"h": e.node_name, "w": e.time.isoformat()} for e in events])
        _raw(
            f"""UPDATE {Node._meta.db_table} AS n SET last_heartbeat_at = v.w
            FROM json_to_recordset(%s::json) AS v(h text, w timestamptz)
            WHERE n.hostname = v.h AND (n.last_heartbeat_at IS NULL OR n.last_heartbeat_at < v.w)""",
            [batch],
        )
        return
    sent = Case(*(When(hostname=e.node_name, then=Value(e.time)) for e in events), output_field=DateTimeField())
    Node.objects.filter(hostname__in=[e.node_name for e in events]).update(
        last_heartbeat_at=Greatest(Coalesce(F("last_heartbeat_at"), sent), sent)
    )


def _apply_node_state(event: Event) -> None:
    node = _node(event.node_name, event.data.get("cluster"))
    Node.objects.filter(pk=node.pk).filter(_newer("state_changed_at", event.time)).update(
        state=event.data["state"], state_reason=event.data["reason"], state_changed_at=event.time
    )


@dataclass
class _XidTally:
    """A chunk's Xids on one GPU, in (time, id) order: a storm is thousands of them, and applying them one by one
    would be four queries each. The sum of their counts, the newest (the first of equal times, as "newer" is
    strict) and the last UUID given are what applying them one at a time would leave."""

    newest: Event | None = None
    count: int = 0
    uuid: str | None = None

    def add(self, event: Event) -> None:
        self.count += event.data.get("count", 1)
        self.uuid = event.data.get("uuid") or self.uuid
        if self.newest is None or event.time > self.newest.time:
            self.newest = event


def _apply_xids(tally: _XidTally) -> None:
    event, data = tally.newest, tally.newest.data
    gpu = _gpu(event.node_name, data["gpu"], tally.uuid)
    # Every Xid counts, storms included; detection dedupes them into faults.
    GPU.objects.filter(pk=gpu.pk).update(xid_count=F("xid_count") + tally.count)
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


def _ecc_values(data: dict) -> dict:
    values = {"ecc_corrected": data["corrected"], "ecc_uncorrected": data["uncorrected"]}
    return values | {name: data[name] for name in _ECC_FIELDS if name in data}


def _health_values(data: dict) -> dict:
    fields = ("temperature_c", "throttle_reasons", "nvlink_errors", "recovery_action")
    return {name: data[name] for name in fields}


# The types of the READING route: the field that says how new a GPU's stored reading is (the newer reading wins), and
# the values written.
READINGS = {"gpu.ecc": ("ecc_at", _ecc_values), "gpu.health": ("health_at", _health_values)}


def _apply_readings(events: list[Event]) -> None:
    """A chunk's ECC and health readings (in (time, id) order): only each GPU's newest of each type can change the
    record, since a reading is written only over an older one (ties keep the first, "newer" being strict). The
    chunk's GPUs are looked up and made in two queries; on PostgreSQL each type is then one UPDATE for all its GPUs,
    the newer-only rule in its WHERE; the embedded default updates a GPU at a time. At 131,072 GPUs the agents send
    about 900 readings a second, one query each before (docs/PERFORMANCE.md)."""
    newest: dict[tuple[str, str, int], Event] = {}
    for event in events:
        key = (event.type, event.node_name, event.data["gpu"])
        if key not in newest or event.time > newest[key].time:
            newest[key] = event
    if not newest:
        return
    # `_lock_subjects` has made the nodes.
    nodes = dict(Node.objects.filter(hostname__in={n for _t, n, _i in newest}).values_list("hostname", "pk"))
    gpus = _gpu_ids({(nodes[node], index) for _type, node, index in newest})
    for type_, (field_at, values) in READINGS.items():
        rows = [
            (gpus[nodes[node], index], event.time, values(event.data))
            for (kind, node, index), event in newest.items()
            if kind == type_
        ]
        if rows:
            _readings_update(field_at, rows)


def _readings_update(field_at: str, rows: list[tuple[int, datetime, dict]]) -> None:
    """Write each (GPU id, reading time, values) where the stored reading is older (or none)."""
    if connection.vendor != "postgresql":
        for pk, at, values in rows:
            GPU.objects.filter(pk=pk).filter(_newer(field_at, at)).update(**values, **{field_at: at})
        return
    # Optional fields (an agent that cannot read remapped rows sends none) keep the stored value when absent.
    columns = sorted({name for _pk, _at, values in rows for name in values})
    sets = [f"{c} = COALESCE(v.{c}, g.{c})" if c in _ECC_FIELDS else f"{c} = v.{c}" for c in columns]
    types = [f"{c} {GPU._meta.get_field(c).db_type(connection)}" for c in (*columns, field_at)]
    batch = json.dumps(
        [{"id": pk, field_at: at, **values} for pk, at, values in rows], default=datetime.isoformat, allow_nan=False
    )
    statement = f"""
        UPDATE {GPU._meta.db_table} AS g SET {", ".join(sets)}, {field_at} = v.{field_at}
        FROM json_to_recordset(%s::json) AS v(id bigint, {", ".join(types)})
        WHERE g.id = v.id AND (g.{field_at} IS NULL OR g.{field_at} < v.{field_at})
    """
    _raw(statement, [batch])


def _apply_logged(event: Event) -> None:
    """Health checks and the training loop's heartbeats stay in the event log for the detectors and the hang watchdog;
    the record needs only their run and node, which `_lock_subjects` has created for the chunk. No query here."""


def _apply_steps(events: list[Event]) -> None:
    for event in events:
        _apply_step(event)


# The types of runs.domain.routes' APPLIER route, one event at a time.
APPLIERS = {
    "run.heartbeat": _apply_logged,
    "checkpoint.started": _apply_checkpoint_started,
    "checkpoint.completed": _apply_checkpoint_completed,
    "checkpoint.failed": _apply_checkpoint_failed,
    "node.state": _apply_node_state,
    "healthcheck.result": _apply_logged,
}


@dataclass(frozen=True)
class Fold:
    subject: Callable[[Event], tuple]  # the run or node one write stands for
    write: Callable[[list[Event]], None]  # writes a chunk's newest event of each subject


# The types of the FOLDED route. Readings where only the newest counts: of a chunk's events of one subject, only the
# newest can change the record (each applier writes "if newer than what is stored"), so one write per run or node
# stands for all of them. On a run's stream these are most events (a step a minute, a heartbeat per node): one query
# per subject, not two per event. Ties keep the first in (time, id) order, as applying them one by one would ("newer"
# is strict). Written in this order, steps then heartbeats.
FOLDED = {
    "run.step": Fold(lambda e: (e.run_name,), _apply_steps),
    "node.heartbeat": Fold(lambda e: (e.node_name,), _apply_heartbeats),
}


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
