"""16,384 node agents posting for themselves: does the intake take one small POST a node every 30 s, and do the
workers apply them as fast?

test_scale.py sends the agents' events as a rack's relay would, in batches of up to 1,000 under 8 tokens. A node
agent as shipped (fleetops-agent, docs/AGENT.md) posts its own poll's events under a token bound to its node:
at 131,072 GPUs that is a POST a node every 30 s, 546 a second, most of them one heartbeat, and every 10th poll a
node's 16 ECC and health readings with it. The cost is per request (authentication, the quota, the insert, an
apply turn for the token) and per apply turn (a task, a transaction, detection), not per event.

The agents' part of AT_SCALE's stream (runs.domain.telemetry: a heartbeat a node every 30 s, a GPU's readings
every 5 minutes) is grouped as each agent would post it: one POST per node and second, under that node's own
token (role agent, bound to the node: 16,384 tokens). The telemetry phases heartbeats and readings apart, so a
node's readings go in a POST of their own: 601 POSTs a second, a little more than the agent's 546.

1. Capacity: CAPACITY_S seconds of those POSTs sent as fast as the server takes them from CONNECTIONS threads, a new
   connection each (an agent's urllib opens one a POST; gunicorn's sync workers close it after the answer), to
   gunicorn (2 workers at nice 10, as docs/DEPLOY.md deploys one machine) with 2 Celery workers applying and
   detecting. Figures: POSTs a second accepted, POSTs a second applied and detected from the first POST to the last
   event done, against the rate the fleet sends them; the CPU of a POST by role.
2. Paced: PACED_S seconds of the agents of a node in n, n the least that makes at most half the sustained rate, each
   POST in its second, while an Xid 79 every PROBE_EVERY_S under a node-bound token of its own (the agents' turn, as
   any agent's) is timed from its 202 to its incident in GET /api/v1/incidents (bound: p95 under 2 s, issue 23).
3. The whole stream: WHOLE_S seconds of the training jobs' rank samples (batches of 1,000 a second) and every agent
   delivering every SEND_EVERY_S s (fleetops-agent --send-every, as docs/DEPLOY.md runs them at this size) at a phase
   of its own, unrelated to its readings' (so the window carries the agents' full 1,420 events a second), with the
   same probe: does one machine carry the 131,072-GPU fleet when its agents post for themselves? Reported, not
   asserted.
"""

import hashlib
import json
import math
import os
import threading
import uuid
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from runs.domain.simulator import frontier_config
from runs.domain.telemetry import AT_SCALE, telemetry
from runs.models import ApiToken

from .conftest import BOUND_P95_S, INTAKE_NICE, PROBE_EVERY_S, WORKERS, api_token, report, say
from .servers import (
    celery_workers,
    cpu_by_role,
    events_done_wait,
    gunicorn,
    percentile,
    post_all,
    purge_queues,
    xid_probe,
)

CONFIG = frontier_config()
RATES = AT_SCALE
AGENT_TYPES = ("node.heartbeat", "gpu.ecc", "gpu.health")
STREAM_START_S = 86_400 + 300  # a day into the run (test_scale.py's stretch is the 150 s before)
CAPACITY_S = 30
PACED_S = 60
WHOLE_S = 60
SEND_EVERY_S = 120  # fleetops-agent --send-every, as docs/DEPLOY.md runs the agents at this size
PHASE_STRIDE = 7_919
CONNECTIONS = 32
TOKEN_PREFIX = "bench-agent-"


def _agent_tokens() -> dict[str, str]:
    """A token for each node, bound to it (manage.py create_api_token --role agent --node HOST): node -> token.
    Derived from the node's name, and an earlier run's rows made so again: deleting 16,384 tokens would check each
    against the event log's token column, which has no index of its own (a scan of the log a token)."""
    hosts = [f"{CONFIG.cluster}-{i:05d}" for i in range(CONFIG.nodes)]
    tokens = {host: f"{ApiToken.PREFIX}bench{hashlib.sha256(host.encode()).hexdigest()[:32]}" for host in hosts}
    rows = [
        ApiToken(
            name=f"{TOKEN_PREFIX}{host}",
            digest=ApiToken.digest_of(token),
            hint=token[:10],
            scopes=[ApiToken.Scope.EVENTS_WRITE],
            role="agent",
            node=host,
        )
        for host, token in tokens.items()
    ]
    ApiToken.objects.bulk_create(
        rows,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=["digest", "hint", "scopes", "role", "node", "revoked_at", "expires_at"],
    )
    assert ApiToken.objects.filter(name__startswith=TOKEN_PREFIX, revoked_at__isnull=True).count() == len(hosts)
    return tokens


