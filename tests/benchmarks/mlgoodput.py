"""Google's ml-goodput-measurement, driven offline on a FleetOps run: the baseline the goodput engine is compared with.

The library reads a job's log entries from Cloud Logging through a `_CloudLogger`; its calculator and recorder take
any object with the same methods as `cloud_logger=`. `MemoryLogger` is that object, holding the entries in a list.
The entries are written by the library's own `GoodputRecorder` (job start and end, step start times) plus the
checkpoint-save records Orbax's logger would write, all taken from the same record the engine reads: the run's
events and its checkpoints in the database. docs/PERFORMANCE.md explains the mapping.
"""

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ml_goodput_measurement.src.goodput import GoodputCalculator, GoodputRecorder

from runs.domain.goodput import RunTimeline

LOG_NAME = "fleetops-bench"
CHECKPOINT_DIRECTORY = "gs://fleetops-bench/checkpoints"  # gs:// makes each save a "persistent" one


class MemoryLogger:
    """The methods of ml_goodput_measurement's _CloudLogger that the recorder and calculator call, in memory.

    Entries are kept in the order they are written; the caller writes them in time order, as Cloud Logging would
    return them (ascending timestamp). Filters of a read are ignored: one logger holds one job.
    """

    def __init__(self, job_name: str):
        self.job_name = job_name
        self.entries: list[dict] = []
        self.job_start_time = None
        self.last_time = 0.0  # POSIX seconds of the latest time an entry carries

    def write_cloud_logging_entry(self, entry: dict | None) -> None:
        if entry is None or entry.get("job_name") != self.job_name:
            return
        self.entries.append(entry)
        times = [value for key, value in entry.items() if key.endswith("_time")]
        self.last_time = max([self.last_time, *times])

    def flush(self) -> None:
        pass

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        """(payloads, (timestamp, id) of the last one); after a first full read there is nothing new."""
        if last_entry_info is not None or not self.entries:
            return [], (None, None)
        return list(self.entries), (datetime.fromtimestamp(self.last_time, UTC), str(len(self.entries) - 1))


@dataclass(frozen=True)
class Mapped:
    logger: MemoryLogger
    steps: int  # step start entries
    attempts: int  # job start entries
    saves: int  # checkpoint save entries


def map_run(*, job_name: str, events: list[tuple[datetime, str, dict]], timeline: RunTimeline) -> Mapped:
    """The run as ml-goodput-measurement entries, written through the library's own recorder.

    `events` are the run's run.started, run.step, run.restored and run.completed events (time, type, data) in time
    order; `timeline` is what the engine reads (its checkpoints are the completed ones, with their blocking).
    The library counts steps one by one and takes a repeated step number as a restart, so each minute's run.step
    event becomes one library step, numbered by the rank of the step it reports (the simulator reports every tenth
    optimizer step: 0, 10, 20... become 0, 1, 2...), and run.restored repeats the number of the step it resumed
    from. A checkpoint blocks training between two steps: the library step after it starts when the blocking ends,
    which is also where the engine's rewound work starts after a restart from that checkpoint.
    """
    reported = {0} | {d["step"] for _, t, d in events if t == "run.step"}
    reported |= {d["from_step"] for _, t, d in events if t == "run.restored"}
    number = {step: index for index, step in enumerate(sorted(reported))}
    # A write that never completed is no checkpoint to the library (nothing to restore from, no save logged).
    completed = [c for c in timeline.checkpoints if c.blocking_s is not None]
    blocking = {(c.started_at, c.step): timedelta(seconds=max(c.blocking_s, 0.0)) for c in completed}

    logger = MemoryLogger(job_name)
    recorder = GoodputRecorder(job_name, LOG_NAME, logging_enabled=True, cloud_logger=logger)
    writes: list[tuple[datetime, int, Callable, tuple]] = []  # (when, tie-break, write, its arguments)
    attempts = steps = 0
    for order, (at, kind, data) in enumerate(events):
        if kind == "run.started":
            attempts += 1
            writes.append((at, order, recorder.record_job_start_time, (at,)))
            if attempts == 1:  # training starts with the job: step 0
                writes.append((at, order, recorder.record_step_start_time, (0, at)))
                steps += 1
        elif kind == "run.step":
            start = at + blocking.get((at, data["step"]), timedelta())
            writes.append((start, order, recorder.record_step_start_time, (number[data["step"]], start)))
            steps += 1
        elif kind == "run.restored":
            writes.append((at, order, recorder.record_step_start_time, (number[data["from_step"]], at)))
            steps += 1
        elif kind == "run.completed":
            writes.append((at, order, recorder.record_job_end_time, (at,)))
    for checkpoint in completed:
        seconds = max(checkpoint.blocking_s, 0.0)
        save = _save_entry(job_name, checkpoint.step, seconds)
        writes.append(
            (checkpoint.started_at + timedelta(seconds=seconds), len(events), logger.write_cloud_logging_entry, (save,))
        )
    writes.sort(key=lambda write: write[:2])
    for _at, _order, write, args in writes:
        write(*args)
    return Mapped(logger, steps, attempts, len(completed))


def _save_entry(job_name: str, step: int, seconds: float) -> dict:
    """What Orbax's CheckpointManager logs for a save: the part of the write that blocked training, in seconds."""
    return {
        "job_name": job_name,
        "event_type": "save",
        "directory": CHECKPOINT_DIRECTORY,
        "step": step,
        "checkpoint_manager_blocking_duration_secs": seconds,
        "checkpointer_blocking_duration_secs": seconds,
        "wait_for_prev_duration_secs": 0.0,
        "get_old_steps_duration_secs": 0.0,
    }


def job_goodput(mapped: Mapped, *, job_name: str) -> tuple[float, dict]:
    """The library's whole-job goodput (percent) and badput breakdown, as a fresh calculator computes it.

    Each call starts cold, as a new process would: the calculator appends what it reads to a JSONL cache on disk
    and reads it back, so each gets a directory of its own.
    """
    with tempfile.TemporaryDirectory(prefix="mlgoodput-") as cache_dir:
        calculator = GoodputCalculator(job_name, LOG_NAME, cloud_logger=mapped.logger, cache_dir=cache_dir)
        goodput, badput, _step = calculator.get_job_goodput(include_badput_breakdown=True)
    return goodput, badput


def warm_calculator(mapped: Mapped, *, job_name: str, cache_dir: str) -> GoodputCalculator:
    """A calculator that has read the entries once and serves them from memory, not from its JSONL cache file:
    its `_get_current_productive_and_unproductive_time()` is then the computation alone."""
    calculator = GoodputCalculator(job_name, LOG_NAME, cloud_logger=mapped.logger, cache_dir=cache_dir)
    calculator.get_job_goodput()
    entries = calculator._goodput_cache.get_cached_entries()
    calculator._goodput_cache.get_cached_entries = lambda: entries
    return calculator
