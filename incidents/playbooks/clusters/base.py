"""What a playbook asks of a cluster, whatever runs it: one interface, typed errors, plain results.

Pure: no Django import. Every operation that changes the cluster is an "ensure": it looks first, acts only
when the cluster is not yet as asked, and says which of the two happened, so the engine can repeat a step
after a crash or a retry without doing it twice. Errors say what the engine should do next:

- TransientError: the cluster could not answer or asked to wait (controller down, timeout, a disruption
  budget). Retry later with a bound and backoff; nothing was half-done that a retry would break.
- RefusedError: the cluster said no (not requeueable, permission, unknown pool, no spare). Stop and show
  the message to the user; retrying will not change the answer.
- NotFoundError: the node, job or health check does not exist.

Nodes are described in FleetOps' states (runs.domain.cloudevents.NODE_STATES) next to the scheduler's own
words, which are kept in `raw_state` for the user. Pools are FleetOps' names: `main` (takes jobs), `spare`
(hot spares: passed pre-flight, takes no jobs until moved to main) and `repair` (out of the job pool; only
health checks run there). Each adapter maps them onto its scheduler (Slurm partitions, Kubernetes labels).
"""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from runs.domain.cloudevents import NODE_STATES

POOLS = ("main", "spare", "repair")
JOB_STATES = ("pending", "running", "completing", "failed", "completed", "cancelled")
CHECK_STATES = ("pending", "running", "passed", "failed")
OUT_OF_SERVICE = ("cordoned", "draining", "in_repair")  # the states of a node held out of work
# Commands a health check runs on the node, by name; settings.CLUSTER_HEALTH_CHECKS may replace them.
DEFAULT_HEALTH_CHECKS = {
    "nvidia_smi": "nvidia-smi -L",
    "dcgm_diag_r1": "dcgmi diag -r 1",
    "dcgm_diag_r3": "dcgmi diag -r 3",
    "nccl_allreduce": "all_reduce_perf -b 8 -e 4G -f 2 -g 8 -c 1",  # nccl-tests: fails on a bad link or GPU
    "burn_in": "dcgmi diag -r 4",  # the long, stressing diagnostic run
}


class ClusterError(Exception):
    """A cluster operation failed; the subclass says whether to retry, stop, or look elsewhere."""


class TransientError(ClusterError):
    """Retry later: the cluster did not answer in time or asked to wait."""


class RefusedError(ClusterError):
    """Stop and show the user: the cluster refused, and asking again will not change that."""


class NotFoundError(ClusterError):
    """The node, job or health check named does not exist on this cluster."""


@dataclass(frozen=True)
class NodeStatus:
    name: str
    state: str  # one of FleetOps' NODE_STATES
    raw_state: str  # the scheduler's words: "MIXED+DRAIN", "Ready,SchedulingDisabled", "cordoned"
    reason: str = ""  # why it is drained or cordoned, as the scheduler keeps it
    jobs: list[str] = field(default_factory=list)  # ids of the jobs running on it
    pool: str = ""  # main, spare, repair, or the scheduler's own name for a pool FleetOps does not manage

    def __post_init__(self):
        if self.state not in NODE_STATES:
            raise ValueError(f"unknown node state {self.state!r}")


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str  # one of JOB_STATES
    raw_state: str
    nodes: list[str] = field(default_factory=list)
    restart_count: int = 0  # how many times the scheduler has restarted it: the requeue guard
    ended_at: datetime | None = None  # when it ended (UTC), as the scheduler says; None while it runs or unsaid
    reason: str = ""  # the scheduler's words for how it ended: "NonZeroExitCode, exit code 1", "BackoffLimitExceeded"

    def __post_init__(self):
        if self.state not in JOB_STATES:
            raise ValueError(f"unknown job state {self.state!r}")


@dataclass(frozen=True)
class HealthCheck:
    node: str
    check: str
    state: str  # one of CHECK_STATES
    ref: str = ""  # the scheduler's handle on the run: a job id, a pod name, an event id
    details: str = ""

    @property
    def done(self) -> bool:
        return self.state in ("passed", "failed")

    @property
    def passed(self) -> bool:
        return self.state == "passed"


@dataclass(frozen=True)
class Outcome:
    """What an ensure_* or requeue did: `changed` is False when the cluster was already as asked."""

    changed: bool
    summary: str
    node: NodeStatus | None = None
    job: JobStatus | None = None


@dataclass(frozen=True)
class Census:
    """The scheduler's own node list in one read: every node it knows, and those it holds out of work (drained,
    cordoned, in the repair pool). The circuit breaker's fleet and its count of what is out, which no event sent to
    FleetOps can add to or rewrite."""

    nodes: frozenset[str]
    out: frozenset[str]


