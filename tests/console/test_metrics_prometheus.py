"""/metrics as Prometheus and Grafana see it: a real Prometheus scrapes FleetOps with its token, the figures it stores
are the API's, and every expression of contrib/grafana's dashboard names metrics FleetOps exports and is one
Prometheus evaluates.

The Prometheus tests need Debian's `prometheus` (tests/promstack.py): skipped on a laptop without it, a failure
under CI=true. The dashboard's names are checked everywhere.
"""

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from runs.domain.cloudevents import format_time
from tests.conftest import make_token
from tests.promstack import query, scrape_config
from tests.services import wait_for
from tests.stories import at, failure_and_restart

DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana" / "fleetops-dashboard.json"
# Grafana's own variables, as a Prometheus query would get them once Grafana has filled them in.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$cluster": ".*"}
PROMQL_WORDS = {"sum", "by", "rate", "increase", "without", "max", "min", "avg", "count"}


def exported_names(token: str) -> set[str]:
    """The sample names /metrics can hold: each family's name, a counter's with `_total`."""
    body = Client().get("/metrics", headers={"Authorization": f"Bearer {token}"}).content.decode()
    families = list(text_string_to_metric_families(body))
    assert families
    return {f"{f.name}_total" if f.type == "counter" else f.name for f in families}


def panel_expressions() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of every panel."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def grafana_filled(expression: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    return expression


def test_every_panel_of_the_dashboard_names_only_metrics_fleetops_exports(db):
    exported = exported_names(make_token("prometheus", ["metrics:read"]))
    expressions = panel_expressions()
    assert len(expressions) >= 20
    named = set()
    for title, expression in expressions:
        names = set(re.findall(r"\bfleetops_[a-z0-9_]+", expression))
        assert names, f"{title!r} names no FleetOps metric: {expression}"
        assert names <= exported, f"{title!r} names what /metrics does not export: {sorted(names - exported)}"
        assert "$" not in grafana_filled(expression), f"{title!r} uses a variable the dashboard does not define"
        named |= names
    assert {"fleetops_fleet_goodput_ratio", "fleetops_gpus_idle", "fleetops_incidents_open"} <= named


@pytest.fixture
def story_at_100_min(post, settings):
    """The failure-and-restart story up to +100 min, and the clock there (ticking: Prometheus lives in real time)."""
    settings.METRICS_EVENTS_SETTLE_S = 0.0
    with time_machine.travel(at(100), tick=False):
        post(failure_and_restart()[:-1])
    with time_machine.travel(at(100), tick=True):
        yield


@pytest.mark.django_db(transaction=True)
def test_a_real_prometheus_scrapes_the_figures_and_evaluates_every_panel(
    story_at_100_min, live_server, prometheus_start, reader
):
    token = make_token("prometheus", ["metrics:read"])
    target = scrape_config("fleetops", f"{live_server.url}/metrics", authorization={"credentials": token})
    prometheus = prometheus_start(scrape_configs=[target])

    def scraped():
        up = query(prometheus.url, 'up{job="fleetops"}')
        return up and up[0]["value"][1] == "1" and query(prometheus.url, "fleetops_run_goodput_ratio")

    stored = wait_for(scraped, timeout=30, what=f"Prometheus scraping /metrics\n{prometheus.log()}")
    # The clock ticks: the API is asked for the 24 h that ended when /metrics computed the figure.
    (computed,) = query(prometheus.url, 'fleetops_metrics_computed_timestamp_seconds{part="goodput"}')
    until = datetime.fromtimestamp(float(computed["value"][1]), UTC)
    window = {
        "since": format_time(until - timedelta(hours=24), "microseconds"),
        "until": format_time(until, "microseconds"),
    }
    api = reader.get("/api/v1/runs/r1/goodput", window).json()
    assert [(s["metric"]["run"], s["metric"]["window"]) for s in stored] == [("r1", "24h")]
    assert float(stored[0]["value"][1]) == pytest.approx(api["goodput"], rel=1e-9)
    (runs,) = query(prometheus.url, 'sum(fleetops_run_badput_gpu_seconds{window="24h"})')
    (fleet,) = query(prometheus.url, 'sum(fleetops_fleet_badput_gpu_seconds{window="24h"})')
    assert float(runs["value"][1]) == pytest.approx(float(fleet["value"][1]), rel=1e-9), "the runs add up to the fleet"
    (idle,) = query(prometheus.url, "fleetops_gpus_idle")
    assert float(idle["value"][1]) >= 0

    # A token without the scope is refused: Prometheus marks such a target down.
    refused = scrape_config(
        "refused", f"{live_server.url}/metrics", authorization={"credentials": make_token("r", ["read"])}
    )
    second = prometheus_start(scrape_configs=[refused])
    down = wait_for(lambda: query(second.url, 'up{job="refused"}'), timeout=30, what="the refused target's up")
    assert down[0]["value"][1] == "0"

    for _title, expression in panel_expressions():
        query(prometheus.url, grafana_filled(expression))  # Prometheus' own parser and evaluator: an error fails
    for title, expression in panel_expressions():
        if "fleetops_fleet_goodput_ratio" in expression or "fleetops_run_goodput_ratio" in expression:
            assert query(prometheus.url, grafana_filled(expression)), f"{title!r} shows nothing"
