"""GET /metrics on the loaded 54-day, 16,384-GPU run (issue 21 bound: a scrape under 50 ms at this scale).

In-process (Django's test client, a metrics:read token, no socket: the server's own time), CALLS scrapes each way:
- recomputed: the answer expired (METRICS_CACHE_S, 10 s, is shorter than any usual scrape interval), the 24 h goodput
  still kept (METRICS_GOODPUT_CACHE_S, 60 s) and the events counted on from the last count: what nearly every scrape
  costs. The bound applies to its p95.
- cold: nothing kept, so the goodput of every run over 24 h and the count of the whole event log are computed: what
  the first scrape after a worker starts costs, and one scrape a minute after that for the goodput part. Reported
  against the bound, not held to it.
- cached: inside METRICS_CACHE_S.
Baseline, timed the same way in the same run: the overview's 10 s figures refresh (`?part=live`), which reads the
same 24 h goodput and open incidents for a person.
"""

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.test import Client

from fleetops.console import metrics
from fleetops.roles import VIEWER
from runs.models import ApiToken

from .conftest import api_token, median_p95_ms, report, timed

BOUND_MS = 50  # p95 of a recomputed scrape (issue 21)
CALLS = 30


@pytest.fixture(scope="module")
def token(loaded_run):
    value = api_token("bench-metrics", ["metrics:read"])
    yield value
    ApiToken.objects.filter(name="bench-metrics").delete()


@pytest.fixture(scope="module")
def viewer(loaded_run):
    user, _ = User.objects.get_or_create(username="bench-metrics-viewer")
    user.groups.add(Group.objects.get(name=VIEWER))
    client = Client()
    client.force_login(user)
    yield client
    user.delete()


def test_a_scrape_at_the_benchmark_scale(token, viewer):
    client, header = Client(), {"Authorization": f"Bearer {token}"}

    def scrape():
        response = client.get("/metrics", headers=header)
        assert response.status_code == 200

    def recomputed():
        cache.delete(metrics.TEXT_KEY)
        scrape()

    def cold():
        cache.delete_many([metrics.TEXT_KEY, metrics.GOODPUT_KEY, metrics.EVENTS_KEY])
        scrape()

    def overview_live():
        response = viewer.get("/?part=live", headers={"HX-Request": "true"})
        assert response.status_code == 200

    cold()  # the first: connections, the run's cached timeline
    baseline = median_p95_ms(timed(overview_live, CALLS))
    cold_ms = median_p95_ms(timed(cold, CALLS // 3))
    recomputed_ms = median_p95_ms(timed(recomputed, CALLS))
    cached_ms = median_p95_ms(timed(scrape, CALLS))
    lines = scrape_lines(client, header)
    versus = f"overview figures {baseline[0]:.1f} / {baseline[1]:.1f} ms"
    report(
        "metrics: recomputed scrape (median / p95)",
        f"{recomputed_ms[0]:.1f} / {recomputed_ms[1]:.1f} ms",
        f"{recomputed_ms[1] / baseline[1]:.2f}x the {versus}; {lines:,} lines",
        bound=f"{BOUND_MS} ms p95",
    )
    report(
        "metrics: cold scrape, nothing kept (median / p95)",
        f"{cold_ms[0]:.1f} / {cold_ms[1]:.1f} ms",
        f"{cold_ms[1] / baseline[1]:.2f}x the {versus}; a worker's first scrape, and the goodput once a minute",
        bound=f"{BOUND_MS} ms (not held)",
    )
    report("metrics: cached scrape (median / p95)", f"{cached_ms[0]:.2f} / {cached_ms[1]:.2f} ms", "", "inside 10 s")
    assert recomputed_ms[1] < BOUND_MS, f"a recomputed scrape's p95 {recomputed_ms[1]:.1f} ms is over {BOUND_MS} ms"


def scrape_lines(client, header) -> int:
    return client.get("/metrics", headers=header).content.count(b"\n")