def _posts(events: list[dict], tokens: dict[str, str]) -> list[tuple[int, str, bytes]]:
    """(second, token, body): a node's events of one second in one POST, under its own token; the second counted from
    the first event's."""
    by_node: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for event in events:
        by_node[event["time"][:19], event["data"]["node"]].append(event)
    first = datetime.fromisoformat(min(stamp for stamp, _ in by_node))
    return [
        (int((datetime.fromisoformat(stamp) - first).total_seconds()), tokens[node], json.dumps(batch).encode())
        for (stamp, node), batch in sorted(by_node.items())
    ]


def _agent_events(source: str, start_s: int, seconds: int, every: int = 1) -> list[dict]:
    """The agents' events of `seconds` of the stream from `start_s`, of every `every`-th node: a node's heartbeat
    and its GPUs' readings each come at the node's own phase, so every n-th node is a fleet n times smaller."""
    return [
        event
        for event in telemetry(CONFIG, RATES, start_s=start_s, seconds=seconds, source=source)
        if event["type"] in AGENT_TYPES and int(event["data"]["node"].rsplit("-", 1)[1]) % every == 0
    ]


def _whole_stream(source: str, start_s: int, tokens: dict[str, str], trainer: str) -> list[tuple[int, str, bytes]]:
    """(second, token, body) of WHOLE_S seconds of the whole stream from `start_s`: each second's rank samples in
    batches of 1,000 under the training job's token, and each node's agent delivering every SEND_EVERY_S, at its own
    phase, what it polled since its last delivery (`fleetops-agent --send-every`), under its own token."""
    by_second: dict[int, list[dict]] = defaultdict(list)
    by_node: dict[str, list[tuple[float, dict]]] = defaultdict(list)
    first = CONFIG.start + timedelta(seconds=start_s)
    events = telemetry(CONFIG, RATES, start_s=start_s - SEND_EVERY_S, seconds=SEND_EVERY_S + WHOLE_S, source=source)
    for event in events:
        at = (datetime.fromisoformat(event["time"].replace("Z", "+00:00")) - first).total_seconds()
        if event["type"] in AGENT_TYPES:
            by_node[event["data"]["node"]].append((at, event))
        elif 0 <= at < WHOLE_S:
            by_second[int(at)].append(event)
    posts = [
        (second, trainer, json.dumps(batch[i : i + 1000]).encode())
        for second, batch in by_second.items()
        for i in range(0, len(batch), 1000)
    ]
    for node, polled in by_node.items():
        # Its delivery's second in the cycle: the nodes in an order unrelated to their index (7,919 is odd, so this
        # is a permutation of 16,384), as agents started at their own times are. By index it would follow the
        # telemetry's own phases, and the window would hold a sixth of the readings where the fleet sends two fifths.
        due = int(node.rsplit("-", 1)[1]) * PHASE_STRIDE % CONFIG.nodes * SEND_EVERY_S / CONFIG.nodes
        if due < WHOLE_S:
            batch = [event for at, event in polled if due - SEND_EVERY_S < at <= due]
            posts.append((int(due), tokens[node], json.dumps(batch).encode()))
    return sorted(posts, key=lambda post: post[0])


def _probe_tokens(source: str, count: int) -> dict[str, str]:
    """Node-bound tokens for the Xid probe's nodes (xid_probe names them after its source): its Xids go the way
    an agent's do, through the agents' shared turn."""
    tokens, rows = {}, []
    for n in range(count):
        node = f"{source.rsplit('/', 1)[-1]}-{n:03d}"
        tokens[node] = f"{ApiToken.PREFIX}probe{hashlib.sha256(node.encode()).hexdigest()[:32]}"
        rows.append(
            ApiToken(
                name=f"bench-probe-{node}",
                digest=ApiToken.digest_of(tokens[node]),
                hint=tokens[node][:10],
                scopes=[ApiToken.Scope.EVENTS_WRITE, ApiToken.Scope.READ],
                role="agent",
                node=node,
            )
        )
    ApiToken.objects.bulk_create(rows)
    return tokens


