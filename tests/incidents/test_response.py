"""Response metrics and severity (incidents/domain/response.py): docs/DOMAIN.md section 5."""

import statistics
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from incidents.domain.response import (
    IncidentTimes,
    more_severe,
    percentile,
    response_metrics,
    severity_from_impact,
    weekly_response,
)

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # a Monday


def incident(start: datetime, detect_s: float, ack_s=None, mitigate_s=None, resolve_s=None) -> IncidentTimes:
    """Times as offsets in seconds: detection and the others from the start, acknowledgement from detection."""
    detected = start + timedelta(seconds=detect_s)
    return IncidentTimes(
        started_at=start,
        detected_at=detected,
        acknowledged_at=None if ack_s is None else detected + timedelta(seconds=ack_s),
        mitigated_at=None if mitigate_s is None else start + timedelta(seconds=mitigate_s),
        resolved_at=None if resolve_s is None else start + timedelta(seconds=resolve_s),
    )


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


INCIDENTS = [
    incident(hours(0), 60, ack_s=30, mitigate_s=600, resolve_s=3_600),
    incident(hours(1), 120, ack_s=90, mitigate_s=1_800),
    incident(hours(2), 180),
    incident(hours(3), 240, ack_s=300),
    incident(hours(4), 600),
    incident(hours(-1), 9_999, ack_s=9_999),  # before the window
    incident(hours(5), 9_999, ack_s=9_999),  # starts at `until`: outside
]


def test_it_computes_means_and_percentiles_with_known_numbers():
    metrics = response_metrics(INCIDENTS, since=hours(0), until=hours(5))
    # MTTD over 60, 120, 180, 240, 600: mean 240; p50 180; p90 at position 3.6: 240 + 0.6 x 360 = 456.
    assert metrics["mttd"] == {"count": 5, "mean_s": 240.0, "p50_s": 180.0, "p90_s": pytest.approx(456.0)}
    # MTTA over 30, 90, 300: mean 140; p50 90; p90 at position 1.8: 90 + 0.8 x 210 = 258.
    assert metrics["mtta"] == {"count": 3, "mean_s": 140.0, "p50_s": 90.0, "p90_s": pytest.approx(258.0)}
    # MTTM over 600, 1800: mean and p50 1200; p90 at position 0.9: 600 + 0.9 x 1200 = 1680.
    assert metrics["mttm"] == {"count": 2, "mean_s": 1_200.0, "p50_s": 1_200.0, "p90_s": pytest.approx(1_680.0)}
    assert metrics["mttr"] == {"count": 1, "mean_s": 3_600.0, "p50_s": 3_600.0, "p90_s": 3_600.0}


def test_it_reports_nothing_for_an_empty_window():
    metrics = response_metrics(INCIDENTS, since=hours(100), until=hours(200))
    assert set(metrics) == {"mttd", "mtta", "mttm", "mttr"}
    assert all(m == {"count": 0, "mean_s": None, "p50_s": None, "p90_s": None} for m in metrics.values())


def test_it_counts_a_negative_duration_as_zero():
    # acknowledged by a person a minute before the detector fired
    early = incident(hours(0), 600, ack_s=-60)
    assert response_metrics([early], since=hours(0), until=hours(1))["mtta"]["mean_s"] == 0.0


def test_it_reports_per_iso_week_including_empty_weeks():
    wednesday = T0 + timedelta(days=2)
    incidents = [
        incident(T0, 100),  # Monday of week 1, before `since`: left out
        incident(wednesday + timedelta(hours=1), 60, ack_s=10),
        incident(T0 + timedelta(days=6, hours=14), 120),  # Sunday 23:00, still week 1
        incident(T0 + timedelta(days=14, hours=1), 300),  # week 3
    ]
    weeks = weekly_response(incidents, since=wednesday, until=T0 + timedelta(days=15))
    assert [monday for monday, _ in weeks] == [date(2025, 3, 3), date(2025, 3, 10), date(2025, 3, 17)]
    first, second, third = (metrics for _, metrics in weeks)
    assert (first["mttd"]["count"], first["mttd"]["mean_s"], first["mtta"]["count"]) == (2, 90.0, 1)
    assert second["mttd"]["count"] == 0
    assert (third["mttd"]["count"], third["mttd"]["p90_s"]) == (1, 300.0)


@pytest.mark.parametrize(
    ("gpus_idle", "runs_affected", "expected"),
    [
        (1024, 1, "SEV1"),
        (0, 2, "SEV1"),
        (1023, 1, "SEV2"),
        (256, 1, "SEV2"),
        (255, 1, "SEV3"),
        (1, 0, "SEV3"),
        (0, 1, "SEV3"),
        (0, 0, "SEV4"),
    ],
)
def test_it_grades_severity_by_impact(gpus_idle, runs_affected, expected):
    assert severity_from_impact(gpus_idle=gpus_idle, runs_affected=runs_affected) == expected


@pytest.mark.parametrize(
    ("lost", "expected"),
    [(1000.0, "SEV1"), (999.9, "SEV2"), (100.0, "SEV2"), (99.9, "SEV3"), (0.1, "SEV3"), (0.0, "SEV4")],
)
def test_it_grades_severity_by_gpu_hours_lost_too(lost, expected):
    # Nothing idle now, no run named: what the outage has cost grades it alone.
    assert severity_from_impact(gpus_idle=0, runs_affected=0, gpu_hours_lost=lost) == expected


def test_dollar_thresholds_grade_only_when_set():
    # 64 GPUs at $5 an hour burn $5.33 a minute: SEV3 by GPUs; with a $5 SEV2 threshold, SEV2.
    assert severity_from_impact(gpus_idle=64, runs_affected=1, cost_per_minute_usd=5.33) == "SEV3"
    assert severity_from_impact(gpus_idle=64, runs_affected=1, cost_per_minute_usd=5.33, sev2_usd_per_min=5) == "SEV2"
    assert severity_from_impact(gpus_idle=64, runs_affected=1, cost_per_minute_usd=5.33, sev1_usd_per_min=5) == "SEV1"


def test_more_severe_picks_the_worse():
    assert more_severe("SEV3", "SEV1") == more_severe("SEV1", "SEV3") == "SEV1"
    assert more_severe("SEV4", "SEV4") == "SEV4"


def test_it_takes_severity_thresholds_as_parameters():
    assert severity_from_impact(gpus_idle=64, runs_affected=1, sev1_gpus=64) == "SEV1"
    assert severity_from_impact(gpus_idle=64, runs_affected=1, sev2_gpus=64) == "SEV2"
    assert severity_from_impact(gpus_idle=0, runs_affected=2, sev1_runs=3) == "SEV3"


@given(st.lists(st.floats(0, 1e7), min_size=1, max_size=50))
def test_it_interpolates_percentiles_like_statistics_inclusive(values):
    deciles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else [values[0]] * 9
    assert percentile(values, 0.5) == pytest.approx(statistics.median(values))
    assert percentile(values, 0.9) == pytest.approx(deciles[8])
    assert min(values) <= percentile(values, 0.9) <= max(values)
