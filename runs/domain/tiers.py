"""Two checkpoint tiers: a fast copy (host memory, with a peer's copy) every few minutes beside a durable one every
hour, the best pair of intervals and what the record says each tier survives (docs/DOMAIN.md section 3,
"Checkpoint tiers").

Pure: no Django import. Seconds throughout; waste is a share of wall-clock time.
"""

import functools
import math
import statistics
from bisect import bisect_right
from dataclasses import dataclass

from runs.domain.advisor import MIN_COST_S, _require_positive, least_interval, young
from runs.domain.goodput import RunTimeline

# Where the record has no fast tier to measure, stated assumptions (each can be overridden): a copy to host memory
# blocks about a tenth of the durable write; it reloads about 13 times faster (Gemini, SOSP'23); and a fault leaves
# it usable nine times in ten (a peer's copy is lost only with the node and its peer, or the job's host processes).
FAST_WRITE_SHARE = 0.1
FAST_RELOAD_SPEEDUP = 13.0
FAST_SURVIVES = 0.9
FAST_TIERS = frozenset({"memory", "local"})


@dataclass(frozen=True)
class TierPlan:
    """A fast tier every `fast_interval_s` of training, every `every`-th write durable: its expected waste W."""

    fast_interval_s: float
    every: int
    waste: float

    @property
    def durable_interval_s(self) -> float:
        return self.fast_interval_s * self.every


def tier_waste(
    fast_interval_s: float, every: int, *, fast_s: float, durable_s: float, survive: float, mtbf_s: float,
    fast_restart_s: float, durable_restart_s: float,
) -> float:  # fmt: skip
    """Expected waste of two tiers (a share of wall-clock time), faults striking while the job trains.

    A write every tau of training, each m-th durable (blocking delta2), the others fast (delta1). A fault finds the
    durable copy u tau old, u uniform on [0, m): when u >= 1 a fast copy is the newest, and it survived the fault
    with probability p; the job then rewinds (u mod 1) tau and restarts in R1. Otherwise it rewinds u tau to the
    durable copy and restarts in R2. So, per fault:

        rewound  rho = tau / 2m x ((m - 1) p + 1 + (1 - p)(m^2 - 1))
        restart  R   = q R1 + (1 - q) R2,   q = p (m - 1) / m

    and, per second of training, writes cost o = A / (tau + A) with A = ((m - 1) delta1 + delta2) / m. With faults
    at rate h per second of training, goodput = (1 - o - h rho) / (1 + h R) (renewal-reward); M, the wall-clock
    time between faults the record measures, is 1/h + R, so h = 1 / (M - R). W = 1 - goodput; at or past 1 where
    the job would lose everything. With m = 1 it is the one-tier waste with delta2 and R2, to first order W(tau)."""
    m, tau, p = every, fast_interval_s, survive
    blocking = ((m - 1) * fast_s + durable_s) / m
    rewound = tau / (2 * m) * ((m - 1) * p + 1 + (1 - p) * (m * m - 1))
    fast_share = p * (m - 1) / m
    restart = fast_share * fast_restart_s + (1 - fast_share) * durable_restart_s
    if mtbf_s <= restart:
        return math.inf  # faults come faster than the job restarts: no time trains
    rate = 1 / (mtbf_s - restart)
    useful = 1 - blocking / (tau + blocking) - rate * rewound
    return 1 - useful / (1 + rate * restart)


@functools.lru_cache(maxsize=1024)  # a search of thousands of costings; the run page asks again for the same record
def tier_optimum(
    *, fast_s: float, durable_s: float, survive: float, mtbf_s: float, fast_restart_s: float,
    durable_restart_s: float, max_every: int = 1000,
) -> TierPlan:  # fmt: skip
    """The best pair of intervals: for each m the best tau (golden-section search on log tau, W being unimodal in
    tau: a falling write share against a rising rewound share), then the best m, searching m upwards until W stops
    improving for a while (it has one minimum in m: fewer durable writes against longer rewinds)."""
    _require_positive(durable_s=durable_s, mtbf_s=mtbf_s)
    costs = {
        "fast_s": fast_s, "durable_s": durable_s, "survive": survive, "mtbf_s": mtbf_s,
        "fast_restart_s": fast_restart_s, "durable_restart_s": durable_restart_s,
    }  # fmt: skip
    best: TierPlan | None = None
    around = young(delta_s=max(fast_s, MIN_COST_S), mtbf_s=mtbf_s)
    for m in range(1, max_every + 1):
        tau = least_interval(lambda tau, m=m: tier_waste(tau, m, **costs), around=around, span=12.0, tolerance=1e-9)
        plan = TierPlan(tau, m, tier_waste(tau, m, **costs))
        if best is None or plan.waste < best.waste:
            best = plan
        elif m > 2 * best.every + 5:
            break
    return best


