"""The demo's cluster: FleetOps' own record plays the scheduler, so `make run` can show a whole playbook.

Nodes and jobs are the Node and Attempt rows of one Cluster (those `manage.py load_demo` made). Every change
is a CloudEvent from the source "fleetops/simulated-cluster", stored and applied through the event intake
(parse_events, events_ingest, events_apply) like any scheduler's, so the record, timelines and audit show
it. How the operations map:
- drain: node.state `draining` when a job runs on the node, `cordoned` otherwise; resume: `in_service`.
- pools are states: spare is `hot_spare`, repair is `in_repair`, main is `in_service`.
- requeue: a `run.started` for the run's next attempt under the same job id (as Slurm keeps its id), with a
  hot spare in place of each node of the attempt that is out of service; each spare gets node.state
  `in_service` and each replaced draining node `cordoned`. A new node count restarts it on its good nodes and
  as many spares as the count needs (none to shrink), its `gpus` its GPUs a node times its nodes.
  restart_count is the number of attempts under that job id, less one.
- health check: a `healthcheck.result` event, failed when a GPU of the node asks for a recovery action or
  has a row-remap failure or pending remap, passed otherwise.
Event times are now (UTC); the record keeps the latest state by event time.
"""

import time
import uuid
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from incidents.playbooks.clusters.base import (
    OUT_OF_SERVICE,
    Census,
    ClusterAdapter,
    HealthCheck,
    JobStatus,
    NodeStatus,
    NotFoundError,
    Outcome,
    RefusedError,
    check_pool,
    check_reason,
    unknown_operation,
)
from runs.domain.cloudevents import SPECVERSION
from runs.models import GPU, Attempt, Cluster, Event, Node
from runs.services import events_apply, own_events_ingest

SOURCE = "fleetops/simulated-cluster"
POOL_STATES = {"main": "in_service", "spare": "hot_spare", "repair": "in_repair"}
_OUT_OF_JOBS = ("cordoned", "draining", "in_repair", "burn_in", "retired")
_RUN_STATES = {
    "pending": "pending",
    "running": "running",
    "restarting": "failed",  # the attempt failed and no new one started: what a requeue is for
    "completed": "completed",
    "cancelled": "cancelled",
}


def pool_of(state: str) -> str:
    return {"hot_spare": "spare", "in_repair": "repair", "burn_in": "repair"}.get(state, "main")


