"""What a checkpoint write looks like: bytes per rank against each hop to storage, and the designs priced against
the target of a checkpoint that costs the run under 1% of its time (docs/DOMAIN.md section 3, "Checkpoint I/O").

Two halves. `measure` reads a run's own writes (bytes, blocking, tier, completion and durable times): bytes per rank,
the per-rank bandwidth the blocking implies, the drain to durable storage, failed and lost writes, the trend, and what
a reliability lead must hear (a drain longer than the interval, blocking that grows, writes never durable). `price`
prices the write designs for a state size, a rank count and a cluster's hop bandwidths, each at the advisor's interval
(runs/domain/advisor.py), and picks the design that meets the target or says how far the best falls short and which
hop is the limit.

Pure: no Django import. Seconds, bytes, and bandwidths in GB/s (10^9 bytes a second).
"""

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from runs.domain import advisor

GB = 1e9
# The share of a run's time its checkpoint writes may cost (the 1% target).
TARGET_OVERHEAD = 0.01
# Blocking "grows over the run" when the median of the last third of its writes is this many times the first third's,
# with at least TREND_MIN_WRITES writes in each third (fewer say nothing about a trend).
TREND_RATIO = 1.5
TREND_MIN_WRITES = 3

# The hops, in the order a durable write crosses them.
HOP_LABELS = {
    "gpu_host": "GPU to pinned host memory",
    "nvme": "host to local NVMe",
    "storage": "host to shared storage",
    "peer": "host to a peer's host memory",
}


# -- the record ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteRow:
    """One step's write as the record holds it (runs.models.Checkpoint). bytes: the whole checkpoint, every rank's
    shard together (docs/EVENTS.md); None or 0 when the trainer did not say."""

    step: int
    status: str  # started, completed, failed
    tier: str  # memory, local, durable, or "" before a completion said
    started_at: datetime | None
    completed_at: datetime | None
    durable_at: datetime | None
    blocking_s: float | None
    bytes: int | None


@dataclass(frozen=True)
class WriteIO:
    """A completed write measured: `at` its completion; per-rank figures None where bytes or ranks are unknown,
    bandwidth None where it blocked for no time; drain None where it never became durable (or became durable before
    its completion: an inconsistency, named in the findings)."""

    step: int
    at: datetime
    tier: str
    blocking_s: float
    bytes: int | None
    bytes_per_rank: float | None
    bandwidth_gb_s: float | None  # per rank: bytes per rank / blocking seconds
    drain_s: float | None  # durable_at - completed_at


@dataclass(frozen=True)
class Note:
    """A warning or an inconsistency found in the record: a code for machines, a sentence for people, and the steps
    it rests on."""

    code: str
    text: str
    steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class RecordIO:
    """What a run's writes say. Medians over the completed writes that have the figure; counts over all writes."""

    ranks: int
    writes: tuple[WriteIO, ...]
    completed: int
    failed: int
    lost: int  # started, never completed nor failed, and a later write began: the fault or the process took it
    never_durable: int  # completed, no durable time: memory or local copies on the run's own nodes
    bytes: float | None
    bytes_per_rank: float | None
    blocking_s: float | None
    bandwidth_gb_s: float | None
    drain_s: float | None
    drain_max_s: float | None
    interval_s: float | None
    interval_source: str | None  # "policy" (the run's checkpoint_interval_s) or "record" (median gap between writes)
    drains_over_interval: tuple[int, ...]  # steps whose drain took longer than the interval
    trend: tuple[float, float] | None  # median blocking of the first and the last third of the writes
    last_durable_step: int | None
    warnings: tuple[Note, ...]
    findings: tuple[Note, ...]  # inconsistent or missing data, and how it was counted

    @property
    def trend_ratio(self) -> float | None:
        return None if not self.trend or not self.trend[0] else self.trend[1] / self.trend[0]


