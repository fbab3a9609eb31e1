"""An Xid storm: 100,000 gpu.xid events from the 24 nodes of one rack within 60 s, posted through gunicorn by one
sender per node (as node agents do: small batches, 100 events a POST, each agent on its own connection), while
real Celery workers apply and detect.

Asserted: no answer other than 202 (no 5xx, nothing refused), every event stored exactly once (counted by source
and id), every Xid counted once on its GPU and once in the alerts, and one incident for the rack. Reported: the
API's p50/p99 latency per POST, how long the senders took, and how long applying and detection took to drain.
The baseline is the same POSTs with no storm around them: one sender alone, before the storm (after a warm-up).
"""

import json
import threading
import time
import uuid
from datetime import UTC, datetime

from django.db.models import Sum

from incidents.models import Alert, Incident
from runs.models import GPU, Event, Node

from .conftest import api_token, report, say
from .servers import Client, celery_workers, gunicorn, percentile, purge_queues

EVENTS = 100_000
NODES = 24  # one rack
GPUS = 8
PER_POST = 100
SECONDS = 60.0
SERVER_WORKERS = 2
CELERY_WORKERS = 2
XIDS = (79, 74, 48)  # fell off the bus, NVLink, double-bit ECC: each one an alert, never only counted
BASELINE_POSTS = 60
WARM_UP = 10  # the first POSTs of each gunicorn worker import and connect: not part of the calm baseline


def _batches(prefix: str, source: str, node: int, count: int) -> list[list[dict]]:
    hostname = f"{prefix}-n{node:02d}"
    events = [
        {
            "specversion": "1.0",
            "id": f"{hostname}-{i:06d}",
            "source": source,
            "type": "gpu.xid",
            "data": {"node": hostname, "gpu": i % GPUS, "xid": XIDS[i % GPUS % len(XIDS)], "message": "storm"},
        }
        for i in range(count)
    ]
    return [events[i : i + PER_POST] for i in range(0, count, PER_POST)]


def _body(batch: list[dict]) -> bytes:
    """The batch as an agent sends it: stamped with the time it saw the Xids (now)."""
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return json.dumps([dict(event, time=now) for event in batch]).encode()


def _send(client: Client, batches: list[list[dict]], started: float, latencies: list, statuses: list) -> None:
    """POST the batches evenly over SECONDS from `started` (at once when behind), timing each."""
    for k, batch in enumerate(batches):
        wait = started + SECONDS * k / len(batches) - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        body = _body(batch)
        sent = time.perf_counter()
        status, answer = client.post_events(body)
        latencies.append(time.perf_counter() - sent)
        statuses.append((status, answer[:300] if status != 202 else b""))


def _drained(source: str) -> bool:
    return not Event.objects.filter(source=source).filter(applied_at__isnull=True).exists() and not (
        Event.objects.filter(source=source, detected_at__isnull=True).exists()
    )


def test_xid_storm_from_one_rack(bench_database):
    prefix = f"storm-{uuid.uuid4().hex[:8]}"
    source, rack = f"fleetops/{prefix}", f"{prefix}-rack"
    # The rack's inventory, as an admin or a CMDB import enters it: detection groups by it.
    Node.objects.bulk_create([Node(hostname=f"{prefix}-n{n:02d}", rack=rack) for n in range(NODES)])
    token = api_token("bench-storm", ["events:write", "read"])
    per_node = EVENTS // NODES
    counts = [per_node + (1 if n < EVENTS % NODES else 0) for n in range(NODES)]
    batches = [_batches(prefix, source, n, counts[n]) for n in range(NODES)]
    baseline = _batches(f"{prefix}-calm", source, 0, BASELINE_POSTS * PER_POST)
    purge_queues()
    latencies: list[float] = []
    statuses: list[tuple[int, bytes]] = []
    calm: list[float] = []
    try:
        with gunicorn(workers=SERVER_WORKERS) as url, celery_workers(CELERY_WORKERS):
            client = Client(url, token)
            for k, batch in enumerate(baseline):  # the same kind of POST, one at a time, nothing else going on
                body = _body(batch)
                sent = time.perf_counter()
                status, answer = client.post_events(body)
                assert status == 202, answer[:300]
                if k >= WARM_UP:
                    calm.append(time.perf_counter() - sent)
            client.close()
            while not _drained(source):
                time.sleep(0.1)

            clients = [Client(url, token) for _ in range(NODES)]
            started = time.perf_counter()
            senders = [
                threading.Thread(target=_send, args=(clients[n], batches[n], started, latencies, statuses))
                for n in range(NODES)
            ]
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join()
            sent_s = time.perf_counter() - started
            for client in clients:
                client.close()
            deadline = time.perf_counter() + 900
            while not _drained(source):
                assert time.perf_counter() < deadline, "applying and detection did not drain in 900 s"
                time.sleep(0.2)
            drained_s = time.perf_counter() - started
    finally:
        purge_queues()

    refused = [(s, a) for s, a in statuses if s != 202]
    assert not refused, refused[:5]
    assert len(statuses) == sum(map(len, batches))
    storm = Event.objects.filter(source=source, node_name__startswith=f"{prefix}-n")
    assert storm.count() == EVENTS
    assert storm.values("event_id").distinct().count() == EVENTS
    gpus = GPU.objects.filter(node__rack=rack)
    assert gpus.count() == NODES * GPUS
    assert gpus.aggregate(n=Sum("xid_count"))["n"] == EVENTS  # each Xid counted once on its GPU
    incidents = Incident.objects.filter(nodes__rack=rack).distinct()
    assert incidents.count() == 1, list(incidents.values_list("group_key", flat=True))
    incident = incidents.get()
    assert incident.group_key == f"rack:{rack}"
    alerts = Alert.objects.filter(node__rack=rack)
    assert alerts.count() == NODES * GPUS  # one alert per GPU and Xid: repeats are counted into it
    assert alerts.aggregate(n=Sum("count"))["n"] == EVENTS  # and every Xid is counted once in the alerts
    assert set(alerts.values_list("incident_id", flat=True)) == {incident.pk}

    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    calm_p50, calm_p99 = percentile(calm, 50), percentile(calm, 99)
    say(
        f"storm: {EVENTS:,} Xids from {NODES} nodes of {rack} in {len(statuses)} POSTs of {PER_POST}; "
        f"{SERVER_WORKERS} gunicorn workers, {CELERY_WORKERS} Celery workers (all queues)"
    )
    report(
        f"storm: POST of {PER_POST} Xids, p50",
        f"{p50 * 1000:.0f} ms",
        f"calm {calm_p50 * 1000:.0f} ms",
        f"{p50 / calm_p50:.1f}x calm; no 5xx",
    )
    report(
        f"storm: POST of {PER_POST} Xids, p99",
        f"{p99 * 1000:.0f} ms",
        f"calm {calm_p99 * 1000:.0f} ms",
        f"{p99 / calm_p99:.1f}x calm",
    )
    report(
        "storm: sent",
        f"{sent_s:.1f} s",
        f"planned {SECONDS:.0f} s",
        f"{EVENTS / sent_s:,.0f} events/s accepted",
    )
    report(
        "storm: applied and detected, from the first POST",
        f"{drained_s:.1f} s",
        f"sent in {sent_s:.1f} s",
        f"1 incident, {NODES * GPUS} alerts, {EVENTS:,} Xids counted once",
    )
