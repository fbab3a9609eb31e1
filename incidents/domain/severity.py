"""An incident's severity graded from its impact (docs/DOMAIN.md section 6). Pure: no Django import.

Three figures grade it, each with a threshold for SEV1 and one for SEV2 (`Thresholds`):
- GPUs idled: the GPUs its faults stopped, now or before; as a burn rate, GPUs x the GPU-hour price / 60 in $/min;
- runs affected: its run and the other runs a fault on its nodes stopped (one switch taking two jobs down);
- GPU-hours lost: what it has cost so far (downtime and rewound work), which grows while the outage lasts.
The first level whose threshold one figure reaches wins; below SEV2, any GPU idled, GPU-hour lost or run affected is
SEV3 (so is a critical alert, a fault worth a look before it hurts), and nothing at all is SEV4.
"""

from dataclasses import dataclass

SEVERITIES = ("SEV1", "SEV2", "SEV3", "SEV4")  # most severe first


@dataclass(frozen=True)
class Thresholds:
    """What one level takes; reaching any one is enough. `usd_per_min` None: no dollar threshold of its own (at one
    GPU-hour price it is the GPU threshold under another name, shown as its $/min)."""

    gpus: int
    runs: int
    gpu_hours: float
    usd_per_min: float | None = None


# A 128-node job of 8 GPUs, three runs at once (a fabric fault), or 1,000 GPU-h ($2,500 at $2.50 a GPU-hour).
SEV1 = Thresholds(gpus=1024, runs=3, gpu_hours=1000.0)
# A 64-node job, two runs at once, or 200 GPU-h: about 47 min of a 256-GPU run, well past what a routine automated
# restart costs it (half a 30-min checkpoint interval rewound, then 10-20 min to reschedule and reload: section 2).
SEV2 = Thresholds(gpus=512, runs=2, gpu_hours=200.0)


@dataclass(frozen=True)
class Figures:
    """What an incident did, as severity reads it. `usd_per_min`: the GPUs idled at the GPU-hour price.
    `gpu_hours_lost` None: not priced yet (an alert graded as it comes, before the minute sweep prices it)."""

    gpus_idled: int
    runs_affected: int
    gpu_hours_lost: float | None = None
    usd_per_min: float = 0.0
    critical_alert: bool = False

    @property
    def lost(self) -> float:
        return self.gpu_hours_lost or 0.0

    def words(self) -> str:
        """'256 GPUs idled ($10.67/min), 67.4 GPU-h lost, 1 run affected'."""
        lost = "" if self.gpu_hours_lost is None else f", {self.gpu_hours_lost:,.1f} GPU-h lost"
        runs = f"{self.runs_affected} run{'' if self.runs_affected == 1 else 's'} affected"
        return f"{self.gpus_idled:,} GPUs idled (${self.usd_per_min:,.2f}/min){lost}, {runs}"


@dataclass(frozen=True)
class Grade:
    severity: str
    because: str  # the threshold that decided it, in words ("200.0 GPU-h lost, SEV2 at 200 GPU-h")


def grade(figures: Figures, *, sev1: Thresholds = SEV1, sev2: Thresholds = SEV2, usd_per_gpu_hour: float) -> Grade:
    """The severity `figures` grade and the threshold that decided it. `usd_per_gpu_hour` prices the GPU thresholds
    for the words ($/min = GPUs x price / 60)."""
    for level, limits in (("SEV1", sev1), ("SEV2", sev2)):
        reached = _reached(figures, limits, level, usd_per_gpu_hour)
        if reached:
            return Grade(level, reached)
    if figures.gpus_idled > 0 or figures.lost > 0 or figures.runs_affected > 0:
        return Grade("SEV3", f"below SEV2 ({describe(sev2, usd_per_gpu_hour)}), but a run or its GPUs are hit")
    if figures.critical_alert:
        return Grade("SEV3", "a critical alert, though nothing is idle or lost yet")
    return Grade("SEV4", "no GPU idled, no GPU-hour lost, no run affected")


def _reached(figures: Figures, limits: Thresholds, level: str, usd_per_gpu_hour: float) -> str:
    """Which of `limits` the figures reach, in words; "" when none."""
    if figures.gpus_idled >= limits.gpus:
        price = f" (${figures.usd_per_min:,.2f}/min)" if usd_per_gpu_hour else ""
        return f"{figures.gpus_idled:,} GPUs idled{price}, {level} at {_gpus(limits.gpus, usd_per_gpu_hour)}"
    if figures.runs_affected >= limits.runs:
        return f"{figures.runs_affected} runs affected, {level} at {limits.runs}"
    if figures.lost >= limits.gpu_hours:
        return f"{figures.lost:,.1f} GPU-h lost, {level} at {limits.gpu_hours:,.0f} GPU-h"
    if limits.usd_per_min is not None and figures.usd_per_min >= limits.usd_per_min:
        return f"${figures.usd_per_min:,.2f}/min burning, {level} at ${limits.usd_per_min:,.2f}/min"
    return ""


def _gpus(gpus: int, usd_per_gpu_hour: float) -> str:
    price = f" (${gpus * usd_per_gpu_hour / 60:,.2f}/min)" if usd_per_gpu_hour else ""
    return f"{gpus:,} GPUs{price}"


def describe(limits: Thresholds, usd_per_gpu_hour: float) -> str:
    """One level's thresholds in words: '512 GPUs ($21.33/min), 2 runs or 200 GPU-h'."""
    dollars = f", ${limits.usd_per_min:,.2f}/min burning" if limits.usd_per_min is not None else ""
    lost = f" (${limits.gpu_hours * usd_per_gpu_hour:,.0f})" if usd_per_gpu_hour else ""
    return (
        f"{_gpus(limits.gpus, usd_per_gpu_hour)} idled{dollars}, {limits.runs} runs affected or "
        f"{limits.gpu_hours:,.0f} GPU-h lost{lost}"
    )


def more_severe(a: str, b: str) -> str:
    """The more severe of two severities."""
    return min(a, b, key=SEVERITIES.index)
