"""Slurm through its own clients: `sinfo --json` and `squeue --json` to read, `scontrol` and `sbatch` to act.

Written for Slurm 22.05 (Debian 12), where `scontrol` has no --json and slurmrestd cannot change node state,
so every change goes through `scontrol`. Both JSON readers ignore -n/-j filters on 22.05 and return the
whole cluster; the adapter picks out what it needs.

How the operations map:
- drain: `scontrol update nodename=X state=drain reason=...`. Slurm lets the running jobs finish (the node
  is MIXED+DRAIN, FleetOps' `draining`, until they end, then IDLE+DRAIN, `cordoned`); a playbook that cannot
  wait requeues them with requeue_job.
- resume: `scontrol update nodename=X state=resume`. The node is `idle*` (not responding) for about a second
  before slurmd answers; callers that need it schedulable poll node_status.
- pools are partitions (SlurmConfig.partitions): main `gpu`, spare `spare`, repair `repair` (root-only in the
  test cluster; in production limit it to FleetOps' account with AllowAccounts or AllowGroups).
  A spare sits in no job partition, so nothing lands on it until a playbook moves it to main; moving is
  `scontrol update partitionname=P nodes=<full list>` (22.05 has no nodes+=), added to the new partition
  before it leaves the old one. Partition changes made by scontrol last until `scontrol reconfigure` or a
  restart that reads slurm.conf again: make slurm.conf agree after a replacement.
- requeue: `scontrol requeue JOB`; the job's restart_cnt goes up at once (the guard of requeue_job) and it is
  PENDING until it starts again (about 10 s), on other nodes when its old one is drained. `onto` spares join
  the main partition first; `exclude` and `onto` become the job's ExcNodeList and ReqNodeList while it waits.
  A new node count (shrink and continue, grow back) is `scontrol update jobid=JOB numnodes=N` in the same
  update: the batch script starts again with SLURM_JOB_NUM_NODES=N, which is how the training job learns its
  new world size. A job already waiting is placed and resized without a requeue.
- health checks: `sbatch -w NODE -p <its partition> --job-name=fleetops-hc:CHECK --wrap CMD`; the result is
  the job's end state and exit code (squeue keeps ended jobs for MinJobAge). A drained node runs no job,
  even in a maintenance reservation, so a check needs the node resumed in the repair pool first.
- reading jobs at once (jobs_status, the reconciliation with the scheduler): one `squeue --json` for all, each ended
  job with its end time, state reason and exit code; a job squeue no longer shows (ended longer ago than MinJobAge)
  from `sacct --json -j`, which a cluster without accounting (no slurmdbd) refuses: such a job is left out.

Errors: the clients' words decide the type (classify), a timeout is transient, and a missing client binary
is refused.
"""

from incidents.playbooks.clusters.slurm.adapter import (
    SlurmAdapter,
    SlurmConfig,
)
from incidents.playbooks.clusters.slurm.parse import (
    CHECK_JOB_PREFIX,
    classify,
    expand_hostlist,
    job_state,
    node_state,
)

__all__ = [
    "CHECK_JOB_PREFIX",
    "SlurmAdapter",
    "SlurmConfig",
    "classify",
    "expand_hostlist",
    "job_state",
    "node_state",
]
