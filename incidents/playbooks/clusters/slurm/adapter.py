"""The Slurm adapter: reads through `sinfo --json` and `squeue --json`, acts through `scontrol` and `sbatch`."""

import json
import os
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

from incidents.playbooks.clusters.base import (
    DEFAULT_HEALTH_CHECKS,
    OUT_OF_SERVICE,
    Census,
    ClusterAdapter,
    HealthCheck,
    JobStatus,
    NodeStatus,
    NotFoundError,
    Outcome,
    RefusedError,
    TransientError,
    check_command,
    check_pool,
    check_reason,
    unknown_operation,
)
from incidents.playbooks.clusters.slurm.parse import (
    _ON_NODE,
    CHECK_JOB_PREFIX,
    classify,
    expand_hostlist,
    job_state,
    node_state,
    sacct_job,
    squeue_job,
)


def _shell(args: list[str]) -> str:
    """A command line as a person would type it: `reason='xid 79'` rather than `'reason=xid 79'`."""
    words = []
    for arg in args:
        key, equals, value = arg.partition("=")
        words.append(f"{key}={shlex.quote(value)}" if equals and " " not in key else shlex.quote(arg))
    return " ".join(words)


@dataclass(frozen=True)
class SlurmConfig:
    slurm_conf: str | None = None  # the clients' SLURM_CONF; None: theirs (/etc/slurm/slurm.conf)
    partitions: dict[str, str] = field(default_factory=lambda: {"main": "gpu", "spare": "spare", "repair": "repair"})
    health_checks: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_HEALTH_CHECKS))
    timeout_s: float = 30.0  # per client call; a call that takes longer is a transient failure
    check_time_limit_min: int = 30


@dataclass(frozen=True)
class _Node:
    name: str
    base: str
    flags: list[str]
    reason: str
    partitions: list[str]


