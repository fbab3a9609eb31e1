#!/bin/bash
# Slurm EpilogSlurmctld (or Epilog: then only the job's first node posts): run.completed on exit code 0, else
# run.failed with the exit code (SLURM_JOB_EXIT_CODE2 is "code:signal"). Event id:
# slurm:<cluster>:<job id>:<restart count>:end.
# slurm.conf: EpilogSlurmctld=/usr/local/lib/fleetops/epilog.sh
set -uo pipefail
. "$(dirname "$(readlink -f "$0")")/fleetops-lib.sh"
: "${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run me from Slurm}"
nodes=$(fo_hosts "${SLURM_JOB_NODELIST:-}")
first=$(head -n1 <<<"$nodes")
if [ -n "${SLURMD_NODENAME:-}" ] && [ "$SLURMD_NODENAME" != "$first" ]; then exit 0; fi
run=${FLEETOPS_RUN:-${SLURM_JOB_NAME:-slurm-$SLURM_JOB_ID}}
run=$(tr -c 'A-Za-z0-9._:\n-' '-' <<<"$run")
exit2=${SLURM_JOB_EXIT_CODE2:-${FLEETOPS_EXIT_CODE:-0}:0}
code=${exit2%%:*}; signal=${exit2##*:}
id="slurm:$CLUSTER:$SLURM_JOB_ID:${SLURM_RESTART_COUNT:-0}:end"
if [ "${code:-0}" = 0 ] && [ "${signal:-0}" = 0 ]; then
  fo_post "$id" run.completed "{\"run\":$(fo_json "$run")}"
else
  reason="Slurm job $SLURM_JOB_ID ended with exit code $code"
  [ "${signal:-0}" = 0 ] || reason="$reason, signal $signal"
  fo_post "$id" run.failed "{\"run\":$(fo_json "$run"),\"reason\":$(fo_json "$reason"),\"node\":$(fo_json "$first")}"
fi
exit 0