def measure(rows: Iterable[WriteRow], *, ranks: int, interval_s: float | None = None) -> RecordIO:
    """The run's writes measured (docs/DOMAIN.md section 3, "Checkpoint I/O"). `ranks`: the run's world size (one
    rank a GPU); `interval_s`: the run's checkpoint policy, else the median gap between its writes' starts."""
    rows = sorted(rows, key=lambda r: (r.step, r.started_at or r.completed_at or datetime.min))
    writes: list[WriteIO] = []
    failed, lost, never_durable, early, no_bytes, no_blocking = [], [], [], [], [], []
    last_start = max((r.started_at for r in rows if r.started_at is not None), default=None)
    for row in rows:
        done = row.status == "completed" and row.blocking_s is not None and row.completed_at is not None
        if done and row.started_at is not None and row.completed_at < row.started_at:
            done = False  # the record's rule: a completion older than the step's latest start was an earlier write's
        if row.status == "failed":
            failed.append(row.step)
            continue
        if not done:
            # The newest write still in flight is not lost yet.
            if row.started_at is not None and row.started_at != last_start:
                lost.append(row.step)
            continue
        blocking = row.blocking_s if row.blocking_s > 0 else 0.0  # NaN or negative: blocked for nothing counted
        known_bytes = row.bytes if row.bytes else None
        per_rank = known_bytes / ranks if known_bytes and ranks > 0 else None
        if known_bytes is None:
            no_bytes.append(row.step)
        if not blocking:
            no_blocking.append(row.step)
        drain = None
        if row.durable_at is None:
            never_durable.append(row.step)
        elif row.durable_at < row.completed_at:
            early.append(row.step)
        else:
            drain = (row.durable_at - row.completed_at).total_seconds()
        bandwidth = per_rank / blocking / GB if per_rank is not None and blocking else None
        writes.append(WriteIO(row.step, row.completed_at, row.tier, blocking, known_bytes, per_rank, bandwidth, drain))
    writes.sort(key=lambda w: w.at)

    source = "policy" if interval_s else None
    if not interval_s:
        starts = sorted(r.started_at for r in rows if r.started_at is not None and r.status != "failed")
        gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False) if b > a]
        interval_s, source = (statistics.median(gaps), "record") if gaps else (None, None)
    drains = [w.drain_s for w in writes if w.drain_s is not None]
    over = tuple(w.step for w in writes if interval_s and w.drain_s is not None and w.drain_s > interval_s)
    trend = _trend([w.blocking_s for w in writes if w.blocking_s > 0])
    durable = [w for w in writes if w.drain_s is not None or (w.step in early)]
    last_durable = max(durable, key=lambda w: w.at).step if durable else None

    findings = []
    if ranks <= 0 and writes:
        findings.append(Note("ranks_unknown", "The run's world size is unknown: no figure per rank."))
    if no_bytes:
        findings.append(_note("bytes_missing", no_bytes, "said no size (bytes missing or 0): left out of the bytes "
                              "and bandwidth figures"))  # fmt: skip
    if no_blocking:
        findings.append(_note("no_blocking", no_blocking, "blocked for no time (0 s, negative or not a number): no "
                              "bandwidth from them"))  # fmt: skip
    if early:
        findings.append(_note("durable_before_completion", early, "say they were durable before they completed: "
                              "left out of the drain figures, counted durable at the time they say"))  # fmt: skip

    record = RecordIO(
        ranks=ranks,
        writes=tuple(writes),
        completed=len(writes),
        failed=len(failed),
        lost=len(lost),
        never_durable=len(never_durable),
        bytes=_median(w.bytes for w in writes),
        bytes_per_rank=_median(w.bytes_per_rank for w in writes),
        blocking_s=_median(w.blocking_s for w in writes),
        bandwidth_gb_s=_median(w.bandwidth_gb_s for w in writes),
        drain_s=_median(drains),
        drain_max_s=max(drains, default=None),
        interval_s=interval_s,
        interval_source=source,
        drains_over_interval=over,
        trend=trend,
        last_durable_step=last_durable,
        warnings=(),
        findings=tuple(findings),
    )
    return _with_warnings(record, failed=failed, lost=lost, never_durable=never_durable)


