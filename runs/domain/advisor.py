"""The checkpoint advisor: how often to checkpoint, what it costs, and the failure rate it rests on.

docs/DOMAIN.md section 3. Pure: no Django import, standard library only (the chi-square quantile is computed
here rather than taken from scipy, which the project does not depend on).

Symbols: delta = blocking checkpoint cost, M = job MTBF, R = restart cost (detection + rescheduling +
reload), tau = checkpoint interval. All are seconds; waste and goodput are fractions of wall-clock time;
failure rates are per GPU-hour.
"""

import functools
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

_GOLDEN = (math.sqrt(5) - 1) / 2


def young(*, delta_s: float, mtbf_s: float) -> float:
    """Young's interval sqrt(2 delta M), seconds."""
    return math.sqrt(2 * delta_s * mtbf_s)


def daly(*, delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order interval, seconds; M itself once a write costs 2M or more.

    R does not appear: in Daly's model the restart cost shifts the waste but not where its minimum lies.
    """
    if delta_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = delta_s / (2 * mtbf_s)
    return young(delta_s=delta_s, mtbf_s=mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - delta_s


def waste(tau_s: float, *, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """First-order expected waste fraction W(tau) = delta/tau + (tau/2 + R)/M."""
    return delta_s / tau_s + (tau_s / 2 + restart_s) / mtbf_s


def floor(*, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """The least waste any interval can reach: sqrt(2 delta/M) + R/M (a fraction)."""
    return math.sqrt(2 * delta_s / mtbf_s) + restart_s / mtbf_s


def goodput_at_interval(tau_s: float, *, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """Expected goodput 1 - W(tau), clipped to [0, 1]."""
    return min(max(1 - waste(tau_s, delta_s=delta_s, mtbf_s=mtbf_s, restart_s=restart_s), 0.0), 1.0)


def optimum(*, delta_s: float, mtbf_s: float, restart_s: float) -> tuple[float, float]:
    """(interval seconds, waste) at the numeric minimum of W, found by golden-section search on log tau.

    W is convex in log tau, so the search cannot stop on a false minimum. It lands on Young's interval for
    this first-order W; it is kept numeric so that a richer waste model can replace W without a new formula.
    """
    _require_positive(delta_s=delta_s, mtbf_s=mtbf_s)
    tau = least_interval(
        lambda tau: waste(tau, delta_s=delta_s, mtbf_s=mtbf_s, restart_s=restart_s),
        around=young(delta_s=delta_s, mtbf_s=mtbf_s),
    )
    return tau, waste(tau, delta_s=delta_s, mtbf_s=mtbf_s, restart_s=restart_s)


def least_interval(cost, *, around: float, span: float = 10.0, tolerance: float = 1e-12) -> float:
    """The interval where `cost` (unimodal in log tau) is least, by golden-section search on log tau over
    [around e^-span, around e^span]."""
    lo, hi = math.log(around) - span, math.log(around) + span
    while hi - lo > tolerance:
        left, right = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
        if cost(math.exp(left)) < cost(math.exp(right)):
            hi = right
        else:
            lo = left
    return math.exp((lo + hi) / 2)


def curve(
    *, delta_s: float, mtbf_s: float, restart_s: float, points: int = 41, span: float = 10.0
) -> list[tuple[float, float]]:
    """(interval seconds, waste) on a log-spaced grid from optimum/span to optimum*span.

    An odd number of points puts the optimum itself in the middle of the grid.
    """
    if points < 2 or span <= 1:
        raise ValueError("a curve needs at least 2 points and a span above 1")
    best, _ = optimum(delta_s=delta_s, mtbf_s=mtbf_s, restart_s=restart_s)
    lo, hi = math.log(best / span), math.log(best * span)
    taus = [math.exp(lo + (hi - lo) * i / (points - 1)) for i in range(points)]
    return [(tau, waste(tau, delta_s=delta_s, mtbf_s=mtbf_s, restart_s=restart_s)) for tau in taus]


@dataclass(frozen=True)
class FrontPoint:
    """One checkpoint strategy at its best interval."""

    delta_s: float
    restart_s: float
    interval_s: float
    waste: float


def pareto_front(
    *, write_costs_s: Iterable[float | tuple[float, float]], mtbf_s: float, restart_s: float
) -> list[FrontPoint]:
    """Candidate strategies at their optimal interval, keeping only the non-dominated ones, by interval.

    A candidate is a write cost delta, or a (delta, R) pair for a strategy that also changes the restart
    cost (in-memory or peer checkpoints restore faster); a bare delta uses restart_s. The trade-off is
    waste against how often a checkpoint is written (storage traffic): a point is dominated when another
    writes no more often and wastes no more, and is strictly better in one. With one R, a smaller delta
    always means a shorter interval and less waste, so all distinct candidates stay on the front.
    """
    points = set()
    for candidate in write_costs_s:
        delta, restart = candidate if isinstance(candidate, tuple) else (candidate, restart_s)
        interval, least = optimum(delta_s=delta, mtbf_s=mtbf_s, restart_s=restart)
        points.add(FrontPoint(delta, restart, interval, least))
    front: list[FrontPoint] = []
    # Longest interval first: a point survives only if it wastes less than every point that writes less often.
    for point in sorted(points, key=lambda p: (-p.interval_s, p.waste)):
        if not front or point.waste < front[-1].waste:
            front.append(point)
    return front[::-1]


@dataclass(frozen=True)
class Advice:
    """The advisor's answer for one (delta, M, R), all in seconds; waste values are fractions."""

    delta_s: float
    mtbf_s: float
    restart_s: float
    young_s: float
    daly_s: float
    waste_at_young: float
    waste_at_daly: float
    floor: float
    current_s: float | None
    waste_at_current: float | None
    curve: list[tuple[float, float]]

    @property
    def in_range(self) -> bool:
        """Whether the first-order model has an answer: below a floor of 100%, some interval leaves the job time to
        train. At or past it, restarts and rewound work alone take more than the time between failures."""
        return self.floor < 1

    @property
    def goodput_at_daly(self) -> float:
        return min(max(1 - self.waste_at_daly, 0.0), 1.0)

    @property
    def goodput_at_current(self) -> float | None:
        return None if self.waste_at_current is None else min(max(1 - self.waste_at_current, 0.0), 1.0)


def advise(*, delta_s: float, mtbf_s: float, restart_s: float, current_s: float | None = None) -> Advice:
    """Young, Daly, the waste at each (and at the current interval), the floor and the W(tau) curve.

    delta_s and mtbf_s of at least MIN_COST_S: below it Young's interval can underflow to zero."""
    _require_positive(delta_s=delta_s, mtbf_s=mtbf_s)
    for name, value in (("delta_s", delta_s), ("mtbf_s", mtbf_s)):
        if value < MIN_COST_S:
            raise ValueError(f"{name} must be at least {MIN_COST_S} s, got {value}")
    costs = {"delta_s": delta_s, "mtbf_s": mtbf_s, "restart_s": restart_s}
    young_s, daly_s = young(delta_s=delta_s, mtbf_s=mtbf_s), daly(delta_s=delta_s, mtbf_s=mtbf_s)
    return Advice(
        **costs,
        young_s=young_s,
        daly_s=daly_s,
        waste_at_young=waste(young_s, **costs),
        waste_at_daly=waste(daly_s, **costs),
        floor=floor(**costs),
        current_s=current_s,
        waste_at_current=waste(current_s, **costs) if current_s else None,
        curve=curve(**costs),
    )


# -- Meta's expected ETTR and the fleet at scale -----------------------------------------------------------------

# Kokolis et al., "Revisiting Reliability in Large-Scale ML Research Clusters" (arXiv 2410.21680): failures per
# node-day of runtime measured on Meta's two research clusters, and the 8-GPU nodes they count.
RSC1_FAILURES_PER_NODE_DAY = 6.50e-3
RSC2_FAILURES_PER_NODE_DAY = 2.34e-3
GPUS_PER_NODE = 8


def per_node_day(rate_per_gpu_hour: float, *, gpus_per_node: int = GPUS_PER_NODE) -> float:
    """A per-GPU-hour failure rate as failures per node-day (the paper's r_f)."""
    return rate_per_gpu_hour * gpus_per_node * 24


def mttf_s(*, nodes: int, failures_per_node_day: float) -> float:
    """A job's mean time to failure, 1 / (N_nodes r_f), in seconds; infinite at rate 0."""
    exposure = nodes * failures_per_node_day
    return math.inf if exposure <= 0 else 86400 / exposure


@dataclass(frozen=True)
class Ettr:
    """Expected ETTR (goodput) from Kokolis et al.'s first-order model, or why the model has no answer.

    lost: the share of time the failures take, N_nodes r_f (u0 + dt/2); ettr = (1 - lost) / (1 + w/dt). The model
    counts each failure's restart and catch-up once and lets failures never overlap: it holds while failures are
    rare against a restart plus half an interval. With lost at 1 or more the job would never make progress between
    failures, and the formula's zero or negative value is not an ETTR: `ettr` is None and `in_range` False."""

    ettr: float | None
    lost: float
    mttf_s: float
    in_range: bool


def expected_ettr(
    *, nodes: int, failures_per_node_day: float, restart_s: float, interval_s: float, write_s: float = 0.0
) -> Ettr:
    """E[ETTR] ~ (1 - N_nodes r_f (u0 + dt/2)) / (1 + w/dt) (Kokolis et al. 2024, section on expected ETTR): u0 the
    restart overhead, dt the checkpoint interval, w the blocking write time, r_f per node-day. Seconds in and out."""
    _require_positive(interval_s=interval_s)
    mttf = mttf_s(nodes=nodes, failures_per_node_day=failures_per_node_day)
    lost = (restart_s + interval_s / 2) / mttf
    if lost >= 1:
        return Ettr(None, lost, mttf, False)
    return Ettr((1 - lost) / (1 + write_s / interval_s), lost, mttf, True)


def daly_young_interval_s(*, write_s: float, nodes: int, failures_per_node_day: float) -> float:
    """The paper's optimal interval sqrt(2 w / (N_nodes r_f)): Young's, with M the job's MTTF."""
    return young(delta_s=write_s, mtbf_s=mttf_s(nodes=nodes, failures_per_node_day=failures_per_node_day))


@dataclass(frozen=True)
class ScalePoint:
    """The same job at another size: its MTTF, the advised interval and what each model expects there.

    `waste` is the first-order W at Daly's interval (this advisor's model); past 1 the job loses more time than it
    has and `goodput` is None, as is `ettr` where Meta's model leaves its range."""

    gpus: int
    nodes: int
    mttf_s: float
    interval_s: float
    waste: float
    goodput: float | None
    ettr: float | None


def at_scale(
    *, gpus: Iterable[int], failures_per_node_day: float, delta_s: float, restart_s: float,
    gpus_per_node: int = GPUS_PER_NODE,
) -> list[ScalePoint]:  # fmt: skip
    """The job projected to each size at one failure rate per node-day, one blocking write and one restart cost."""
    points = []
    for size in gpus:
        nodes = max(math.ceil(size / gpus_per_node), 1)
        mttf = mttf_s(nodes=nodes, failures_per_node_day=failures_per_node_day)
        interval = daly(delta_s=delta_s, mtbf_s=mttf) if math.isfinite(mttf) else math.inf
        w = 0.0 if not math.isfinite(mttf) else waste(interval, delta_s=delta_s, mtbf_s=mttf, restart_s=restart_s)
        ettr = (
            expected_ettr(
                nodes=nodes, failures_per_node_day=failures_per_node_day, restart_s=restart_s,
                interval_s=interval, write_s=delta_s,
            ).ettr
            if math.isfinite(interval)
            else 1.0
        )  # fmt: skip
        points.append(ScalePoint(size, nodes, mttf, interval, w, 1 - w if w < 1 else None, ettr))
    return points


# -- shrink and continue, or wait for a spare ---------------------------------------------------------------------


@dataclass(frozen=True)
class ShrinkOrWait:
    """What each choice costs a job that lost `lost` of its `nodes` with no spare ready, in node-seconds of its
    allocation that train nothing; `shrink` is True when shrinking costs less."""

    wait_cost: float
    shrink_cost: float
    shrink: bool

    @property
    def saved(self) -> float:
        """Node-seconds the cheaper choice saves over the other."""
        return abs(self.wait_cost - self.shrink_cost)


def shrink_or_wait(*, nodes: int, lost: int, wait_s: float, restart_s: float) -> ShrinkOrWait:
    """Waiting keeps the whole job down until a spare passes the gate (wait_s) and it restarts (restart_s):
    nodes x (wait + R). Shrinking restarts now on nodes - lost (R), trains at (nodes - lost) / nodes of its
    throughput until the spare is back (lost x wait: data-parallel replicas scale linearly), then restarts once more
    to grow back (R): nodes x 2R + lost x wait. So shrink when R < wait x (1 - lost / nodes). A job left with no node
    cannot shrink."""
    if nodes < 1 or not 0 < lost <= nodes or wait_s < 0 or restart_s < 0:
        raise ValueError("need nodes >= 1, 0 < lost <= nodes, wait_s >= 0 and restart_s >= 0")
    wait_cost = nodes * (wait_s + restart_s)
    if lost == nodes:
        return ShrinkOrWait(wait_cost, math.inf, False)
    shrink_cost = nodes * 2 * restart_s + lost * wait_s
    return ShrinkOrWait(wait_cost, shrink_cost, shrink_cost < wait_cost)


# -- failure rate with a confidence interval --------------------------------------------------------------


@dataclass(frozen=True)
class RateEstimate:
    """Failures per GPU-hour: the point estimate and its two-sided confidence interval."""

    failures: int
    gpu_hours: float
    confidence: float
    rate: float
    lower: float
    upper: float

    @property
    def mtbf_gpu_hours(self) -> float:
        """Per-GPU MTBF in GPU-hours (infinite with no failure seen)."""
        return math.inf if self.rate == 0 else 1 / self.rate


def failure_rate(*, failures: int, gpu_hours: float, confidence: float = 0.90) -> RateEstimate:
    """lambda = k/T per GPU-hour, with the exact (Garwood) Poisson interval from chi-square quantiles.

    lower = chi2(alpha/2; 2k) / 2T (0 when k = 0), upper = chi2(1 - alpha/2; 2k + 2) / 2T.
    """
    if failures < 0 or gpu_hours <= 0 or not 0 < confidence < 1:
        raise ValueError("need failures >= 0, gpu_hours > 0 and 0 < confidence < 1")
    alpha = 1 - confidence
    lower = chi2_ppf(alpha / 2, 2 * failures) / (2 * gpu_hours) if failures else 0.0
    upper = chi2_ppf(1 - alpha / 2, 2 * failures + 2) / (2 * gpu_hours)
    return RateEstimate(failures, gpu_hours, confidence, failures / gpu_hours, lower, upper)


def job_mtbf_s(*, rate_per_gpu_hour: float, gpus: int) -> float:
    """A job's MTBF in seconds, 1 / (N lambda): failures on any of its GPUs stop it. Infinite at rate 0."""
    exposure = rate_per_gpu_hour * gpus
    return math.inf if exposure <= 0 else 3600 / exposure


def job_mtbf_range_s(*, estimate: RateEstimate, gpus: int) -> tuple[float, float]:
    """(shortest, longest) job MTBF in seconds over the rate's confidence interval."""
    return job_mtbf_s(rate_per_gpu_hour=estimate.upper, gpus=gpus), job_mtbf_s(
        rate_per_gpu_hour=estimate.lower, gpus=gpus
    )


def chi2_cdf(x: float, dof: float) -> float:
    """P(X <= x) for a chi-square variable with dof degrees of freedom."""
    return _gamma_p(dof / 2, x / 2)


@functools.lru_cache(maxsize=4096)  # ~90 bisection steps of a series each; pages ask for the same few again
def chi2_ppf(p: float, dof: float) -> float:
    """The chi-square quantile: the x with chi2_cdf(x, dof) == p, by bisection (relative precision 1e-13)."""
    if dof <= 0 or not 0 <= p <= 1:
        raise ValueError("need dof > 0 and 0 <= p <= 1")
    if p == 0:
        return 0.0
    if p == 1:
        return math.inf
    lo, hi = 0.0, max(1.0, float(dof))
    while chi2_cdf(hi, dof) < p:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-13 * hi:
        mid = (lo + hi) / 2
        if chi2_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _gamma_p(a: float, x: float) -> float:
    """Regularized lower incomplete gamma P(a, x): series below a + 1, continued fraction above.

    Numerical Recipes' split: each form converges fast on its side (in about sqrt(a) terms near x = a).
    """
    if x <= 0:
        return 0.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        return _gamma_series(a, x) * math.exp(log_prefix)
    return 1 - _gamma_fraction(a, x) * math.exp(log_prefix)


def _gamma_series(a: float, x: float) -> float:
    term = total = 1 / a
    n = a
    while abs(term) > abs(total) * 1e-16:
        n += 1
        term *= x / n
        total += term
    return total


def _gamma_fraction(a: float, x: float) -> float:
    """The continued fraction for Q(a, x) without its prefix, by the modified Lentz method."""
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    result = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        result *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return result


# -- inputs from measurements ------------------------------------------------------------------------------


def write_cost_s(blocking_s: Iterable[float | None], *, override: float | None = None) -> float | None:
    """delta for the advisor: the override if given, else the median measured blocking time (None if none), at least
    MIN_COST_S: a write that blocks for less costs less than any step, and the advisor counts it as that."""
    median = _median_or(blocking_s, override=override)
    return max(median, MIN_COST_S) if median is not None else None


def restart_cost_s(restarts_s: Iterable[float | None], *, override: float | None = None) -> float | None:
    """R for the advisor: the override if given, else the median measured restart time (None if none)."""
    return _median_or(restarts_s, override=override)


# The smallest checkpoint cost or MTBF the advisor works with, in seconds (the what-if API's lower bound too).
MIN_COST_S = 1e-3


def _median_or(values: Iterable[float | None], *, override: float | None) -> float | None:
    # A median, not a mean: one restart that waited hours for manual triage should not set the policy. Only positive
    # measurements count: a write that did not block (an asynchronous save) or a restart timed backwards (the clocks
    # of two senders) says nothing about what a checkpoint or a restart costs, and would leave nothing to advise on.
    if override is not None:
        return override
    known = [v for v in values if v is not None and v > 0]  # NaN > 0 is False: it goes too
    return statistics.median(known) if known else None


def _require_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