class SlurmAdapter(ClusterAdapter):
    def __init__(self, config: SlurmConfig):
        self.config = config
        self._env = {**os.environ, **({"SLURM_CONF": config.slurm_conf} if config.slurm_conf else {})}

    # -- reads

    def node_status(self, name: str) -> NodeStatus:
        node = self._node(name)
        return self._status(node, self._jobs())

    def census(self) -> Census:
        nodes = self._nodes()
        return Census(
            nodes=frozenset(node.name for node in nodes),
            out=frozenset(
                node.name
                for node in nodes
                if node_state(node.base, node.flags, running_jobs=False, pool=self._pool(node)) in OUT_OF_SERVICE
            ),
        )

    def list_spares(self) -> list[NodeStatus]:
        spare = self.config.partitions["spare"]
        nodes = [node for node in self._nodes() if spare in node.partitions]
        jobs = self._jobs() if nodes else []
        return [self._status(node, jobs) for node in nodes]

    def job_status(self, job_id: str) -> JobStatus:
        return squeue_job(self._job(job_id))

    def jobs_status(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """One `squeue --json` for all of them; those it no longer shows (ended longer ago than MinJobAge) from one
        `sacct --json`, where accounting answers. A cluster without accounting (slurmdbd) leaves them out."""
        wanted = list(dict.fromkeys(str(job_id) for job_id in job_ids))
        shown = {str(job["job_id"]): job for job in self._jobs()} if wanted else {}
        found = {job_id: squeue_job(shown[job_id]) for job_id in wanted if job_id in shown}
        forgotten = [job_id for job_id in wanted if job_id not in found]
        if forgotten:
            try:
                rows = self._read_json(["sacct", "--json", "-j", ",".join(forgotten)], "jobs")
            except (RefusedError, NotFoundError):  # "Slurm accounting storage is disabled", no sacct installed
                rows = []
            for job in filter(None, map(sacct_job, rows)):
                if job.job_id in forgotten:
                    found[job.job_id] = job
        return found

    def health_check_result(self, name: str, check: str) -> HealthCheck:
        self._node(name)
        runs = self._check_jobs(name, check)
        if not runs:
            raise NotFoundError(f"no run of health check {check!r} on {name} is known to Slurm")
        return self._check_result(name, check, runs[-1])

    # -- changes

    def ensure_drained(self, name: str, reason: str) -> Outcome:
        reason = check_reason(reason)
        node = self._node(name)
        if "DRAIN" in node.flags:
            status = self.node_status(name)
            return Outcome(False, f"{name} was already drained ({node.reason or 'no reason given'})", node=status)
        self._run(self._drain_args(name, reason))
        return Outcome(True, f"drained {name}: {reason}", node=self.node_status(name))

    def ensure_resumed(self, name: str) -> Outcome:
        node = self._node(name)
        if "DRAIN" not in node.flags and "FAIL" not in node.flags and node.base.lower() != "down":
            return Outcome(False, f"{name} was not drained", node=self._status(node, self._jobs()))
        self._run(self._resume_args(name))
        return Outcome(True, f"resumed {name}", node=self.node_status(name))

    def ensure_in_pool(self, name: str, pool: str) -> Outcome:
        target = self._partition(check_pool(pool))
        nodes = self._nodes()
        node = self._find(nodes, name)
        managed = set(self.config.partitions.values())
        leaving = [p for p in node.partitions if p in managed and p != target]
        if target in node.partitions and not leaving:
            return Outcome(False, f"{name} was already in pool {pool}", node=self._status(node, self._jobs()))
        members = {p: [n.name for n in nodes if p in n.partitions] for p in {target, *leaving}}
        # Into the new partition first: the node is never in no partition at all.
        if target not in node.partitions:
            self._run(self._partition_args(target, [*members[target], name]))
        for partition in leaving:
            self._run(self._partition_args(partition, [n for n in members[partition] if n != name]))
        return Outcome(True, f"moved {name} to pool {pool} (partition {target})", node=self.node_status(name))

    def _requeue(self, job: JobStatus, *, exclude: list[str], onto: list[str], nodes: int | None = None) -> str:
        for name in onto:
            self.ensure_in_pool(name, "main")
        # The nodes it was kept off before stay excluded, but for one it is now sent onto (a repaired node back).
        previous = expand_hostlist(self._job(job.job_id).get("excluded_nodes") or "")
        excluded = [name for name in dict.fromkeys([*previous, *exclude]) if name not in onto]
        if job.state != "pending":
            try:
                self._run(["scontrol", "requeue", job.job_id])
            except RefusedError as exc:
                if "pending execution" not in str(exc):
                    raise
                # It went back to the queue between our look and the requeue: place it all the same.
        # A requeued job waits a few seconds (COMPLETING, then PENDING for its BeginTime): time to place it. Its new
        # node count is set there too: the batch script starts again with SLURM_JOB_NUM_NODES saying it.
        if exclude or onto or nodes is not None:
            self._run(self._placement_args(job.job_id, excluded, onto, nodes, clear=bool(previous) and not excluded))
        where = "".join(
            [
                f", not on {','.join(exclude)}" if exclude else "",
                f", onto {','.join(onto)}" if onto else "",
                f", on {nodes} node{'s' if nodes != 1 else ''}" if nodes is not None else "",
            ]
        )
        verb = "placed waiting job" if job.state == "pending" else "requeued job"
        return f"{verb} {job.job_id} (it was {job.raw_state} on {','.join(job.nodes) or 'no node'}){where}"

    def health_check(self, name: str, check: str) -> HealthCheck:
        command = check_command(self.config.health_checks, check)
        node = self._node(name)
        runs = self._check_jobs(name, check)
        if runs and job_state(runs[-1]["job_state"]) in ("pending", "running", "completing"):
            return self._check_result(name, check, runs[-1])
        if "DRAIN" in node.flags:
            raise RefusedError(
                f"{name} is drained and Slurm runs no job on a drained node: move it to the repair pool and "
                "resume it there before checking it"
            )
        job_id = self._run(self._check_args(name, self._node_partition(node), check, command)).strip()
        job_id = job_id.split(";")[0]  # --parsable prints "id" or "id;cluster"
        return HealthCheck(name, check, "pending", ref=job_id)

    def ensure_ready_for_checks(self, name: str) -> Outcome:
        """Slurm runs no job, a check included, on a drained node: move it to the root-only repair partition
        first, then lift the drain there, where only FleetOps' checks can reach it."""
        moved = self.ensure_in_pool(name, "repair")
        resumed = self.ensure_resumed(name)
        return Outcome(moved.changed or resumed.changed, f"{moved.summary}; {resumed.summary}", node=resumed.node)

    def plan_ready_for_checks(self, name: str) -> str:
        repair = self.describe_plan("ensure_in_pool", name=name, pool="repair")
        return f"{repair}; {self.describe_plan('ensure_resumed', name=name)}"

    # -- dry run

    def describe_plan(self, operation: str, **args) -> str:
        name = args.get("name", "NODE")
        if operation == "ensure_drained":
            return _shell(self._drain_args(name, args.get("reason", "REASON")))
        if operation == "ensure_resumed":
            return _shell(self._resume_args(name))
        if operation == "ensure_in_pool":
            pool = args.get("pool", "POOL")
            target = self.config.partitions.get(pool, pool)
            others = [p for p in self.config.partitions.values() if p != target]
            return "; ".join(
                [f"scontrol update partitionname={target} nodes=<its nodes>,{name}"]
                + [
                    f"scontrol update partitionname={p} nodes=<its nodes but {name}> (if {name} is in it)"
                    for p in others
                ]
            )
        if operation == "requeue_job":
            job_id = str(args.get("job_id", "JOB"))
            exclude, onto = list(args.get("exclude") or []), list(args.get("onto") or [])
            nodes = args.get("nodes")
            steps = [f"{self.describe_plan('ensure_in_pool', name=spare, pool='main')}" for spare in onto]
            steps.append(_shell(["scontrol", "requeue", job_id]))
            if exclude or onto or nodes is not None:
                steps.append(_shell(self._placement_args(job_id, exclude, onto, nodes)))
            return "; ".join(steps)
        if operation in ("node_status", "list_spares", "job_status", "health_check_result"):
            return {
                "node_status": f"sinfo --json (node {name}); squeue --json (its jobs)",
                "list_spares": f"sinfo --json (the nodes of partition {self.config.partitions['spare']})",
                "job_status": f"squeue --json (job {args.get('job_id', 'JOB')})",
                "health_check_result": f"squeue --json (the latest {CHECK_JOB_PREFIX}{args.get('check', 'CHECK')} "
                f"job on {name})",
            }[operation]
        if operation == "health_check":
            check = args.get("check", "CHECK")
            command = self.config.health_checks.get(check, "<unknown check>")
            return _shell(self._check_args(name, "<its partition>", check, command))
        raise unknown_operation(operation)

    # -- commands

    @staticmethod
    def _drain_args(name: str, reason: str) -> list[str]:
        return ["scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason}"]

    @staticmethod
    def _resume_args(name: str) -> list[str]:
        return ["scontrol", "update", f"nodename={name}", "state=resume"]

    @staticmethod
    def _placement_args(
        job_id: str, exclude: list[str], onto: list[str], nodes: int | None = None, *, clear: bool = False
    ) -> list[str]:
        args = ["scontrol", "update", f"jobid={job_id}"]
        if nodes is not None:
            args.append(f"numnodes={nodes}")
        if exclude or clear:  # `excnodelist=` (empty) lifts an earlier exclusion
            args.append(f"excnodelist={','.join(dict.fromkeys(exclude))}")
        if onto:
            args.append(f"reqnodelist={','.join(onto)}")
        return args

    @staticmethod
    def _partition_args(partition: str, nodes: list[str]) -> list[str]:
        return ["scontrol", "update", f"partitionname={partition}", f"nodes={','.join(nodes)}"]

    def _check_args(self, name: str, partition: str, check: str, command: str) -> list[str]:
        return [
            "sbatch",
            "--parsable",
            f"--partition={partition}",
            f"--nodelist={name}",
            f"--job-name={CHECK_JOB_PREFIX}{check}",
            f"--time={self.config.check_time_limit_min}",
            "--no-requeue",
            "--output=/dev/null",
            "--chdir=/",
            f"--wrap={command}",
        ]

    def _run(self, args: list[str]) -> str:
        try:
            result = subprocess.run(
                args, capture_output=True, text=True, timeout=self.config.timeout_s, env=self._env, check=False
            )
        except FileNotFoundError:
            raise RefusedError(f"{args[0]} is not installed here: Slurm's clients are needed (slurm-wlm)") from None
        except subprocess.TimeoutExpired:
            raise TransientError(f"{args[0]} did not answer within {self.config.timeout_s:g} s") from None
        if result.returncode != 0:
            raise classify(result.stderr or result.stdout)
        return result.stdout

    def _read_json(self, args: list[str], key: str) -> list[dict]:
        output = self._run(args)
        try:
            body = json.loads(output)
        except json.JSONDecodeError:
            raise TransientError(f"{args[0]} answered with something other than JSON: {output[:200]!r}") from None
        errors = body.get("errors") or []
        if errors:
            words = "; ".join(
                str(e.get("error", "unknown error")) + (f" (errno {e['errno']})" if "errno" in e else "")
                for e in errors
            )
            error = classify(words)
            # A read changes nothing, so one that fails without saying why (22.05 answers "Unspecified error"
            # when the controller is down) is worth a bounded retry.
            raise error if not isinstance(error, RefusedError) else TransientError(f"{args[0]}: {words}")
        return body.get(key) or []

    def _nodes(self) -> list[_Node]:
        return [
            _Node(
                name=raw["name"],
                base=raw.get("state") or "unknown",
                flags=[flag.upper() for flag in raw.get("state_flags") or []],
                reason=raw.get("reason") or "",
                partitions=list(raw.get("partitions") or []),
            )
            for raw in self._read_json(["sinfo", "--json"], "nodes")
        ]

    def _node(self, name: str) -> _Node:
        return self._find(self._nodes(), name)

    @staticmethod
    def _find(nodes: list[_Node], name: str) -> _Node:
        for node in nodes:
            if node.name == name:
                return node
        raise NotFoundError(f"node {name} is not in this Slurm cluster")

    def _jobs(self) -> list[dict]:
        return self._read_json(["squeue", "--json"], "jobs")

    def _job(self, job_id: str) -> dict:
        for job in self._jobs():
            if str(job.get("job_id")) == str(job_id):
                return job
        raise NotFoundError(f"job {job_id} is not known to Slurm (ended jobs are forgotten after MinJobAge)")

    def _pool(self, node: _Node) -> str:
        for pool in ("main", "spare", "repair"):
            if self.config.partitions.get(pool) in node.partitions:
                return pool
        return node.partitions[0] if node.partitions else ""

    def _partition(self, pool: str) -> str:
        if pool not in self.config.partitions:
            raise RefusedError(f"no Slurm partition is configured for pool {pool!r}")
        return self.config.partitions[pool]

    def _node_partition(self, node: _Node) -> str:
        pool = self._pool(node)
        partition = self.config.partitions.get(pool, pool)
        if not partition:
            raise RefusedError(f"{node.name} is in no partition: no job can run on it")
        return partition

    def _status(self, node: _Node, jobs: list[dict]) -> NodeStatus:
        on_node = [
            str(job["job_id"])
            for job in jobs
            if job_state(job["job_state"]) in _ON_NODE and node.name in expand_hostlist(job.get("nodes") or "")
        ]
        pool = self._pool(node)
        return NodeStatus(
            name=node.name,
            state=node_state(node.base, node.flags, running_jobs=bool(on_node), pool=pool),
            raw_state="+".join([node.base.upper(), *node.flags]),
            reason=node.reason,
            jobs=on_node,
            pool=pool,
        )

    def _check_jobs(self, name: str, check: str) -> list[dict]:
        """This check's jobs on this node that Slurm still remembers, oldest first."""
        wanted = f"{CHECK_JOB_PREFIX}{check}"
        runs = [
            job
            for job in self._jobs()
            if job.get("name") == wanted and name in expand_hostlist(job.get("required_nodes") or "")
        ]
        return sorted(runs, key=lambda job: int(job["job_id"]))

    @staticmethod
    def _check_result(name: str, check: str, job: dict) -> HealthCheck:
        state = job_state(job["job_state"])
        exit_status = int(job.get("exit_code") or 0) >> 8  # a wait(2) status: the exit code is the high byte
        if state == "completed":
            return HealthCheck(name, check, "passed", ref=str(job["job_id"]), details="exit code 0")
        if state in ("failed", "cancelled"):
            details = f"{job['job_state']}, exit code {exit_status}"
            return HealthCheck(name, check, "failed", ref=str(job["job_id"]), details=details)
        return HealthCheck(
            name,
            check,
            "running" if state != "pending" else "pending",
            ref=str(job["job_id"]),
            details=job["job_state"],
        )