def _with_warnings(record: RecordIO, *, failed, lost, never_durable) -> RecordIO:
    warnings = []
    if record.drains_over_interval:
        warnings.append(
            _note(
                "drain_behind",
                list(record.drains_over_interval),
                f"took longer to become durable than the interval ({record.interval_s:,.0f} s, "
                f"{record.interval_source}): the durable tier falls behind, so the real rewind point is older than "
                "the last checkpoint",
            )
        )
    if record.trend_ratio is not None and record.trend_ratio >= TREND_RATIO:
        first, last = record.trend
        warnings.append(
            Note(
                "blocking_grows",
                f"Blocking grows over the run: the median of the last third of the writes is {last:,.1f} s against "
                f"{first:,.1f} s for the first third ({record.trend_ratio:,.1f}x).",
            )
        )
    if failed:
        warnings.append(_note("failed", failed, "failed"))
    if lost:
        warnings.append(_note("lost", lost, "started and never completed (a later write began)"))
    if never_durable:
        where = f"step {record.last_durable_step:,}" if record.last_durable_step is not None else "no durable one"
        warnings.append(
            _note(
                "never_durable",
                never_durable,
                f"never became durable (memory or local copies on the run's own nodes): a fault that takes their node "
                f"rewinds to the last durable checkpoint ({where})",
            )
        )
    return replace(record, warnings=tuple(warnings))


def _note(code: str, steps: list[int], what: str) -> Note:
    shown = ", ".join(f"{step:,}" for step in steps[:10]) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
    write = "write" if len(steps) == 1 else "writes"
    return Note(code, f"{len(steps):,} {write} {what} (step {shown}).", tuple(steps))


def _trend(blocking: list[float]) -> tuple[float, float] | None:
    third = len(blocking) // 3
    if third < TREND_MIN_WRITES:
        return None
    return statistics.median(blocking[:third]), statistics.median(blocking[-third:])


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


# -- the designs -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hops:
    """A cluster's bandwidth on each hop a checkpoint crosses, GB/s, with where each came from ('cluster', 'setting'
    or 'override'). gpu_host: per GPU (its PCIe link to pinned host memory); nvme: per node (its local drives
    together); storage: the shared file system's aggregate, every rank of every job sharing it; peer: per node (its
    network to another node's host memory)."""

    gpu_host: float
    nvme: float
    storage: float
    peer: float
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def rows(self) -> list[tuple[str, str, float, str | None]]:
        """(hop, label, GB/s, source) for each hop, in the order a durable write crosses them."""
        return [(hop, label, getattr(self, hop), self.sources.get(hop)) for hop, label in HOP_LABELS.items()]


@dataclass(frozen=True)
class Design:
    """One way to write the checkpoint, priced. blocking_s: training stands still; background_s: the copy after
    training resumed, until it is safe where the design puts it (durable storage, local NVMe, a peer); interval_s:
    the advisor's (Daly's) for that blocking, never shorter than the background copy (a write cannot start before the
    last is safe); overhead: blocking / interval, the writes' share of the run's time; waste: the advisor's first-order
    W at that interval; storage_gb_s: the shared storage's load from the run's writes at that interval (bytes /
    interval); limit: the hop that sets the blocking (or the interval, where the background copy sets it)."""

    name: str
    label: str
    durable: bool  # each write lands on shared storage
    blocking_s: float
    background_s: float
    blocking_hop: str
    background_hop: str | None
    limit: str
    interval_s: float
    overhead: float
    waste: float
    storage_gb_s: float
    target_interval_s: float  # the interval at which blocking / interval is the target
    waste_at_target: float

    @property
    def limit_label(self) -> str:
        return HOP_LABELS[self.limit]

    def meets(self, target: float) -> bool:
        return self.overhead <= target


@dataclass(frozen=True)
class Pricing:
    """The designs for one state size, rank count and set of hops, at one M and R; `chosen` the most durable design
    that meets the target, else None, and then `best` (least overhead), its shortfall and its limiting hop."""

    state_bytes: float
    ranks: int
    gpus_per_node: int
    bytes_per_rank: float
    hops: Hops
    mtbf_s: float
    restart_s: float
    target: float
    designs: tuple[Design, ...]
    chosen: Design | None
    best: Design
    front: tuple[advisor.FrontPoint, ...]

    @property
    def shortfall(self) -> float:
        """How far the best design's overhead is above the target (0 when one meets it)."""
        return 0.0 if self.chosen is not None else self.best.overhead - self.target


