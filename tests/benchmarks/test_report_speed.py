"""The weekly reliability report over the whole simulated 54-day, 16,384-GPU run (issue bound: under 5 s).

Baseline, timed in the same run: the fleet goodput the report starts from (runs.selectors.fleet_goodput_get over
the same window), so the ratio says what the rest of the report (causes, MTBF, MTTx, nodes, advice) costs.
"""

import time

import pytest
from django.utils import timezone

from incidents.reports.services import report_build
from runs import selectors
from runs.models import Run

from .conftest import report

REPORT_BOUND_S = 5.0


@pytest.fixture(scope="module")
def window(loaded_run) -> dict:
    run = Run.objects.get(name=loaded_run.name)
    return {"since": run.started_at, "until": run.ended_at or timezone.now(), "now": timezone.now()}


def _best_of(call, times: int = 3) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def test_report_generation(window):
    baseline = _best_of(lambda: selectors.fleet_goodput_get(**window))
    built = _best_of(lambda: report_build(**window))
    report("report: fleet goodput over the 54 days (baseline)", f"{baseline:.2f} s")
    report(
        "report: the whole weekly report over the 54 days",
        f"{built:.2f} s",
        f"fleet goodput {baseline:.2f} s",
        f"{built / baseline:.1f}x the baseline",
        bound=f"{REPORT_BOUND_S:g} s",
    )
    assert built < REPORT_BOUND_S
