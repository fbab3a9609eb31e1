#!/bin/bash
# Stop the cluster that start.sh DIR started: cancel jobs first (a killed slurmd leaves its jobs running),
# then stop every daemon by the pid it wrote, in parallel.
# Adapted from the team's Slurm-on-loopback recipe (recipes/slurm/stop.sh); cancels the jobs of every partition, not only `gpu`.
L=$(cd "$1" && pwd) || exit 1
export SLURM_CONF=$L/slurm.conf
if [ -f "$L/run/slurmctld.pid" ] && kill -0 "$(cat "$L/run/slurmctld.pid")" 2>/dev/null; then
  jobs=$(timeout 5 squeue -h -o %i 2>/dev/null)
  [ -n "$jobs" ] && timeout 5 scancel --full $jobs 2>/dev/null
  for _ in $(seq 1 50); do [ -z "$(timeout 3 squeue -h -t running,completing 2>/dev/null)" ] && break; sleep 0.2; done
fi
pids=$(cat "$L"/run/slurmrestd.pid "$L"/run/slurmd-*.pid "$L"/run/slurmctld.pid "$L"/run/munged.pid 2>/dev/null)
[ -n "$pids" ] && kill $pids 2>/dev/null
alive=""
for _ in $(seq 1 50); do alive=""; for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break; sleep 0.1; done
[ -n "$alive" ] && kill -9 $alive 2>/dev/null
rm -f "$L"/run/*.pid
exit 0