def per_rank_gb_s(hops: Hops, *, ranks: int, gpus_per_node: int) -> dict[str, float]:
    """Each hop's share for one rank, GB/s: a GPU has its own link; a node's NVMe and network are shared by its GPUs;
    the shared storage by every rank writing at once."""
    return {
        "gpu_host": hops.gpu_host,
        "nvme": hops.nvme / gpus_per_node,
        "storage": hops.storage / ranks,
        "peer": hops.peer / gpus_per_node,
    }


def price(
    *, state_bytes: float, ranks: int, hops: Hops, mtbf_s: float, restart_s: float, gpus_per_node: int = 8,
    target: float = TARGET_OVERHEAD,
) -> Pricing:  # fmt: skip
    """The four designs for a checkpoint of `state_bytes` written by `ranks` ranks, each at its advisor interval.

    - synchronous: every rank writes its shard to shared storage while training waits:
      blocking = bytes per rank / min(GPU to host, storage / ranks);
    - asynchronous sharded: each rank copies its shard to pinned host memory (blocking = bytes per rank / GPU to
      host), and drains it to shared storage in the background (drain = state / storage);
    - local NVMe: the same copy, then to the node's own drives (bytes per rank / (NVMe / GPUs a node));
    - in memory with a peer: the same copy, then to another node's host memory over the network (bytes per rank /
      (peer / GPUs a node)).
    The last two put nothing on shared storage per write: they survive what their copy survives (a process, a node),
    and need a durable copy every so often (the two-tier plan)."""
    if state_bytes <= 0 or ranks < 1 or gpus_per_node < 1:
        raise ValueError("need state_bytes > 0, ranks >= 1 and gpus_per_node >= 1")
    for name in ("gpu_host", "nvme", "storage", "peer"):
        if not getattr(hops, name) > 0:
            raise ValueError(f"the {name} bandwidth must be positive")
    share = per_rank_gb_s(hops, ranks=ranks, gpus_per_node=gpus_per_node)
    per_rank = state_bytes / ranks
    copy = per_rank / (share["gpu_host"] * GB)
    sync_hop = min(("gpu_host", "storage"), key=lambda hop: share[hop])
    plans = (
        ("sync", "synchronous", True, per_rank / (share[sync_hop] * GB), sync_hop, 0.0, None),
        ("async", "asynchronous sharded", True, copy, "gpu_host", state_bytes / (hops.storage * GB), "storage"),
        ("local", "local NVMe", False, copy, "gpu_host", per_rank / (share["nvme"] * GB), "nvme"),
        ("peer", "in memory, peer copy", False, copy, "gpu_host", per_rank / (share["peer"] * GB), "peer"),
    )
    designs = []
    for name, label, durable, blocking, hop, background, background_hop in plans:
        delta = max(blocking, advisor.MIN_COST_S)
        costs = {"delta_s": delta, "mtbf_s": mtbf_s, "restart_s": restart_s}
        daly = advisor.daly(delta_s=delta, mtbf_s=mtbf_s)
        interval = max(daly, background)
        target_interval = delta / target
        designs.append(
            Design(
                name=name,
                label=label,
                durable=durable,
                blocking_s=blocking,
                background_s=background,
                blocking_hop=hop,
                background_hop=background_hop,
                limit=background_hop if background > daly else hop,
                interval_s=interval,
                overhead=blocking / interval,
                waste=advisor.waste(interval, **costs),
                storage_gb_s=state_bytes / interval / GB if durable else 0.0,
                target_interval_s=target_interval,
                waste_at_target=advisor.waste(target_interval, **costs),
            )
        )
    chosen = next((d for d in designs if d.meets(target)), None)
    best = min(designs, key=lambda d: (d.overhead, not d.durable))
    front = advisor.pareto_front(
        write_costs_s=[max(d.blocking_s, advisor.MIN_COST_S) for d in designs], mtbf_s=mtbf_s, restart_s=restart_s
    )
    return Pricing(
        state_bytes=state_bytes,
        ranks=ranks,
        gpus_per_node=gpus_per_node,
        bytes_per_rank=per_rank,
        hops=hops,
        mtbf_s=mtbf_s,
        restart_s=restart_s,
        target=target,
        designs=tuple(designs),
        chosen=chosen,
        best=best,
        front=tuple(front),
    )


