"""Checkpoint I/O: what the run's writes look like, and the write designs priced for its cluster."""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Sum

from runs.domain import advisor, checkpoint_io
from runs.models import Attempt, Checkpoint, Run
from runs.selectors.advice import AdviceInputs, run_advice_inputs_get
from runs.selectors.timeline import run_record_cached

CLUSTER_LOAD_WINDOW = timedelta(hours=24)


_HOPS = {"gpu_host": "CHECKPOINT_GPU_HOST_GB_S", "nvme": "CHECKPOINT_NVME_GB_S", "storage": "CHECKPOINT_STORAGE_GB_S",
         "peer": "CHECKPOINT_PEER_GB_S"}  # fmt: skip


@dataclass(frozen=True)
class RunCheckpointIO:
    """The run's checkpoint I/O (runs.domain.checkpoint_io): its writes measured over its whole record (`since` to
    `until`), and the designs priced for its state size, its ranks and its cluster's hops at the advisor's M and R
    (`pricing`: None, and `missing` says why, without a state size or an M). `sources` says where each input came
    from ('record', 'cluster', 'setting', 'override'); `others_gb_s` is what the cluster's other runs wrote to shared
    storage over the CLUSTER_LOAD_WINDOW up to `as_of`."""

    record: checkpoint_io.RecordIO
    pricing: checkpoint_io.Pricing | None
    today: tuple[float, float, float] | None
    warnings: tuple[checkpoint_io.Note, ...]
    sources: dict[str, str | None]
    missing: list[str]
    others_gb_s: float
    since: datetime | None
    until: datetime | None
    as_of: datetime
    target: float


def run_checkpoint_io_get(
    *, run: Run, now: datetime, inputs: AdviceInputs | None = None, version: str | None = None,
    state_bytes: float | None = None, target: float | None = None, **hop_overrides: float | None,
) -> RunCheckpointIO:  # fmt: skip
    """One source for the run page, the API and the weekly report. The writes are read in one query (kept under the
    record `version`), the run's nodes a second (GPUs a node), the cluster's storage load a third; `inputs` are the
    advice inputs in hand (M, R), else read. `hop_overrides`: gpu_host, nvme, storage, peer in GB/s."""
    record = run_record_cached(run=run, version=version, part="checkpoint-io", compute=lambda: _checkpoint_io(run))
    if inputs is None:
        inputs = run_advice_inputs_get(run=run, now=now, version=version)
    cluster = run.cluster
    hops, sources = {}, {}
    for hop, setting in _HOPS.items():
        given, own = hop_overrides.get(hop), getattr(cluster, f"{hop}_gb_s", None) if cluster else None
        hops[hop] = given or own or getattr(settings, setting)
        sources[hop] = "override" if given else "cluster" if own else "setting"
    restart_s = inputs.restart_s if inputs.restart_s is not None else settings.RESTART_S_DEFAULT
    sources.update(
        state_bytes="override" if state_bytes else "record" if record.bytes else None,
        mtbf_s=inputs.sources.get("mtbf_s"),
        restart_s=inputs.sources.get("restart_s") or "setting",
    )
    state = state_bytes or record.bytes
    missing = [name for name, value in (("state_bytes", state), ("mtbf_s", inputs.mtbf_s)) if not value]
    if not run.gpu_count:
        missing.append("ranks")
    others = _cluster_storage_load_gb_s(run=run, now=now)
    target = target or settings.CHECKPOINT_TARGET_OVERHEAD
    pricing, today, warnings = None, None, record.warnings
    if not missing:
        nodes = Attempt.sizing_node_count(run)
        per_node = max(math.ceil(run.gpu_count / nodes), 1) if nodes else advisor.GPUS_PER_NODE
        pricing = checkpoint_io.price(
            state_bytes=state,
            ranks=run.gpu_count,
            gpus_per_node=per_node,
            hops=checkpoint_io.Hops(**hops, sources={hop: sources[hop] for hop in _HOPS}),
            mtbf_s=inputs.mtbf_s,
            restart_s=restart_s,
            target=target,
        )
        today = checkpoint_io.today(record, mtbf_s=inputs.mtbf_s, restart_s=restart_s)
        warnings += checkpoint_io.storage_notes(pricing, others_gb_s=others)
        warnings += checkpoint_io.model_notes(record, pricing)
    times = [write.at for write in record.writes]
    return RunCheckpointIO(
        record, pricing, today, warnings, sources, missing, others, min(times, default=None),
        max(times, default=None), now, target,
    )  # fmt: skip


def _checkpoint_io(run: Run) -> checkpoint_io.RecordIO:
    rows = run.checkpoints.order_by().values_list(
        "step", "status", "tier", "started_at", "completed_at", "durable_at", "blocking_s", "bytes"
    )
    writes = [checkpoint_io.WriteRow(*row) for row in rows]
    return checkpoint_io.measure(writes, ranks=run.gpu_count, interval_s=run.checkpoint_interval_s)


def _cluster_storage_load_gb_s(*, run: Run, now: datetime) -> float:
    """GB/s the cluster's other runs wrote to shared storage over the last CLUSTER_LOAD_WINDOW: the bytes of their
    writes made durable in it (a memory or local copy never reaches shared storage), over its length. One query."""
    if run.cluster_id is None:
        return 0.0
    written = (
        Checkpoint.objects.filter(
            run__cluster_id=run.cluster_id, durable_at__gte=now - CLUSTER_LOAD_WINDOW, durable_at__lt=now
        )
        .exclude(run_id=run.pk)
        .aggregate(total=Sum("bytes"))["total"]
    )
    return (written or 0) / CLUSTER_LOAD_WINDOW.total_seconds() / checkpoint_io.GB
