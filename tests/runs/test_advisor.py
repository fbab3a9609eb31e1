"""The checkpoint advisor (runs/domain/advisor.py): docs/DOMAIN.md sections 1 and 3 as test vectors."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.domain import advisor
from runs.domain.advisor import (
    chi2_cdf,
    chi2_ppf,
    curve,
    daly,
    failure_rate,
    floor,
    goodput_at_interval,
    job_mtbf_range_s,
    job_mtbf_s,
    optimum,
    pareto_front,
    restart_cost_s,
    waste,
    write_cost_s,
    young,
)

MINUTE, HOUR = 60.0, 3600.0
# docs/DOMAIN.md section 1: Llama 3 405B, 419 unexpected interruptions over 16,384 GPUs for 54 days.
LLAMA3_GPU_HOURS = 16_384 * 54 * 24


def test_it_computes_youngs_interval():
    # docs/DOMAIN.md section 3: delta = 1 min, M = 180 min gives sqrt(360) = 18.97 min.
    assert round(young(delta_s=MINUTE, mtbf_s=180 * MINUTE) / MINUTE, 2) == 18.97


@pytest.mark.parametrize(("mtbf_min", "expected_min"), [(24 * 60, 116.7), (6 * 60, 56.7), (15, 9.14)])
def test_it_reproduces_dalys_test_vectors(mtbf_min, expected_min):
    # Daly's vectors, R = 10 min, delta = 5 min. R does not enter the optimum. Even M = 15 min uses the
    # delta < 2M branch (5 < 30): sqrt(150) (1 + sqrt(1/6)/3 + 1/54) - 5 = 9.14; the tau = M branch would say 15.
    tau = daly(delta_s=5 * MINUTE, mtbf_s=mtbf_min * MINUTE) / MINUTE
    digits = 2 if expected_min < 10 else 1
    assert round(tau, digits) == expected_min


def test_it_uses_the_mtbf_once_a_write_costs_twice_the_mtbf():
    assert daly(delta_s=40 * MINUTE, mtbf_s=15 * MINUTE) == 15 * MINUTE
    assert daly(delta_s=30 * MINUTE, mtbf_s=15 * MINUTE) == 15 * MINUTE  # the boundary itself
    # Just below 2M the formula still holds: sqrt(600) (1 + sqrt(2/3)/3 + 2/27) - 20 = 12.98 min, not 15.
    assert round(daly(delta_s=20 * MINUTE, mtbf_s=15 * MINUTE) / MINUTE, 2) == 12.98


def test_it_splits_the_waste_evenly_at_youngs_optimum():
    # docs/DOMAIN.md section 3: with delta = 1 min, M = 180 min each of the first two terms is 5.3%, W = 10.5% + R/M.
    delta, mtbf, restart = MINUTE, 180 * MINUTE, 10 * MINUTE
    tau = young(delta_s=delta, mtbf_s=mtbf)
    assert round(100 * delta / tau, 1) == 5.3
    assert round(100 * (tau / 2) / mtbf, 1) == 5.3
    total = waste(tau, delta_s=delta, mtbf_s=mtbf, restart_s=restart)
    assert round(100 * (total - restart / mtbf), 1) == 10.5
    assert total == pytest.approx(floor(delta_s=delta, mtbf_s=mtbf, restart_s=restart), rel=1e-12)
    assert goodput_at_interval(tau, delta_s=delta, mtbf_s=mtbf, restart_s=restart) == pytest.approx(1 - total)


def test_it_clips_goodput_to_zero_when_waste_exceeds_the_run():
    assert goodput_at_interval(1.0, delta_s=MINUTE, mtbf_s=HOUR, restart_s=0) == 0
    assert goodput_at_interval(HOUR, delta_s=0, mtbf_s=math.inf, restart_s=0) == 1


def test_it_finds_the_optimum_numerically_at_youngs_interval():
    tau, least = optimum(delta_s=20, mtbf_s=12.4 * HOUR, restart_s=10 * MINUTE)

    assert tau == pytest.approx(young(delta_s=20, mtbf_s=12.4 * HOUR), rel=1e-6)
    assert least == pytest.approx(floor(delta_s=20, mtbf_s=12.4 * HOUR, restart_s=10 * MINUTE), rel=1e-12)
    with pytest.raises(ValueError):
        optimum(delta_s=0, mtbf_s=HOUR, restart_s=0)


def test_it_draws_the_waste_curve_around_the_optimum():
    points = curve(delta_s=MINUTE, mtbf_s=180 * MINUTE, restart_s=0, points=21, span=10)
    taus = [tau for tau, _ in points]
    wastes = [w for _, w in points]

    assert len(points) == 21
    assert taus == sorted(taus)
    assert taus[0] == pytest.approx(young(delta_s=MINUTE, mtbf_s=180 * MINUTE) / 10, rel=1e-6)
    assert taus[-1] == pytest.approx(young(delta_s=MINUTE, mtbf_s=180 * MINUTE) * 10, rel=1e-6)
    assert taus[10] / taus[9] == pytest.approx(taus[1] / taus[0])  # log-spaced
    assert min(wastes) == wastes[10]  # the optimum sits in the middle
    assert wastes[0] > wastes[5] > wastes[10] < wastes[15] < wastes[20]


def test_it_keeps_only_non_dominated_strategies_on_the_front():
    # Candidates: sync to storage (6 min), async sharded (20 s), in-memory (2 s with a 2-minute restart),
    # and one that writes more often than async sharded yet wastes more (a slow 45-minute restart).
    mtbf, restart = 12.4 * HOUR, 10 * MINUTE
    front = pareto_front(write_costs_s=[360, 20, 20, (2, 120), (10, 45 * MINUTE)], mtbf_s=mtbf, restart_s=restart)

    assert [(p.delta_s, p.restart_s) for p in front] == [(2, 120), (20, restart), (360, restart)]
    assert [p.interval_s for p in front] == sorted(p.interval_s for p in front)
    assert [p.waste for p in front] == sorted(p.waste for p in front)
    assert front[1].waste == pytest.approx(floor(delta_s=20, mtbf_s=mtbf, restart_s=restart))


# -- chi-square and the failure rate -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "dof", "expected", "places"),
    [
        # Printed chi-square tables.
        (0.05, 10, 3.9403, 4),
        (0.95, 10, 18.307, 3),
        (0.95, 2, 5.9915, 4),
        (0.95, 1, 3.8415, 4),
        (0.95, 12, 21.026, 3),
        (0.99, 20, 37.566, 3),
        (0.025, 1, 0.000982, 6),
        (0.975, 1, 5.0239, 4),
        # scipy.stats.chi2.ppf(0.05, 838) = 771.8174 (scipy 1.17, computed once outside the project).
        (0.05, 838, 771.8174, 4),
    ],
)
def test_it_matches_chi_square_tables(p, dof, expected, places):
    assert round(chi2_ppf(p, dof), places) == pytest.approx(expected, abs=10**-places)


@pytest.mark.parametrize("dof", [200, 838, 840, 5000])
@pytest.mark.parametrize("p", [0.05, 0.5, 0.95])
def test_it_agrees_with_wilson_hilferty_for_many_degrees_of_freedom(p, dof):
    z = {0.05: -1.6448536269514722, 0.5: 0.0, 0.95: 1.6448536269514722}[p]
    approximation = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2_ppf(p, dof) == pytest.approx(approximation, abs=0.5)


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 60), x=st.floats(0.01, 200))
def test_it_matches_the_poisson_closed_form(k, x):
    # For 2k degrees of freedom, P(chi2 <= x) = P(Poisson(x/2) >= k) = 1 - exp(-x/2) sum_{j<k} (x/2)^j / j!.
    mean = x / 2
    below = sum(math.exp(-mean + j * math.log(mean) - math.lgamma(j + 1)) for j in range(k))
    assert chi2_cdf(x, 2 * k) == pytest.approx(1 - below, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(p=st.floats(1e-6, 1 - 1e-6), dof=st.integers(1, 2000))
def test_it_inverts_the_chi_square_cdf(p, dof):
    assert chi2_cdf(chi2_ppf(p, dof), dof) == pytest.approx(p, abs=1e-10)


def test_it_derives_llama3_reliability_numbers():
    # docs/DOMAIN.md section 1: per-GPU MTBF 50,700 GPU-hours, job MTBF 3.09 h, and 12.4 h at 4,096 GPUs.
    estimate = failure_rate(failures=419, gpu_hours=LLAMA3_GPU_HOURS)

    assert round(estimate.mtbf_gpu_hours, -2) == 50_700
    assert round(job_mtbf_s(rate_per_gpu_hour=estimate.rate, gpus=16_384) / HOUR, 2) == 3.09
    assert round(job_mtbf_s(rate_per_gpu_hour=estimate.rate, gpus=4_096) / HOUR, 1) == 12.4


def test_it_brackets_the_failure_rate_with_a_chi_square_interval():
    estimate = failure_rate(failures=419, gpu_hours=LLAMA3_GPU_HOURS, confidence=0.90)

    assert estimate.lower == pytest.approx(chi2_ppf(0.05, 838) / (2 * LLAMA3_GPU_HOURS))
    assert estimate.upper == pytest.approx(chi2_ppf(0.95, 840) / (2 * LLAMA3_GPU_HOURS))
    assert estimate.lower < estimate.rate < estimate.upper
    shortest, longest = job_mtbf_range_s(estimate=estimate, gpus=16_384)
    assert round(shortest / HOUR, 2) == 2.85 and round(longest / HOUR, 2) == 3.36  # around 3.09 h


def test_it_gives_the_textbook_poisson_interval_for_five_failures():
    # The exact 90% interval for 5 events is (1.970, 10.513) events per unit exposure.
    estimate = failure_rate(failures=5, gpu_hours=1.0)
    assert (round(estimate.lower, 3), round(estimate.upper, 3)) == (1.970, 10.513)


def test_it_bounds_the_rate_above_even_without_failures():
    estimate = failure_rate(failures=0, gpu_hours=1000.0)

    assert (estimate.rate, estimate.lower) == (0, 0)
    assert estimate.upper == pytest.approx(-math.log(0.05) / 1000)  # chi2 with 2 dof is exponential
    assert estimate.mtbf_gpu_hours == math.inf
    assert job_mtbf_range_s(estimate=estimate, gpus=8)[1] == math.inf


def test_it_narrows_the_interval_as_confidence_drops():
    wide = failure_rate(failures=10, gpu_hours=5000, confidence=0.99)
    narrow = failure_rate(failures=10, gpu_hours=5000, confidence=0.50)
    assert wide.lower < narrow.lower < narrow.rate < narrow.upper < wide.upper


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failures": -1, "gpu_hours": 10},
        {"failures": 1, "gpu_hours": 0},
        {"failures": 1, "gpu_hours": 1, "confidence": 1},
    ],
)
def test_it_refuses_meaningless_rate_inputs(kwargs):
    with pytest.raises(ValueError):
        failure_rate(**kwargs)


def test_it_takes_medians_unless_overridden():
    assert write_cost_s([20.0, 25.0, None, 400.0]) == 25.0  # one slow write does not set the policy
    assert write_cost_s([20.0, 25.0], override=5.0) == 5.0
    assert write_cost_s([]) is None
    assert restart_cost_s([600.0, 900.0, 7200.0, 660.0]) == 780.0
    assert restart_cost_s([float("nan")], override=None) is None


# --- shrink and continue, or wait for a spare ------------------------------------------------------------------------


def test_shrinking_pays_once_the_wait_for_a_spare_outlasts_a_restart():
    # 256 nodes, one lost, restarts of 10 min: waiting 2 h for a repaired node idles the whole job for 2 h 10 min;
    # shrinking idles it for two restarts and one node for the 2 h.
    choice = advisor.shrink_or_wait(nodes=256, lost=1, wait_s=7200, restart_s=600)
    assert choice.wait_cost == 256 * 7800 and choice.shrink_cost == 256 * 1200 + 7200
    assert choice.shrink and choice.saved == 256 * 7800 - (256 * 1200 + 7200)
    # A spare ready in 5 minutes: a second restart costs more than the wait.
    assert not advisor.shrink_or_wait(nodes=256, lost=1, wait_s=300, restart_s=600).shrink
    # The break-even is R = wait x (1 - lost/nodes): a 2-node job that lost one needs a wait of twice a restart.
    assert not advisor.shrink_or_wait(nodes=2, lost=1, wait_s=1199, restart_s=600).shrink
    assert advisor.shrink_or_wait(nodes=2, lost=1, wait_s=1201, restart_s=600).shrink
    # Nothing left to shrink to.
    assert not advisor.shrink_or_wait(nodes=1, lost=1, wait_s=10**6, restart_s=1).shrink
    with pytest.raises(ValueError):
        advisor.shrink_or_wait(nodes=4, lost=0, wait_s=1, restart_s=1)