class SimulatedAdapter(ClusterAdapter):
    def __init__(self, cluster: Cluster, *, now=timezone.now):
        self.cluster = cluster
        self.now = now  # a callable, so that tests can freeze the clock

    # -- reads

    def node_status(self, name: str) -> NodeStatus:
        node = self._node(name)
        return NodeStatus(
            name=node.hostname,
            state=node.state,
            raw_state=node.state,
            reason=node.state_reason,
            jobs=self._jobs_on(node),
            pool=pool_of(node.state),
        )

    def census(self) -> Census:
        """The simulated cluster's scheduler is the record itself: its nodes that are not retired."""
        rows = self._nodes().exclude(state="retired").values_list("hostname", "state")
        return Census(
            nodes=frozenset(name for name, _ in rows), out=frozenset(n for n, state in rows if state in OUT_OF_SERVICE)
        )

    def list_spares(self) -> list[NodeStatus]:
        names = self._nodes().filter(state="hot_spare").values_list("hostname", flat=True)
        return [self.node_status(name) for name in names]

    def job_status(self, job_id: str) -> JobStatus:
        attempts = self._attempts(job_id)
        latest = attempts[-1]
        run_state = latest.run.state
        return JobStatus(
            job_id=job_id,
            state=_RUN_STATES.get(run_state, "failed"),
            raw_state=f"run {latest.run.name} {run_state}, attempt {latest.number}",
            nodes=sorted(node.hostname for node in latest.nodes.all()),
            restart_count=len(attempts) - 1,
        )

    def health_check_result(self, name: str, check: str) -> HealthCheck:
        self._node(name)
        event = (
            Event.objects.filter(type="healthcheck.result", node_name=name, data__check=check)
            .order_by("-time", "-id")
            .first()
        )
        if event is None:
            raise NotFoundError(f"no run of health check {check!r} on {name} is recorded")
        return _check_from(event)

    # -- changes

    def ensure_drained(self, name: str, reason: str) -> Outcome:
        reason = check_reason(reason)
        node = self._node(name)
        if node.state in _OUT_OF_JOBS:
            return Outcome(False, f"{name} was already {node.state} ({node.state_reason})", node=self.node_status(name))
        state = "draining" if self._jobs_on(node) else "cordoned"
        self._post([self._node_state(name, state, reason)])
        return Outcome(True, f"{state} {name}: {reason}", node=self.node_status(name))

    def ensure_resumed(self, name: str) -> Outcome:
        node = self._node(name)
        if node.state == "retired":
            raise RefusedError(f"{name} is retired: it does not come back")
        if node.state in ("in_service", "hot_spare"):
            return Outcome(False, f"{name} was already {node.state}", node=self.node_status(name))
        self._post([self._node_state(name, "in_service", "Returned to service by a FleetOps playbook")])
        return Outcome(True, f"returned {name} to service", node=self.node_status(name))

    def ensure_in_pool(self, name: str, pool: str) -> Outcome:
        wanted = POOL_STATES[check_pool(pool)]
        node = self._node(name)
        if node.state == wanted:
            return Outcome(False, f"{name} was already in pool {pool}", node=self.node_status(name))
        self._post([self._node_state(name, wanted, f"Moved to the {pool} pool by a FleetOps playbook")])
        return Outcome(True, f"moved {name} to pool {pool} ({wanted})", node=self.node_status(name))

    def _requeue(self, job: JobStatus, *, exclude: list[str], onto: list[str], nodes: int | None = None) -> str:
        """Each node of the job out of service (or excluded) gives way to a hot spare, `onto` first; with `nodes`,
        the job restarts on that many: its good nodes, then spares for the rest (none when it shrinks)."""
        latest = self._attempts(job.job_id)[-1]
        run = latest.run
        states = dict(self._nodes().filter(hostname__in=[*job.nodes, *onto]).values_list("hostname", "state"))
        bad = [name for name in job.nodes if states.get(name) != "in_service" or name in exclude]
        not_spare = [name for name in onto if states.get(name) != "hot_spare"]
        if not_spare:
            raise RefusedError(
                f"{', '.join(not_spare)} not a hot spare: cannot take the place of a node of {job.job_id}"
            )
        good = [name for name in job.nodes if name not in bad]
        wanted = len(job.nodes) if nodes is None else nodes
        needed = max(wanted - len(good), 0)
        others = self._nodes().filter(state="hot_spare").exclude(hostname__in=onto).order_by("hostname")
        spares = [*onto, *others.values_list("hostname", flat=True)][:needed]
        if len(spares) < needed:
            raise RefusedError(
                f"{len(bad)} node(s) of job {job.job_id} need a replacement, {len(spares)} hot spare(s) left"
                if nodes is None
                else f"job {job.job_id} needs {needed} more node(s) to run on {wanted}, {len(spares)} hot spare(s) left"
            )
        if nodes is None:  # a replacement keeps each node's place in the job
            swap = dict(zip(bad, spares, strict=True))
            placed = [swap.get(name, name) for name in job.nodes]
        else:
            swap = {}
            placed = [*good[:wanted], *spares]
        per_node = max((latest.gpus or run.gpu_count or 1) // max(len(job.nodes), 1), 1)
        replaced = {spare: name for name, spare in swap.items()}
        events = [
            self._node_state(
                spare,
                "in_service",
                f"Joined {run.name}" + (f" in place of {replaced[spare]}" if spare in replaced else ""),
            )
            for spare in spares
        ]
        events += [
            self._node_state(name, "cordoned", f"Left job {job.job_id}; {self._node(name).state_reason}")
            for name in bad
            if states.get(name) == "draining"
        ]
        started = {"run": run.name, "cluster": self.cluster.name, "gpus": per_node * len(placed), "nodes": placed}
        events.append(self._event("run.started", {**started, "job_id": job.job_id}))
        self._post(events)
        if nodes is None:
            change = ", ".join(f"{name} -> {spare}" for name, spare in swap.items()) or "same nodes"
        else:
            change = f"{len(job.nodes)} -> {len(placed)} nodes" + (f", with {', '.join(spares)}" if spares else "")
        return f"restarted job {job.job_id} of {run.name} as attempt {latest.number + 1} ({change})"

    def health_check(self, name: str, check: str) -> HealthCheck:
        self._node(name)
        problems = []
        rows = GPU.objects.filter(node__hostname=name).values_list(
            "index", "recovery_action", "remapped_rows_failure", "remapped_rows_pending"
        )
        for index, action, remap_failure, remap_pending in rows:
            if action:
                problems.append(f"gpu{index}: recovery action {action}")
            if remap_failure:
                problems.append(f"gpu{index}: row remap failure")
            if remap_pending:
                problems.append(f"gpu{index}: row remap pending")
        data = {
            "node": name,
            "check": check,
            "passed": not problems,
            "details": "; ".join(problems) or "all GPUs clean",
        }
        event = self._event("healthcheck.result", data)
        self._post([event])
        return HealthCheck(
            name, check, "passed" if not problems else "failed", ref=event["id"], details=data["details"]
        )

    # -- dry run

    def describe_plan(self, operation: str, **args) -> str:
        name = args.get("name", "NODE")
        if operation == "ensure_drained":
            return f"post node.state {name} -> draining or cordoned (reason {args.get('reason', 'REASON')!r})"
        if operation == "ensure_resumed":
            return f"post node.state {name} -> in_service"
        if operation == "ensure_in_pool":
            pool = args.get("pool", "POOL")
            return f"post node.state {name} -> {POOL_STATES.get(pool, '<unknown pool>')} (pool {pool})"
        if operation == "requeue_job":
            onto = ", ".join(args.get("onto") or []) or "a hot spare"
            job_id = args.get("job_id", "JOB")
            if args.get("nodes") is not None:
                nodes = args["nodes"]
                return f"post run.started for job {job_id}'s next attempt on {nodes} nodes: its good ones, then {onto}"
            return f"post run.started for job {job_id}'s next attempt, {onto} in place of each node out of service"
        if operation in ("node_status", "list_spares", "job_status", "health_check_result"):
            return f"read {operation.replace('_', ' ')} from the FleetOps record of cluster {self.cluster.name}"
        if operation == "health_check":
            return f"post healthcheck.result {args.get('check', 'CHECK')} for {name} from its GPUs' health"
        raise unknown_operation(operation)

    # -- helpers

    def _nodes(self):
        return Node.objects.filter(cluster=self.cluster)

    def _node(self, name: str) -> Node:
        node = self._nodes().filter(hostname=name).first()
        if node is None:
            raise NotFoundError(f"node {name} is not in cluster {self.cluster.name}")
        return node

    def _attempts(self, job_id: str) -> list[Attempt]:
        attempts = list(
            Attempt.objects.filter(run__cluster=self.cluster, job_id=job_id).select_related("run").order_by("number")
        )
        if not attempts:
            raise NotFoundError(f"job {job_id} is not known in cluster {self.cluster.name}")
        return attempts

    def _jobs_on(self, node: Node) -> list[str]:
        return sorted(set(Attempt.objects.filter(nodes=node, ended_at__isnull=True).values_list("job_id", flat=True)))

    def _node_state(self, name: str, state: str, reason: str) -> dict:
        return self._event("node.state", {"node": name, "state": state, "reason": reason, "cluster": self.cluster.name})

    def _event(self, type_: str, data: dict) -> dict:
        at: datetime = self.now()
        return {
            "specversion": SPECVERSION,
            "id": uuid.uuid4().hex,
            "source": SOURCE,
            "type": type_,
            "time": at.isoformat().replace("+00:00", "Z"),
            "data": data,
        }

    def _post(self, raw: list[dict]) -> None:
        # A real scheduler takes time to act; tests slow the simulated one down to widen a race or a kill window.
        time.sleep(getattr(settings, "SIMULATED_CLUSTER_DELAY_S", 0.0))
        try:
            result = own_events_ingest(events=raw)
        except ValueError as exc:
            raise RefusedError(f"the simulated cluster: {exc}") from exc
        # The intake applies on commit (a worker, or in-process without a broker); a scheduler's change is
        # visible to the next read, so apply now too. The later task finds them applied and only detects.
        events_apply(event_ids=result.event_ids)


def _check_from(event: Event) -> HealthCheck:
    data = event.data
    details = data.get("details", "")
    return HealthCheck(
        node=data["node"],
        check=data["check"],
        state="passed" if data["passed"] else "failed",
        ref=event.event_id,
        details=details if isinstance(details, str) else str(details),
    )
