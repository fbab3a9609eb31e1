"""The fleet's failure rate behind every MTBF and advised interval counts the record up to `now` on both sides
(issue 17: one figure, one source, its window said): a report made as of a past moment counts neither the failures
nor the GPU-hours after it."""

from datetime import UTC, datetime, timedelta

import pytest

from runs.models import Interruption, Run
from runs.selectors import fleet_failure_rate_get

pytestmark = pytest.mark.django_db
T = datetime(2026, 3, 1, tzinfo=UTC)


def test_the_rate_counts_failures_and_gpu_hours_up_to_now_only():
    run = Run.objects.create(name="r", gpu_count=100, started_at=T, ended_at=T + timedelta(hours=20))
    for hours in (5, 15):
        Interruption.objects.create(
            run=run, number=hours, fault_at=T + timedelta(hours=hours), detected_at=T + timedelta(hours=hours)
        )
    Run.objects.create(name="later", gpu_count=100, started_at=T + timedelta(hours=30))
    at_ten = fleet_failure_rate_get(now=T + timedelta(hours=10))
    assert (at_ten.failures, at_ten.gpu_hours) == (1, 1_000)  # not 2 failures over 1,000 GPU-hours
    at_forty = fleet_failure_rate_get(now=T + timedelta(hours=40))
    assert (at_forty.failures, at_forty.gpu_hours) == (2, 2_000 + 1_000)