def test_16384_agents_posting_for_themselves(scale_database):
    tokens = _agent_tokens()
    tag = uuid.uuid4().hex[:8]
    source, paced_source = f"fleetops/bench-agents-{tag}", f"fleetops/bench-agents-{tag}-paced"
    probe_source = f"fleetops/bench-agents-{tag}-probe"
    whole_source, whole_probe_source = f"fleetops/bench-agents-{tag}-whole", f"fleetops/bench-agents-{tag}-wprobe"
    probe_tokens = _probe_tokens(probe_source, int(PACED_S / PROBE_EVERY_S) + 10)
    probe_tokens |= _probe_tokens(whole_probe_source, int(WHOLE_S / PROBE_EVERY_S) + 10)
    trainer = api_token("bench-agents-trainer", ["events:write"])
    events = _agent_events(source, STREAM_START_S, CAPACITY_S)
    posts = _posts(events, tokens)
    fleet_posts_s = len(posts) / CAPACITY_S
    say(
        f"agents: {len(events):,} events of {CAPACITY_S} s in {len(posts):,} POSTs ({fleet_posts_s:,.0f} a second,"
        f" {len(events) / len(posts):.1f} events each) under {len(tokens):,} node-bound tokens"
    )
    with connection.cursor() as cursor:  # the earlier runs' deleted rows gone, as autovacuum would leave the tables
        cursor.execute("VACUUM ANALYZE")
    purge_queues()
    probed: list[tuple[float, float]] = []
    whole_probed: list[tuple[float, float]] = []
    try:
        with (
            gunicorn(workers=2, nice=INTAKE_NICE) as url,
            gunicorn(workers=1) as reader,
            celery_workers(WORKERS) as workers,
        ):
            # 1. Capacity.
            cpu_before = cpu_by_role(workers)
            started, last_202, latencies = post_all(url, posts, threads=CONNECTIONS, paced=False, keep_alive=False)
            done = events_done_wait(source, 1800)
            cpu = {role: after - cpu_before[role] for role, after in cpu_by_role(workers).items()}
            # 2. Paced at half of that, with an agent's Xid timed through it.
            sustained = len(posts) / (done - started)
            every = max(1, math.ceil(2 * fleet_posts_s / sustained))
            paced = _posts(_agent_events(paced_source, STREAM_START_S + CAPACITY_S, PACED_S, every), tokens)
            paced_nodes = math.ceil(CONFIG.nodes / every)
            stop = threading.Event()
            prober = threading.Thread(
                target=xid_probe,
                args=(url, reader, probe_tokens.__getitem__, stop, probed),
                kwargs={"source": probe_source, "every_s": PROBE_EVERY_S},
            )
            prober.start()
            _paced_started, paced_202, paced_latencies = post_all(
                url, paced, threads=CONNECTIONS, paced=True, keep_alive=False
            )
            stop.set()
            prober.join()
            paced_drain_s = events_done_wait(paced_source, 600) - paced_202
            # 3. The whole stream, the agents delivering every SEND_EVERY_S, with an agent's Xid timed through it.
            whole = _whole_stream(whole_source, STREAM_START_S + CAPACITY_S + PACED_S + SEND_EVERY_S, tokens, trainer)
            stop = threading.Event()
            prober = threading.Thread(
                target=xid_probe,
                args=(url, reader, probe_tokens.__getitem__, stop, whole_probed),
                kwargs={"source": whole_probe_source, "every_s": PROBE_EVERY_S},
            )
            machine_before = cpu_by_role(workers)["machine"]
            prober.start()
            whole_started, whole_202, whole_latencies = post_all(
                url, whole, threads=CONNECTIONS, paced=True, keep_alive=False
            )
            stop.set()
            prober.join()
            whole_done = events_done_wait(whole_source, 1800)
            whole_cores = (cpu_by_role(workers)["machine"] - machine_before) / (whole_done - whole_started)
    finally:
        purge_queues()

    accepted = len(posts) / (last_202 - started)
    report(
        "agents: POSTs a second accepted, as fast as posted",
        f"{accepted:,.0f}",
        f"the fleet's {fleet_posts_s:,.0f}",
        f"{accepted / fleet_posts_s:.2f}x; POST p50 / p95 {percentile(latencies, 50) * 1000:.0f} / "
        f"{percentile(latencies, 95) * 1000:.0f} ms from {CONNECTIONS} connections",
    )
    report(
        "agents: POSTs a second applied and detected, sustained",
        f"{sustained:,.0f}",
        f"the fleet's {fleet_posts_s:,.0f}",
        f"margin {sustained / fleet_posts_s:.2f}x; {len(events) / (done - started):,.0f} events/s; "
        f"done {done - last_202:.1f} s after the last POST; {WORKERS} Celery workers",
    )
    web = cpu["machine"] - cpu["postgres"] - cpu["workers"] - cpu["clients"]
    per_post = {role: 1000 * seconds / len(posts) for role, seconds in (("web", web), *cpu.items())}
    report(
        "agents: CPU ms a POST",
        f"{per_post['machine']:.2f} ms",
        note=(
            f"intake (gunicorn) {per_post['web']:.2f}, workers (apply, detect) {per_post['workers']:.2f}, PostgreSQL "
            f"{per_post['postgres']:.2f}, the posting clients {per_post['clients']:.2f}"
        ),
    )
    probes = [latency for _at, latency in probed]
    say("agents: probes (s into the paced pass: latency s) " + ", ".join(f"{at:.1f}: {lat:.2f}" for at, lat in probed))
    p95 = percentile(probes, 95)
    report(
        f"agents: paced, {paced_nodes:,} nodes' agents, POST p95",
        f"{percentile(paced_latencies, 95) * 1000:.0f} ms",
        f"{len(paced) / PACED_S:,.0f} POSTs/s: a node in {every}, at most half the sustained rate",
        f"done {paced_drain_s:.1f} s after the last POST",
    )
    report(
        "agents: paced, an agent's Xid 79, 202 to incident, p50 / p95",
        f"{percentile(probes, 50) * 1000:.0f} / {p95 * 1000:.0f} ms",
        bound=f"{BOUND_P95_S * 1000:.0f} ms",
        note=f"{len(probes)} probes under node-bound tokens, through the agents' turn "
        f"(gathers {settings.EVENTS_AGENTS_TURN_GATHER_S:g} s); {p95 / BOUND_P95_S:.2f} of the bound",
    )
    whole_events = sum(body.count(b'"specversion"') for _second, _token, body in whole)
    agents_events = sum(body.count(b'"specversion"') for _second, token, body in whole if token != trainer)
    fleet_agents = sum(r for kind, r in RATES.per_s(CONFIG).items() if kind in AGENT_TYPES)
    whole_probes = [latency for _at, latency in whole_probed]
    report(
        f"agents: the whole stream, agents at --send-every {SEND_EVERY_S}, events/s",
        f"{whole_events / WHOLE_S:,.0f}",
        f"stream {RATES.total_per_s(CONFIG):,.0f}",
        f"{len(whole):,} POSTs in {WHOLE_S} s; POST p95 {percentile(whole_latencies, 95) * 1000:.0f} ms; done "
        f"{whole_done - whole_202:.1f} s after the last POST; {whole_cores:.2f} of {os.cpu_count()} cores busy; the "
        f"agents' events {agents_events / WHOLE_S:,.0f}/s of the fleet's {fleet_agents:,.0f} (each at its own phase)",
    )
    report(
        "agents: the whole stream, an agent's Xid 79, 202 to incident, p50 / p95",
        f"{percentile(whole_probes, 50) * 1000:.0f} / {percentile(whole_probes, 95) * 1000:.0f} ms",
        bound=f"{BOUND_P95_S * 1000:.0f} ms",
        note=f"{len(whole_probes)} probes; not asserted: measured to see whether one machine carries it",
    )
    assert p95 < BOUND_P95_S
