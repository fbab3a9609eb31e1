"""The stream: a simulated run as CloudEvents in time order (`simulate`), as the goodput engine's timeline
(`simulate_timeline`), and a summary of a stream."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runs.domain.goodput import CheckpointSpan, InterruptionSpan, RunTimeline
from runs.domain.simulator.config import SimulationConfig
from runs.domain.simulator.engine import _Simulation


def simulate_timeline(config: SimulationConfig) -> RunTimeline:
    """The run as the goodput engine should see it from a complete record of its stream: each stop's fault, detection,
    restart and resume, and each write the record counts. What happens after the end is not in the stream, so a
    restart or resume after it is unknown (None), as it is in the record."""
    # A step event a minute is most of a stream, and no part of the timeline; no event at all is made, only the truth.
    run = _Simulation(config, steps=False, emit=False)
    for _event in run.events():
        pass
    end = config.duration_s

    def moment(seconds: float | None) -> datetime | None:
        if seconds is None or seconds > end:
            return None
        return config.start + timedelta(milliseconds=round(seconds * 1000))

    stops = []
    for fault, detected, running, resumed, step, planned, cause, node in run.stops:
        stops.append(
            InterruptionSpan(
                fault_at=moment(fault),
                detected_at=config.start + timedelta(milliseconds=round(detected * 1000)),
                running_at=moment(running),
                resumed_at=moment(resumed),
                resumed_from_step=step if resumed <= end else None,
                planned=planned,
                cause=cause,
                node=node,
            )
        )
    writes = [
        CheckpointSpan(step, moment(started), blocking, moment(durable), tier)
        for step, started, blocking, durable, tier in run.writes
    ]
    return RunTimeline(config.start, config.end if config.completes else None, config.gpus, tuple(stops), tuple(writes))


def simulate(config: SimulationConfig) -> Iterator[dict]:
    """The run's CloudEvents in non-decreasing time order, ids numbered in stream order; none after config.end."""
    return _Simulation(config).events()


@dataclass
class Summary:
    """Counts over a stream, for a command to print."""

    events: int = 0
    unexpected: int = 0
    planned: int = 0
    checkpoints: int = 0  # completed
    checkpoints_lost: int = 0  # failed: the job stopped before the write was durable
    steps: int = 0  # run.step events
    first_time: str = ""
    last_time: str = ""
    by_type: dict[str, int] = field(default_factory=dict)

    @property
    def interruptions(self) -> int:
        return self.unexpected + self.planned

    def add(self, event: dict) -> None:
        kind = event["type"]
        self.events += 1
        self.by_type[kind] = self.by_type.get(kind, 0) + 1
        self.first_time = self.first_time or event["time"]
        self.last_time = event["time"]
        if kind == "run.failed":
            if event["data"].get("planned"):
                self.planned += 1
            else:
                self.unexpected += 1
        elif kind == "run.step":
            self.steps += 1
        elif kind == "checkpoint.completed":
            self.checkpoints += 1
        elif kind == "checkpoint.failed":
            self.checkpoints_lost += 1


def summary(events: Iterable[dict]) -> Summary:
    result = Summary()
    for event in events:
        result.add(event)
    return result
