#!/bin/bash
# Start a real Slurm 22.05 cluster on loopback: munged, slurmctld and one slurmd per fake GPU node.
# Adapted from the team's Slurm-on-loopback recipe (recipes/slurm/start.sh), kept here so that the tests need nothing outside the repository. Changes:
# - SPARES (env, default 0): the last SPARES nodes form the partition `spare` instead of joining `gpu`, and an
#   empty, root-only partition `repair` exists: FleetOps' pools are partitions (incidents/playbooks/clusters/slurm.py).
# - SLURMD_PORT (env, default 17001): the first slurmd's port, so that a test cluster can use free ports.
# - the readiness check counts nodes, not partition lines (a node is listed once per partition), and stops
#   at once when slurmctld has died instead of asking a dead controller for 30 s.
# Usage: start.sh DIR [NODES] [--rest]
#   DIR   a writable folder for config, state, logs and sockets (created; wiped state on each start)
#   NODES number of fake nodes gpu-001..gpu-NNN, 8 GPUs each (default 8, at most 32)
#   --rest also start slurmrestd (JWT) on 127.0.0.1:6820; a root token is written to DIR/keys/root.jwt
# Needs Debian's packages: apt-get install -y slurm-wlm slurmrestd munge
# Prints the line to export SLURM_CONF for clients (sinfo, squeue, scontrol, sbatch).
set -euo pipefail
L=$(mkdir -p "$1" && cd "$1" && pwd); N=${2:-8}; REST=${3:-}
[ "$N" = "--rest" ] && { N=8; REST=--rest; }
SPARES=${SPARES:-0}; MAIN=$((N - SPARES)); PORT0=${SLURMD_PORT:-17001}
[ "$MAIN" -ge 1 ] || { echo "SPARES must leave at least one node in gpu" >&2; exit 1; }
spare_nodes=""; [ "$SPARES" -gt 0 ] && spare_nodes="gpu-[$(printf '%03d' $((MAIN + 1)))-$(printf '%03d' "$N")]"
export SLURM_CONF=$L/slurm.conf
mkdir -p "$L"/{munge,keys,state,spool,log,run,dev}
chmod 755 "$L" "$L/munge"   # munged insists its socket folder is world-executable
[ -f "$L/keys/munge.key" ] || { dd if=/dev/urandom bs=1 count=1024 of="$L/keys/munge.key" 2>/dev/null; chmod 400 "$L/keys/munge.key"; }
[ -f "$L/keys/jwt_hs256.key" ] || { dd if=/dev/urandom bs=32 count=1 of="$L/keys/jwt_hs256.key" 2>/dev/null; chmod 600 "$L/keys/jwt_hs256.key"; }
# slurmd counts GPUs from device files: fake ones (character devices where allowed, plain files otherwise)
for i in 0 1 2 3 4 5 6 7; do [ -e "$L/dev/nvidia$i" ] || mknod "$L/dev/nvidia$i" c 195 $i 2>/dev/null || touch "$L/dev/nvidia$i"; done
cat > "$L/slurm.conf" <<CONF
ClusterName=fleetops
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
AuthType=auth/munge
AuthInfo=socket=$L/munge/munge.socket.2,cred_expire=10
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$L/keys/jwt_hs256.key
StateSaveLocation=$L/state
SlurmdSpoolDir=$L/spool/%n
SlurmctldPidFile=$L/run/slurmctld.pid
SlurmdPidFile=$L/run/slurmd-%n.pid
SlurmctldLogFile=$L/log/slurmctld.log
SlurmdLogFile=$L/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# short credential expiry and scheduler intervals: a requeued job restarts in about 13 s, not 140 s
SchedulerParameters=bf_interval=1,sched_interval=2
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
SlurmctldDebug=info
SlurmdDebug=info
NodeName=gpu-[001-$(printf '%03d' "$N")] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$PORT0-$((PORT0 + N - 1))] CPUs=16 RealMemory=64000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=gpu Nodes=gpu-[001-$(printf '%03d' "$MAIN")] Default=YES MaxTime=INFINITE State=UP
PartitionName=spare Nodes=$spare_nodes MaxTime=INFINITE State=UP
PartitionName=repair RootOnly=YES MaxTime=INFINITE State=UP
CONF
cat > "$L/gres.conf" <<CONF
AutoDetect=off
NodeName=gpu-[001-$(printf '%03d' "$N")] Name=gpu Type=h100 File=$L/dev/nvidia[0-7]
CONF
rm -rf "$L"/state/* "$L"/spool/*
munged --key-file="$L/keys/munge.key" --socket="$L/munge/munge.socket.2" \
       --pid-file="$L/run/munged.pid" --log-file="$L/log/munged.log" --seed-file="$L/munge/munged.seed"
slurmctld -f "$SLURM_CONF"
sleep 0.3
kill -0 "$(cat "$L/run/slurmctld.pid" 2>/dev/null)" 2>/dev/null || { echo "slurmctld died:" >&2; tail -5 "$L/log/slurmctld.log" >&2; exit 1; }
for n in $(seq -f 'gpu-%03g' 1 "$N"); do mkdir -p "$L/spool/$n"; slurmd -f "$SLURM_CONF" -N "$n"; done
ctld=$(cat "$L/run/slurmctld.pid")
for _ in $(seq 1 150); do   # up to 30 s for every node to be idle
  kill -0 "$ctld" 2>/dev/null || { echo "slurmctld died:" >&2; tail -5 "$L/log/slurmctld.log" >&2; exit 1; }
  [ "$(timeout 3 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = "$N" ] && break; sleep 0.2
done
[ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" = "$N" ] || { echo "nodes not idle:" >&2; sinfo -N >&2; exit 1; }
if [ "$REST" = "--rest" ]; then
  # slurmrestd refuses to run as root; 22.05 serves /slurm/v0.0.36-38, node state is read-only there
  SLURM_JWT=daemon slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt -s openapi/v0.0.38 -u nobody 127.0.0.1:${SLURMRESTD_PORT:-6820} \
       >"$L/log/slurmrestd.log" 2>&1 & echo $! > "$L/run/slurmrestd.pid"
  for _ in $(seq 1 50); do curl -s -o /dev/null "127.0.0.1:${SLURMRESTD_PORT:-6820}" && break; sleep 0.2; done
  scontrol token username=root lifespan=86400 | sed 's/^SLURM_JWT=//' > "$L/keys/root.jwt"
fi
echo "export SLURM_CONF=$SLURM_CONF"
