#!/bin/bash
# Slurm PrologSlurmctld (or Prolog: then only the job's first node posts): a run.started event for the job.
# slurm.conf: PrologSlurmctld=/usr/local/lib/fleetops/prolog.sh
# The run is FLEETOPS_RUN, else the job name, else slurm-<job id>; the event id is stable per attempt:
# slurm:<cluster>:<job id>:<restart count>:start, so a retried hook is a duplicate, a requeue a new attempt.
set -uo pipefail
. "$(dirname "$(readlink -f "$0")")/fleetops-lib.sh"
: "${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run me from Slurm}"
nodes=$(fo_hosts "${SLURM_JOB_NODELIST:-}")
first=$(head -n1 <<<"$nodes")
if [ -n "${SLURMD_NODENAME:-}" ] && [ "$SLURMD_NODENAME" != "$first" ]; then exit 0; fi
run=${FLEETOPS_RUN:-${SLURM_JOB_NAME:-slurm-$SLURM_JOB_ID}}
run=$(tr -c 'A-Za-z0-9._:\n-' '-' <<<"$run")
count=$(grep -c . <<<"$nodes")
# Unset, FLEETOPS_GPUS follows the allocation: a job requeued on fewer nodes (shrink-and-continue) says its new size.
gpus=${FLEETOPS_GPUS:-$((count * ${FLEETOPS_GPUS_PER_NODE:-8}))}
fo_post "slurm:$CLUSTER:$SLURM_JOB_ID:${SLURM_RESTART_COUNT:-0}:start" run.started \
  "{\"run\":$(fo_json "$run"),\"cluster\":$(fo_json "$CLUSTER"),\"gpus\":$gpus,\"nodes\":$(fo_json_list <<<"$nodes"),\"job_id\":$(fo_json "$SLURM_JOB_ID")}"
exit 0
