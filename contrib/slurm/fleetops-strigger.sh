#!/bin/bash
# Slurm trigger program: tells FleetOps that nodes went down or are drained (a node.state event per node).
# Install (as SlurmUser, on the controller; --flags=perm keeps the trigger after it fires):
#   strigger --set --node --drain --flags=perm --program=/usr/local/lib/fleetops/fleetops-strigger.sh
#   strigger --set --node --down  --flags=perm --program=/usr/local/lib/fleetops/fleetops-strigger.sh
# Slurm calls it with the node list (a hostlist expression) as its argument. The state (down -> suspect,
# drain -> draining) and the reason are read from `scontrol show node`; FLEETOPS_STATE overrides the state.
set -uo pipefail
. "$(dirname "$(readlink -f "$0")")/fleetops-lib.sh"
[ $# -ge 1 ] || { echo "usage: $0 NODELIST" >&2; exit 2; }
for node in $(fo_hosts "$*"); do
  line=$(scontrol -o show node "$node" 2>/dev/null || true)
  slurm_state=$(sed -n 's/.* State=\([^ ]*\).*/\1/p' <<<"$line")
  reason=$(sed -n 's/.* Reason=\(.*\)$/\1/p' <<<"$line")
  stamp=$(sed -n 's/.*\[[^@]*@\([0-9T:-]*\)\]$/\1/p' <<<"$reason")
  reason=${reason% \[*}
  case "${FLEETOPS_STATE:-$slurm_state}" in
    *DRAIN*|draining) state=draining ;;
    *DOWN*|*FAIL*|suspect) state=suspect ;;
    in_service|cordoned|in_repair|retired) state=$FLEETOPS_STATE ;;
    *) state=suspect ;;
  esac
  fo_post "slurm:$CLUSTER:node:$node:$state:${stamp:-$(fo_now)}" node.state \
    "{\"node\":$(fo_json "$node"),\"state\":\"$state\",\"reason\":$(fo_json "slurm ${slurm_state:-$state}: ${reason:-no reason given}"),\"cluster\":$(fo_json "$CLUSTER")}"
done