class ClusterAdapter(ABC):
    """The operations a playbook needs. Names are the scheduler's: hostnames, job ids."""

    @abstractmethod
    def node_status(self, name: str) -> NodeStatus: ...

    @abstractmethod
    def census(self) -> Census:
        """The scheduler's nodes and those it holds out of work, in one read (the circuit breaker's fleet)."""

    def out_of_service(self) -> set[str]:
        """The nodes the scheduler itself holds out of work (drained, cordoned, in the repair pool)."""
        return set(self.census().out)

    @abstractmethod
    def ensure_drained(self, name: str, reason: str) -> Outcome:
        """No new jobs on the node; running ones are left to the scheduler's drain (see each adapter)."""

    @abstractmethod
    def ensure_resumed(self, name: str) -> Outcome:
        """Lift the drain: the node takes work from its pool again."""

    @abstractmethod
    def list_spares(self) -> list[NodeStatus]:
        """The nodes of the spare pool, in any state; a ready one has state hot_spare."""

    @abstractmethod
    def ensure_in_pool(self, name: str, pool: str) -> Outcome: ...

    @abstractmethod
    def job_status(self, job_id: str) -> JobStatus: ...

    def jobs_status(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """The jobs of these ids that the scheduler still knows, by id; one it has forgotten is left out (the
        scheduler reconciliation says so rather than guess how it ended). An adapter that can read every job at once
        does (Slurm: one squeue); this asks job_status once a job."""
        found = {}
        for job_id in dict.fromkeys(job_ids):
            try:
                found[job_id] = self.job_status(job_id)
            except NotFoundError:
                continue
        return found

    def requeue_job(
        self,
        job_id: str,
        *,
        seen_restart_count: int | None = None,
        exclude: Sequence[str] | str = (),
        onto: Sequence[str] | str = (),
        nodes: int | None = None,
    ) -> Outcome:
        """Stop the job and put it back in the queue (or restart it), at most once per restart.

        `seen_restart_count` is the job's restart_count when the caller decided to requeue; a job whose
        count has moved past it has been requeued since (by us, before a crash, or by the scheduler) and is
        left alone. A job waiting to run already needs no requeue, unless it must change size. Finished jobs
        are refused. `exclude`: nodes the job must not run on again (the bad node). `onto`: nodes it should run
        on (hot spares), moved into the main pool first so that the scheduler may place it there. `nodes`: the
        node count it restarts with, fewer to shrink it (the training client learns its new world size from the
        scheduler at the restart) or more to grow it back; None keeps it.
        """
        job = check_requeueable(self.job_status(job_id), nodes=nodes)
        if seen_restart_count is not None and job.restart_count > seen_restart_count:
            return Outcome(False, f"job {job_id} already restarted (restart {job.restart_count})", job=job)
        if job.state == "pending" and nodes is None:
            return Outcome(False, f"job {job_id} is already waiting to run ({job.raw_state})", job=job)
        if job.state == "completing":
            raise TransientError(f"job {job_id} is still ending ({job.raw_state}); retry once it has")
        # One node may come as a plain name: list("gpu-005") would be its letters.
        exclude, onto = ([names] if isinstance(names, str) else list(names) for names in (exclude, onto))
        summary = self._requeue(job, exclude=exclude, onto=onto, nodes=nodes)
        return Outcome(True, summary, job=self.job_status(job_id))

    @abstractmethod
    def _requeue(self, job: JobStatus, *, exclude: list[str], onto: list[str], nodes: int | None = None) -> str:
        """Requeue a running, failed or (to resize it) waiting job on `nodes` nodes (None: as many as it has);
        return what was done, in words. An adapter whose scheduler cannot resize a job refuses a `nodes`."""

    @abstractmethod
    def health_check(self, name: str, check: str) -> HealthCheck:
        """Start `check` on the node, unless a run of it is still pending or running there."""

    @abstractmethod
    def health_check_result(self, name: str, check: str) -> HealthCheck:
        """The latest run of `check` on the node; NotFoundError when none is known."""

    def ensure_ready_for_checks(self, name: str) -> Outcome:
        """Put a repaired node where health checks can run on it but no user job can: the repair pool."""
        return self.ensure_in_pool(name, "repair")

    def plan_ready_for_checks(self, name: str) -> str:
        """The dry-run plan of ensure_ready_for_checks."""
        return self.describe_plan("ensure_in_pool", name=name, pool="repair")

    @abstractmethod
    def describe_plan(self, operation: str, **args) -> str:
        """What `operation` (a method name, PLAN_OPERATIONS) would do, in the scheduler's terms, without doing it.

        A plan names what the operation would read or change, not its result: a dry run reads the cluster (the
        breaker's census, the spare pool, the job) but changes nothing, and describes the changes with this.
        """


def check_requeueable(job: JobStatus, *, nodes: int | None = None) -> JobStatus:
    """The refusals of requeue_job, before it acts (a dry run makes them too): an ended job, no node to run on."""
    if job.state in ("completed", "cancelled"):
        raise RefusedError(f"job {job.job_id} has ended ({job.raw_state}): requeueing it would run it again")
    if nodes is not None and nodes < 1:
        raise RefusedError(f"job {job.job_id} cannot run on {nodes} nodes")
    return job


def check_pool(pool: str) -> str:
    if pool not in POOLS:
        raise RefusedError(f"unknown pool {pool!r}; pools are {', '.join(POOLS)}")
    return pool


def check_reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise RefusedError("a drain needs a reason: it is what the on-call engineer and the record will see")
    return reason.strip()


def check_command(checks: dict[str, str], check: str) -> str:
    if check not in checks:
        raise RefusedError(f"unknown health check {check!r}; known: {', '.join(sorted(checks))}")
    return checks[check]


PLAN_OPERATIONS = (
    "node_status",
    "list_spares",
    "job_status",
    "health_check_result",
    "ensure_drained",
    "ensure_resumed",
    "ensure_in_pool",
    "requeue_job",
    "health_check",
)


def unknown_operation(operation: str) -> ValueError:
    return ValueError(f"no plan for {operation!r}; operations: {', '.join(PLAN_OPERATIONS)}")