@dataclass(frozen=True)
class TierRecord:
    """What the record measures of the tiers (None where it has nothing to measure): the median blocking of fast and
    of durable writes, the median fault-to-training time of restores from each, and the share of faults the fast
    copy survived where one was at stake (newer than the newest durable copy, written since the job last started)."""

    fast_s: float | None
    durable_s: float | None
    fast_restart_s: float | None
    durable_restart_s: float | None
    survive: float | None
    at_stake: int


def measured(timeline: RunTimeline) -> TierRecord:
    """The tiers as the run's own record shows them."""
    written = sorted((c for c in timeline.checkpoints if c.blocking_s is not None), key=lambda c: c.blocked_until)
    ends = [c.blocked_until for c in written]
    by_step: dict[int, list] = {}
    for c in written:
        by_step.setdefault(c.step, []).append(c)
    fast_costs = [c.blocking_s for c in written if c.tier in FAST_TIERS]
    durable_costs = [c.blocking_s for c in written if c.tier not in FAST_TIERS]
    fast_restarts, durable_restarts, stake, used = [], [], 0, 0
    previous_resume = timeline.started_at
    for stop in sorted(timeline.interruptions, key=lambda s: s.fault_at):
        newest = None
        index = bisect_right(ends, stop.fault_at) - 1
        if index >= 0 and written[index].started_at >= previous_resume:
            newest = written[index]
        restored = [c for c in by_step.get(stop.resumed_from_step, ()) if c.blocked_until <= stop.fault_at]
        tier = restored[-1].tier if restored else None
        if not stop.planned and stop.resumed_at is not None:
            took = (stop.resumed_at - stop.fault_at).total_seconds()
            (fast_restarts if tier in FAST_TIERS else durable_restarts).append(took)
            if newest is not None and newest.tier in FAST_TIERS:
                stake += 1
                used += tier in FAST_TIERS
        previous_resume = stop.resumed_at or stop.fault_at
    return TierRecord(
        fast_s=statistics.median(fast_costs) if fast_costs else None,
        durable_s=statistics.median(durable_costs) if durable_costs else None,
        fast_restart_s=statistics.median(fast_restarts) if fast_restarts else None,
        durable_restart_s=statistics.median(durable_restarts) if durable_restarts else None,
        survive=used / stake if stake else None,
        at_stake=stake,
    )


@dataclass(frozen=True)
class TierAdvice:
    """The inputs of the two-tier plan, where each came from ('record', 'default' or 'override'), and the plan."""

    fast_s: float
    durable_s: float
    survive: float
    fast_restart_s: float
    durable_restart_s: float
    mtbf_s: float
    sources: dict[str, str]
    plan: TierPlan
    one_tier: TierPlan  # every write durable, at its best interval: what the second tier is weighed against


def advise(
    record: TierRecord, *, delta_s: float, restart_s: float, reload_s: float | None, mtbf_s: float, **overrides
) -> TierAdvice:
    """The plan from the record's tiers, the advisor's delta, R and M where the record has no tier of its own, the
    stated defaults where neither has, and any of the five inputs overridden."""
    durable_restart = record.durable_restart_s if record.durable_restart_s is not None else restart_s
    faster = (reload_s or 0.0) * (1 - 1 / FAST_RELOAD_SPEEDUP)
    found = {
        "fast_s": (record.fast_s, delta_s * FAST_WRITE_SHARE),
        "durable_s": (record.durable_s, delta_s),
        "survive": (record.survive, FAST_SURVIVES),
        "fast_restart_s": (record.fast_restart_s, max(durable_restart - faster, 0.0)),
        "durable_restart_s": (record.durable_restart_s, restart_s),
    }
    values, sources = {}, {}
    for name, (measured_value, default) in found.items():
        if overrides.get(name) is not None:
            values[name], sources[name] = overrides[name], "override"
        elif measured_value is not None:
            values[name], sources[name] = measured_value, "record"
        else:
            values[name], sources[name] = default, "default"
    plan = tier_optimum(mtbf_s=mtbf_s, **values)
    one = tier_optimum(mtbf_s=mtbf_s, **{**values, "survive": 0.0})
    return TierAdvice(**values, mtbf_s=mtbf_s, sources=sources, plan=plan, one_tier=one)
