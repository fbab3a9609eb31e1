"""The run lifecycle: re-derived whole from the run's lifecycle events, then synced row by row."""

from django.db import connection
from django.db.models import Func, JSONField

from runs.domain import lifecycle, quality, trust
from runs.models import Attempt, Event, Interruption, Node, Run
from runs.services.appliers import _cluster, _create_missing, _gpu_ids, _raw


def run_lifecycle_rebuild(*, run: Run) -> None:
    """Bring the run's state, attempts and interruptions in line with all its lifecycle events.

    The events are read without their node lists (2,048 hostnames a start on a big run): an attempt's nodes are read
    from its start event only when that event is new to it, so a rebuild costs the number of events, not of hosts.
    """
    # The applied events only (this chunk's are claimed already): an event still waiting for its own chunk, perhaps a
    # bad one, cannot fail this one. A quarantined event is out of the record until it is replayed.
    lifecycle_events = Event.objects.filter(
        run_name=run.name, type__in=lifecycle.LIFECYCLE_TYPES, applied_at__isnull=False, quarantined_at=None
    )
    rows = lifecycle_events.values_list(
        "pk", "time", "type", _WithoutNodes("data"), "source", "event_id", "token__role"
    )
    pks = {}
    events = []
    members_of = None  # the cluster a scheduler (or FleetOps itself) started the run on: its nodes join it
    for pk, *fields, role in rows:
        event = lifecycle.LifecycleEvent(*fields)
        pks[(event.source, event.id)] = pk
        events.append(event)
        if event.type == "run.started" and role != trust.TRAINER and event.data.get("cluster"):
            members_of = max(members_of or event, event, key=lifecycle.LifecycleEvent.sort_key)
    derived = lifecycle.derive(events)
    settings = derived.settings
    run.state, run.started_at, run.ended_at = derived.state, derived.started_at, derived.ended_at
    if "cluster" in settings:
        run.cluster = _cluster(settings["cluster"])
    claims = [a.gpus for a in derived.attempts if a.gpus is not None]
    run.gpus_claimed = max(claims) if claims else run.gpus_claimed
    run.model_params = settings.get("model_params", run.model_params)
    run.checkpoint_interval_s = settings.get("checkpoint_interval_s", run.checkpoint_interval_s)
    run.save()

    # A node's cluster comes from its scheduler's or agents' word only (docs/EVENTS.md, "Token bounds"): the nodes a
    # training job names stay in no cluster until one of them places them, so no job can claim another cluster's node.
    cluster_id = _cluster(members_of.data["cluster"]).pk if members_of is not None else None
    attempts = _sync_attempts(run, derived.attempts, pks, cluster_id)
    _count_gpus(run)
    node_ids = _node_ids(sorted({i.node for i in derived.interruptions if i.node}), cluster_id)
    _sync_interruptions(run, derived.interruptions, attempts, node_ids)


def _count_gpus(run: Run) -> None:
    """The run's GPUs as counted: the most any run.started claimed (its full size: an attempt on fewer ran shrunk),
    unless more than the nodes of the attempt that claimed it hold (one indexed count, only for a claim above one
    node's worth)."""
    counted = run.gpus_claimed if run.gpus_claimed is not None else run.gpu_count
    if run.gpus_claimed is not None and run.gpus_claimed > quality.MAX_GPUS_PER_NODE:
        counted = quality.gpus_counted(run.gpus_claimed, Attempt.sizing_node_count(run))
    if counted != run.gpu_count:
        run.gpu_count = counted
        Run.objects.filter(pk=run.pk).update(gpu_count=counted)


class _WithoutNodes(Func):
    """A JSON column without its top-level "nodes" key, taken out by the database."""

    output_field = JSONField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="(%(expressions)s - 'nodes')", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="json_remove(%(expressions)s, '$.nodes')", **extra)


