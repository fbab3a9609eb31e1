# Shared by the FleetOps Slurm hooks: configuration and posting one CloudEvent with curl.
# FLEETOPS_URL (e.g. https://fleetops.example.com) and FLEETOPS_TOKEN (an API token with events:write) come from
# the environment or from FLEETOPS_ENV_FILE (default /etc/fleetops/slurm.env): slurmctld runs triggers, prologs
# and epilogs with an almost empty environment, so the file is the usual way.
FLEETOPS_ENV_FILE=${FLEETOPS_ENV_FILE:-/etc/fleetops/slurm.env}
# shellcheck disable=SC1090
[ -r "$FLEETOPS_ENV_FILE" ] && . "$FLEETOPS_ENV_FILE"
: "${FLEETOPS_URL:?FLEETOPS_URL is not set (environment or $FLEETOPS_ENV_FILE)}"
: "${FLEETOPS_TOKEN:?FLEETOPS_TOKEN is not set (environment or $FLEETOPS_ENV_FILE)}"
CLUSTER=${FLEETOPS_CLUSTER:-${SLURM_CLUSTER_NAME:-slurm}}

fo_json() {  # a JSON string
  local s=${1//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
  printf '"%s"' "$s"
}

fo_now() {  # milliseconds where date has %N (GNU), else whole seconds
  local t; t=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  [[ $t =~ \.[0-9]{3}Z$ ]] && echo "$t" || date -u +%Y-%m-%dT%H:%M:%SZ
}

fo_post() {  # fo_post ID TYPE DATA_JSON: one structured CloudEvent; retried, never fails the job
  local body
  body="{\"specversion\":\"1.0\",\"id\":$(fo_json "$1"),\"source\":$(fo_json "slurm/$CLUSTER"),\"type\":$(fo_json "$2"),\"time\":\"$(fo_now)\",\"data\":$3}"
  curl -sS --max-time 10 --retry 3 --retry-delay 1 --retry-all-errors -o /dev/null -w '%{http_code}\n' \
    -H "Authorization: Bearer $FLEETOPS_TOKEN" -H 'Content-Type: application/cloudevents+json' \
    --data-binary "$body" "${FLEETOPS_URL%/}/api/v1/events" || echo "fleetops: could not post $2 $1" >&2
}

fo_hosts() {  # expand a Slurm hostlist (gpu-[001-003]) into one name a line
  if command -v scontrol >/dev/null 2>&1 && scontrol show hostnames "$1" 2>/dev/null; then return; fi
  local item prefix ranges range lo hi i  # without scontrol: names and one bracket each, gpu-[001-003,007]
  for item in $(sed 's/,\([^]]*\(\[\|$\)\)/ \1/g' <<<"$1"); do
    if [[ $item =~ ^([^[]*)\[([0-9,-]+)\]$ ]]; then
      prefix=${BASH_REMATCH[1]}; IFS=, read -ra ranges <<<"${BASH_REMATCH[2]}"
      for range in "${ranges[@]}"; do
        lo=${range%-*}; hi=${range#*-}
        for ((i = 10#$lo; i <= 10#$hi; i++)); do printf '%s%0*d\n' "$prefix" "${#lo}" "$i"; done
      done
    else
      printf '%s\n' "$item"
    fi
  done
}

fo_json_list() {  # JSON list of the names on stdin
  local first=1 name; printf '['
  while read -r name; do [ -n "$name" ] || continue; [ $first = 1 ] || printf ','; fo_json "$name"; first=0; done
  printf ']'
}