def storage_notes(pricing: Pricing, *, others_gb_s: float) -> tuple[Note, ...]:
    """The durable designs whose writes, on top of what the cluster's other runs write (`others_gb_s`, measured),
    would keep the shared storage busy all the time or more: the fleet's writes would saturate it."""
    notes = []
    for design in pricing.designs:
        load = others_gb_s + design.storage_gb_s
        if design.durable and load >= pricing.hops.storage:
            notes.append(
                Note(
                    "storage_saturated",
                    f"{design.label.capitalize()} writes every {design.interval_s:,.0f} s would put "
                    f"{design.storage_gb_s:,.2f} GB/s on shared storage beside the cluster's other runs' "
                    f"{others_gb_s:,.2f} GB/s: {load / pricing.hops.storage:.0%} of its {pricing.hops.storage:,.0f} "
                    "GB/s, saturated.",
                )
            )
    if others_gb_s >= pricing.hops.storage:
        notes.append(
            Note(
                "storage_saturated",
                f"The cluster's other runs already write {others_gb_s:,.2f} GB/s to shared storage, its whole "
                f"{pricing.hops.storage:,.0f} GB/s.",
            )
        )
    return tuple(notes)


# The run's own writes and the priced design of their kind may differ by this factor either way before it is said.
MODEL_TOLERANCE = 2.0


def model_notes(record: RecordIO, pricing: Pricing) -> tuple[Note, ...]:
    """Where the run's own writes disagree with the hops the designs are priced on. Writes that drained in no time
    were synchronous (they blocked until durable), else asynchronous: the design of that kind assumes a per-rank
    bandwidth for its blocking; the record's median differs by more than MODEL_TOLERANCE, so the priced blocking is
    not what this run would see. Said beside the designs, with the hop to set and what the record implies for it."""
    if not record.bandwidth_gb_s or not record.bytes_per_rank:
        return ()
    synchronous = not record.drain_s
    design = next(d for d in pricing.designs if d.name == ("sync" if synchronous else "async"))
    modeled = pricing.bytes_per_rank / design.blocking_s / GB
    ratio = record.bandwidth_gb_s / modeled
    if 1 / MODEL_TOLERANCE <= ratio <= MODEL_TOLERANCE:
        return ()
    hop = design.blocking_hop
    share = per_rank_gb_s(pricing.hops, ranks=pricing.ranks, gpus_per_node=pricing.gpus_per_node)[hop]
    implied = getattr(pricing.hops, hop) * record.bandwidth_gb_s / share
    source = pricing.hops.sources.get(hop) or "given"
    text = (
        f"This run's {'synchronous' if synchronous else 'asynchronous'} writes reached {record.bandwidth_gb_s:,.3f} "
        f"GB/s a rank (median blocking {record.blocking_s:,.1f} s); the {design.label} design, priced on "
        f"{HOP_LABELS[hop]} at {getattr(pricing.hops, hop):,.1f} GB/s ({source}), assumes {modeled:,.3f} GB/s a rank: "
        f"{1 / ratio if ratio < 1 else ratio:,.1f}x {'faster' if ratio < 1 else 'slower'} than the record. Set the "
        f"cluster's {HOP_LABELS[hop]} bandwidth to what it delivers: this run's writes imply {implied:,.1f} GB/s."
    )
    return (Note("hops_disagree", text),)


def today(record: RecordIO, *, mtbf_s: float, restart_s: float) -> tuple[float, float, float] | None:
    """Where the run sits now: (its interval, its median blocking, the advisor's W there), None without both."""
    if not record.interval_s or not record.blocking_s:
        return None
    delta = max(record.blocking_s, advisor.MIN_COST_S)
    return (
        record.interval_s,
        record.blocking_s,
        advisor.waste(record.interval_s, delta_s=delta, mtbf_s=mtbf_s, restart_s=restart_s),
    )