def _node_ids(hostnames: list[str], cluster_id: int | None) -> dict[str, int]:
    """hostname -> Node id for every node the run touched, created if new: a few queries, however many nodes."""
    if not hostnames:
        return {}
    _create_missing(Node, "hostname", hostnames)
    if cluster_id is not None:
        Node.objects.filter(hostname__in=hostnames, cluster__isnull=True).update(cluster_id=cluster_id)
    return dict(Node.objects.filter(hostname__in=hostnames).values_list("hostname", "pk"))


def _sync(model, run: Run, wanted: dict[int, dict]) -> tuple[dict[int, object], dict[int, set[str]]]:
    """Make the run's rows of `model` (keyed by number) hold exactly `wanted`; write only what differs.

    Returns the rows by number, and by number the fields that changed (all of them for a row created)."""
    existing = {row.number: row for row in model.objects.filter(run=run)}
    model.objects.filter(run=run, number__in=set(existing) - set(wanted)).delete()
    result, changed = {}, {}
    for number, values in wanted.items():
        row = existing.get(number)
        if row is None:
            row = model.objects.create(run=run, number=number, **values)
            changed[number] = set(values)
        elif differ := {name for name, value in values.items() if getattr(row, name) != value}:
            for name, value in values.items():
                setattr(row, name, value)
            row.save()
            changed[number] = differ
        result[number] = row
    return result, changed


def _sync_attempts(
    run: Run, derived: list[lifecycle.Attempt], pks: dict[tuple[str, str], int], cluster_id: int | None
) -> dict[int, Attempt]:
    """The run's attempts as derived; the nodes of an attempt whose start event changed (or is new) set anew."""
    wanted = {
        a.number: {
            "job_id": a.job_id,
            "started_at": a.started_at,
            "ended_at": a.ended_at,
            "end_reason": a.end_reason,
            "resumed_from_step": a.resumed_from_step,
            "gpus": a.gpus,
            "start_event_id": pks[a.started_by],
        }
        for a in derived
    }
    attempts, changed = _sync(Attempt, run, wanted)
    moved = {attempts[n].pk: wanted[n]["start_event_id"] for n, fields in changed.items() if "start_event_id" in fields}
    if moved:
        members = Attempt.nodes.through
        members.objects.filter(attempt_id__in=moved).delete()
        if connection.vendor == "postgresql":
            _members_insert(moved, cluster_id)
            return attempts
        hosts_of = dict(Event.objects.filter(pk__in=set(moved.values())).values_list("pk", "data__nodes"))
        node_ids = _node_ids(sorted({h for hosts in hosts_of.values() for h in hosts}), cluster_id)
        members.objects.bulk_create(
            [
                members(attempt_id=attempt_id, node_id=node_ids[h])
                for attempt_id, event_pk in moved.items()
                for h in sorted(set(hosts_of[event_pk]))
            ],
            batch_size=10_000,
        )
    return attempts


def _members_insert(moved: dict[int, int], cluster_id: int | None) -> None:
    """PostgreSQL: each moved attempt's nodes, read from its start event's list by the server. At 16,384 nodes an
    attempt, building the rows in Python and sending them back was ~2,000 rows/s (a 14-day 131,072-GPU run holds
    25 million); here the hostnames come out once to create the nodes not seen yet, and the rows never leave the
    server."""
    attempt_ids, event_ids = list(moved), list(moved.values())
    hosts = _raw(
        "SELECT DISTINCT h FROM runs_event, jsonb_array_elements_text(data->'nodes') AS h WHERE id = ANY(%s)",
        [event_ids],
    )
    _node_ids(sorted(h for (h,) in hosts), cluster_id)
    _raw(
        "INSERT INTO runs_attempt_nodes (attempt_id, node_id)"
        " SELECT DISTINCT m.attempt_id, n.id"
        " FROM unnest(%s::bigint[], %s::bigint[]) AS m(attempt_id, event_id)"
        " JOIN runs_event e ON e.id = m.event_id"
        " CROSS JOIN LATERAL jsonb_array_elements_text(e.data->'nodes') AS h(hostname)"
        " JOIN runs_node n ON n.hostname = h.hostname",
        [attempt_ids, event_ids],
    )


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
    _sync(Interruption, run, wanted)  # nothing hangs on which interruptions changed
