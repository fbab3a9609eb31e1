"""Growth curve: ingest, goodput and page time at 1x, 4x and 16x the demo fleet; the cost per unit must not grow
faster than linearly (16x's cost per unit at most GROWTH_BOUND times 1x's).

The demo fleet is what `manage.py load_demo` builds: one 256-GPU run on its own cluster, failing at ten times Llama
3's rate. Here it runs DAYS days (the demo's three weeks at 16x would take an hour to ingest on two CPUs); a k-times
fleet is k such runs on k clusters, their events interleaved by time as a fleet's agents would send them. Each
scale starts from an empty record in a database of this benchmark's own (fleetops_bench_growth, created and
dropped here: the other benchmarks' database is left as it is).

Units: ingest, per event (in-process `events_ingest`, 5,000 a batch, applied and detected on commit, as
`manage.py simulate --apply` does); fleet goodput (`selectors.fleet_goodput_get` over the last 7 days, what the
overview and the fleet page compute), per GPU; the overview page, per GPU (it shows every node); a run page, per
page (one run, whatever the fleet's size).
"""

import dataclasses
import statistics
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from fleetops.celery import app as celery_app
from runs import selectors
from runs.domain.demo import demo_config
from runs.domain.simulator import simulate
from runs.management.commands.simulate import ingest
from runs.models import Event, Run

from .conftest import own_database, report, say

DATABASE = "fleetops_bench_growth"  # ours: created and dropped by this benchmark
SCALES = (1, 4, 16)
DAYS = 3.0
GROWTH_BOUND = 1.5  # 16x's cost per unit against 1x's: linear growth plus noise
CALLS = 5


def fleet_events(scale: int, *, now) -> list[dict]:
    """`scale` demo runs, each on its own cluster and nodes, interleaved by time."""
    events = []
    for i in range(scale):
        config = dataclasses.replace(
            demo_config(now=now, seed=i + 1, days=DAYS),
            cluster=f"growth-{i:02d}",
            run=f"growth-run-{i:02d}",
            source=f"bench/growth-{i:02d}",
        )
        events += simulate(config)
    events.sort(key=lambda event: event["time"])
    return events


@pytest.fixture(scope="module")
def growth_database(bench_database):
    """A fresh database of our own for the module, dropped afterwards; applied and detected in-process."""
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True  # apply and detect in-process, as `manage.py simulate --apply` does
    try:
        with own_database(DATABASE, fresh=True):
            yield
    finally:
        celery_app.conf.task_always_eager = eager


def _median_s(call, calls: int = CALLS) -> float:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


@dataclasses.dataclass(frozen=True)
class Costs:
    scale: int
    events: int
    gpus: int
    ingest_s: float
    goodput_s: float
    overview_s: float
    run_page_s: float

    def per_unit(self) -> dict[str, float]:
        """Milliseconds per unit: per event, per GPU, per GPU, per page."""
        return {
            "ingest ms/event": 1000 * self.ingest_s / self.events,
            "goodput ms/GPU": 1000 * self.goodput_s / self.gpus,
            "overview ms/GPU": 1000 * self.overview_s / self.gpus,
            "run page ms/page": 1000 * self.run_page_s,
        }


def _measure(scale: int, client: Client) -> Costs:
    call_command("flush", verbosity=0, interactive=False)
    user = get_user_model().objects.create_superuser("growth", password="growth-bench-pass")
    client.force_login(user)
    now = timezone.now()
    events = fleet_events(scale, now=now)
    started = time.perf_counter()
    delivery = ingest(events)
    ingest_s = time.perf_counter() - started
    assert delivery.stored == len(events) and not Event.objects.filter(applied_at__isnull=True).exists()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")  # what autovacuum does a minute after a load, kept out of the timings
    gpus = sum(Run.objects.values_list("gpu_count", flat=True))
    assert gpus == 256 * scale
    since = now - timedelta(days=7)
    goodput_s = _median_s(lambda: selectors.fleet_goodput_get(since=since, until=now, now=now))

    def get(url: str) -> None:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)

    get("/")  # the first request of a scale loads the templates' caches
    overview_s = _median_s(lambda: get("/"))
    run_page_s = _median_s(lambda: get("/runs/growth-run-00"))
    costs = Costs(scale, len(events), gpus, ingest_s, goodput_s, overview_s, run_page_s)
    say(
        f"{scale}x: {len(events):,} events, {gpus:,} GPUs; ingest {ingest_s:.1f} s ({len(events) / ingest_s:,.0f}/s), "
        f"goodput {1000 * goodput_s:.1f} ms, overview {1000 * overview_s:.0f} ms, run page {1000 * run_page_s:.0f} ms"
    )
    return costs


def test_cost_grows_no_faster_than_the_fleet(growth_database):
    client = Client()
    _measure(1, client)  # warm-up: imports, first queries, caches; not counted
    measured = {scale: _measure(scale, client) for scale in SCALES}
    base = measured[SCALES[0]].per_unit()
    over = []
    for scale in SCALES:
        for unit, value in measured[scale].per_unit().items():
            ratio = value / base[unit]
            report(f"growth {scale:>2}x: {unit}", f"{value:.3f}", f"1x {base[unit]:.3f}", note=f"{ratio:.2f}x")
            if scale == SCALES[-1] and ratio > GROWTH_BOUND:
                over.append(f"{unit}: {ratio:.2f}x 1x's at {scale}x")
    assert not over, f"cost per unit grows faster than the fleet: {over}"
