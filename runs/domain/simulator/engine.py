"""The simulation itself: one random stream per concern, and the run's life event by event."""

import heapq
import math
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from runs.domain.cloudevents import format_time
from runs.domain.simulator.causes import (
    _CAUSE_WEIGHTS,
    _DRAWN_CAUSES,
    _GPU_SIGNALS,
    _MAINTENANCE,
    _REASONS,
    HANG_CAUSES,
    NO_CULPRIT_CAUSES,
    XID_MESSAGES,
    _GpuSignal,
)
from runs.domain.simulator.config import SimulationConfig, Triangular, fault_hazard_per_s
from runs.domain.taxonomy import CAUSES, Cause, Group


class _Streams:
    """The simulation's random streams, one per concern, each seeded from the run's seed and its own name."""

    NAMES = (
        "faults", "avoided", "cause", "detection", "rescheduling", "reload", "checkpoint", "repair", "planned", "jobs",
        "tiers",
    )  # fmt: skip
    faults: random.Random
    avoided: random.Random
    cause: random.Random
    detection: random.Random
    rescheduling: random.Random
    reload: random.Random
    checkpoint: random.Random
    repair: random.Random
    planned: random.Random
    jobs: random.Random
    tiers: random.Random

    def __init__(self, seed: int):
        for name in self.NAMES:
            setattr(self, name, random.Random(f"{seed}/{name}"))


@dataclass(frozen=True)
class _Stop:
    kind: str  # fault, planned, end
    at: float  # seconds from the start


class _Simulation:
    """The run's state as it moves forward in time; events go to a heap and leave it in time order.

    Every push is at or after the time the simulation has reached, so everything up to that time can leave.
    """

    def __init__(self, config: SimulationConfig, *, steps: bool = True, emit: bool = True):
        self.c = config
        self.steps = steps
        self.emit = emit  # False: only the truth (stops, writes) is kept, no event is made (simulate_timeline)
        self.rng = _Streams(config.seed)
        self.hazard = fault_hazard_per_s(config)
        self.trained = 0.0  # seconds of training so far, checkpoint writes included: the faults' clock
        self.next_fault = self._fault_after(0.0)
        hosts = [f"{config.cluster}-{i:05d}" for i in range(config.nodes + config.spare_count)]
        self.nodes = hosts[: config.nodes]
        self.spares = deque(hosts[config.nodes :])
        self.repairs: list[tuple[float, str]] = []  # (back in the pool at, hostname), a heap
        self.ecc: dict[tuple[str, int], list[int]] = {}  # running totals: corrected, uncorrected, remapped rows
        self.heap: list[tuple[float, int, str, dict]] = []
        self.pushed = 0
        self.emitted = 0
        self.step = 0
        self.durable_step = 0  # the newest durable checkpoint's step; 0 restarts from scratch
        self.in_flight: int | None = None  # a checkpoint's step that was not durable when the run stopped
        self.in_flight_at = 0.0  # when that write started
        # The truth the record should hold (simulate_timeline): every stop and every write, seconds from the start.
        self.stops: list[tuple[float, float, float, float, int, bool, str, str | None]] = []
        # step, started, blocking, durable, tier
        self.writes: list[tuple[int, float, float | None, float | None, str]] = []
        self.written = 0  # writes started: with two tiers, every durable_every-th is durable
        self.fast_step: int | None = None  # the newest memory copy's step, while newer than the durable one
        self.job = 100_000 + self.rng.jobs.randrange(900_000)
        self.planned = self._planned_times()

    # -- the main loop

    def events(self) -> Iterator[dict]:
        end = self.c.duration_s
        self._fleet_at_start()
        self._attempt(0.0, first=True)
        at = 0.0
        while at < end:
            stop = self._train(at)
            self.trained += stop.at - at
            yield from self._flush(min(stop.at, end))
            if stop.kind == "end":
                break
            if stop.kind == "fault":
                self.next_fault = self._fault_after(self.trained)
            at = self._fault(stop.at) if stop.kind == "fault" else self._planned_stop(stop.at)
            yield from self._flush(min(at, end))
        if self.in_flight is not None:
            self._write_lost(at=math.inf)  # no checkpoint.failed at the end: the record holds it started
        self._fleet_at_end()
        if self.c.completes:
            self._push(end, "run.completed", run=self.c.run)
        yield from self._flush(end)

    def _fault_after(self, trained: float) -> float:
        """When, on the training clock, the next fault after `trained` strikes (infinite at hazard 0)."""
        if self.hazard <= 0:
            return math.inf
        gap = self.rng.faults.expovariate(self.hazard)
        while self.c.faults_avoided and self.rng.avoided.random() < self.c.faults_avoided:
            gap += self.rng.faults.expovariate(self.hazard)  # this one never happens: training goes on
        return trained + gap

    def _train(self, start: float) -> _Stop:
        """Train from `start` until a fault, a due planned stop or the end; returns the stop.

        A step event each step_event_s of training (a minute) carries the last step done. A checkpoint starts at the
        first step event at or after each `checkpoint_interval_s` of training (an interval rounds up to that grain).
        """
        c = self.c
        # Faults come on the run's own training clock, not redrawn after a planned stop (the same process, as it is
        # memoryless): then two configs of one seed meet the same faults at the same training times.
        fault_at = start + self.next_fault - self.trained
        limit = min(fault_at, c.duration_s)
        kind = "fault" if fault_at < c.duration_s else "end"
        base, at, trained, since_checkpoint = self.step, start, 0.0, 0.0
        self.in_flight = None
        tick = c.step_event_s
        while at + tick <= limit:
            at += tick
            trained += tick
            since_checkpoint += tick
            self.step = base + int(trained // c.step_s)
            if self.steps:
                self._push(at, "run.step", run=c.run, step=self.step)
            if since_checkpoint < c.checkpoint_interval_s:
                continue
            since_checkpoint = 0.0
            if self.planned and self.planned[0] <= at:
                done = self._final_checkpoint(at, limit)
                if done is not None:
                    self.planned.popleft()
                    return _Stop("planned", done)
                break
            at = self._checkpoint(at, limit)
        return _Stop(kind, limit)

    # -- checkpoints

    def _checkpoint(self, at: float, limit: float) -> float:
        """An asynchronous checkpoint from `at`; returns when training goes on (or `limit`, the run stopped)."""
        c = self.c
        self.written += 1
        if c.fast_blocking is not None and self.written % c.durable_every:
            return self._fast_checkpoint(at, limit)
        self._push(at, "checkpoint.started", run=c.run, step=self.step)
        blocking = round(c.checkpoint_blocking.draw(self.rng.checkpoint), 1)
        durable = at + blocking + c.checkpoint_drain.draw(self.rng.checkpoint)
        if durable > limit:
            self.in_flight, self.in_flight_at = self.step, at
            return min(at + blocking, limit)
        self._completed(at, durable, blocking)
        return at + blocking

    def _fast_checkpoint(self, at: float, limit: float) -> float:
        """A copy to host memory (and a peer's): restorable once its blocking ends, never durable."""
        c = self.c
        self._push(at, "checkpoint.started", run=c.run, step=self.step)
        blocking = round(c.fast_blocking.draw(self.rng.checkpoint), 1)
        if at + blocking > limit:
            self.in_flight, self.in_flight_at = self.step, at
            return limit
        self._completed(at, at + blocking, blocking, tier="memory")
        return at + blocking

    def _final_checkpoint(self, at: float, limit: float) -> float | None:
        """The synchronous save before planned maintenance; when it is durable, or None if the run stopped first."""
        c = self.c
        self._push(at, "checkpoint.started", run=c.run, step=self.step)
        rng = self.rng.checkpoint
        write = round(c.checkpoint_blocking.draw(rng) + c.checkpoint_drain.draw(rng), 1)
        if at + write > limit:
            self.in_flight, self.in_flight_at = self.step, at
            return None
        self._completed(at, at + write, write)
        return at + write

    def _write_lost(self, *, at: float) -> None:
        """The write in flight when the run stopped: the record holds it as started and never completed, unless its
        checkpoint.failed (at `at`) arrived within the run, which takes it out of the engine's count."""
        if at > self.c.duration_s:
            self.writes.append((self.in_flight or 0, self.in_flight_at, None, None, "durable"))

    def _completed(self, started: float, at: float, blocking_s: float, *, tier: str = "durable") -> None:
        """A write completed at `at`: a durable one is durable then, a memory copy restorable (and never durable)."""
        c = self.c
        self.writes.append((self.step, started, blocking_s, at if tier == "durable" else None, tier))
        self._push(
            at,
            "checkpoint.completed",
            run=c.run,
            step=self.step,
            blocking_s=blocking_s,
            bytes=c.checkpoint_bytes,
            tier=tier,
        )
        if tier == "durable":
            self.durable_step, self.fast_step = self.step, None
        else:
            self.fast_step = self.step

    # -- stops and restarts

    def _fault(self, at: float) -> float:
        """An unexpected fault at `at`: its signals, the report, the culprit's repair, the restart; returns resume."""
        c, rng = self.c, self.rng.cause
        cause = rng.choices(_DRAWN_CAUSES, weights=_CAUSE_WEIGHTS)[0]
        detected = at + (c.detection_hang if cause in HANG_CAUSES else c.detection_crash).draw(self.rng.detection)
        details: dict = {}
        if cause not in NO_CULPRIT_CAUSES:
            details["node"] = rng.choice(self.nodes)
        if cause in _GPU_SIGNALS:
            details["gpu"] = rng.randrange(c.gpus_per_node)
            xid = self._gpu_signals(cause, details["node"], details["gpu"], at)
            if xid is not None:
                details["xid"] = xid
        reason = f"Xid {details['xid']}: {XID_MESSAGES[details['xid']][0]}" if "xid" in details else _REASONS[cause]
        if self.in_flight is not None:
            self._write_lost(at=detected)
            self._push(
                detected,
                "checkpoint.failed",
                run=c.run,
                step=self.in_flight,
                reason="The job stopped before it was durable",
            )
        self._push(
            at,
            "run.failed",
            run=c.run,
            reason=reason,
            category=cause.value,
            detected_at=self._time(detected),
            **details,
        )
        running = detected + c.rescheduling.draw(self.rng.rescheduling)
        if "node" in details:
            self._repair(details["node"], cause, detected, gpu=details.get("gpu"))
            running = self._replace(details["node"], running)
        # The newest memory copy, where one is newer than the durable checkpoint and it survived the fault.
        fast = self.fast_step is not None and self.rng.tiers.random() < c.fast_survives
        restore = self.fast_step if fast else self.durable_step
        resumed = self._attempt(running, restore=restore, reload=c.fast_reload if fast else c.reload)
        self.stops.append((at, detected, running, resumed, restore, False, cause.value, details.get("node")))
        return resumed

    def _planned_stop(self, at: float) -> float:
        """Planned maintenance right after its checkpoint was durable; the run comes back on the same nodes."""
        c = self.c
        reason = f"Planned maintenance: {self.rng.planned.choice(_MAINTENANCE)}"
        self._push(
            at,
            "run.failed",
            run=c.run,
            reason=reason,
            category=Cause.PLANNED_MAINTENANCE.value,
            planned=True,
            detected_at=self._time(at),
        )
        running = at + c.maintenance.draw(self.rng.planned)
        resumed = self._attempt(running, restore=self.durable_step, reload=c.reload)
        planned = Cause.PLANNED_MAINTENANCE.value
        self.stops.append((at, at, running, resumed, self.durable_step, True, planned, None))
        return resumed

    def _attempt(self, at: float, *, first: bool = False, restore: int = 0, reload: Triangular | None = None) -> float:
        """A new attempt starts at `at`; after a stop it reloads the checkpoint of step `restore` in `reload`. Returns
        when it trains again."""
        c = self.c
        self.job += 1 + self.rng.jobs.randrange(40)  # other jobs took the ids between
        self._push(
            at,
            "run.started",
            run=c.run,
            cluster=c.cluster,
            gpus=c.gpus,
            nodes=list(self.nodes),
            job_id=str(self.job),
            model_params=c.model_params,
            checkpoint_interval_s=c.checkpoint_interval_s,
        )
        if first:
            return at
        resumed = at + (reload or c.reload).draw(self.rng.reload)
        self._push(resumed, "run.restored", run=c.run, from_step=restore)
        self.step = restore
        self.fast_step = None  # the restarted job writes its memory copies again
        return resumed

    # -- hardware

    def _gpu_signals(self, cause: Cause, node: str, gpu: int, at: float) -> int | None:
        """The Xid, ECC totals and health reading the node agent reports at the fault; returns the Xid."""
        signal, rng = _GPU_SIGNALS[cause], self.rng.cause
        xid = rng.choice(signal.xids) if signal.xids else None
        if xid is not None:
            self._push(at, "gpu.xid", node=node, gpu=gpu, xid=xid, message=XID_MESSAGES[xid][0])
        if signal.ecc:
            totals = self.ecc.setdefault((node, gpu), [0, 0, 0])
            totals[0] += rng.randint(1, 500)
            totals[1] += 1
            totals[2] += 1
            self._push(
                at,
                "gpu.ecc",
                node=node,
                gpu=gpu,
                corrected=totals[0],
                uncorrected=totals[1],
                remapped_rows_uncorrected=totals[2],
                remapped_rows_pending=xid != 64,
                remapped_rows_failure=xid == 64,
            )
        if signal.health:
            hot = signal.thermal
            self._push(
                at,
                "gpu.health",
                node=node,
                gpu=gpu,
                temperature_c=round(rng.uniform(92, 100) if hot else rng.uniform(55, 80), 1),
                throttle_reasons=["hw_thermal_slowdown", "sw_thermal_slowdown"] if hot else [],
                nvlink_errors=0,
                recovery_action=XID_MESSAGES[xid][1] if xid is not None else 0,
            )
        return xid

    def _repair(self, node: str, cause: Cause, detected: float, *, gpu: int | None = None) -> None:
        """Cordon, repair, burn-in and health check; the node is back in the spare pool afterwards. The agent,
        started again on the repaired node, reads its faulted GPU clean: without that reading the record keeps the
        fault's (a driver asking for a reboot, a pending row remap) on a node back in service for ever."""
        c, rng = self.c, self.rng.repair
        label = CAUSES[cause][0]
        cordoned = detected + rng.uniform(5, 60)
        self._push(cordoned, "node.state", node=node, state="cordoned", reason=f"{label}: drained from {c.run}")
        in_repair = cordoned + rng.uniform(600, 1800)
        self._push(in_repair, "node.state", node=node, state="in_repair", reason=f"{label}: repair ticket opened")
        burn_in = in_repair + c.repair.draw(rng)
        fix = "GPU replaced (RMA)" if CAUSES[cause][1] == Group.GPU else f"{label} repaired"
        self._push(burn_in, "node.state", node=node, state="burn_in", reason=fix)
        signal = _GPU_SIGNALS.get(cause)
        if gpu is not None and signal is not None:
            self._clean_reading(node, gpu, signal, burn_in + 60)
        ready = burn_in + c.burn_in.draw(rng)
        self._push(ready, "healthcheck.result", node=node, check="dcgm_diag_r3", passed=True)
        self._push(ready, "node.state", node=node, state="hot_spare", reason="Passed burn-in and DCGM diagnostics")
        heapq.heappush(self.repairs, (ready, node))
        # A replaced GPU starts its ECC totals from zero.
        for key in [key for key in self.ecc if key[0] == node]:
            del self.ecc[key]

    def _clean_reading(self, node: str, gpu: int, signal: "_GpuSignal", at: float) -> None:
        """A repaired GPU's first readings: no recovery action, idle and cool; ECC totals from zero (replaced).
        No random draw, so the rest of the stream is the one the seed gave before."""
        if signal.health:
            self._push(
                at,
                "gpu.health",
                node=node,
                gpu=gpu,
                temperature_c=40.0,
                throttle_reasons=[],
                nvlink_errors=0,
                recovery_action=0,
            )
        if signal.ecc:
            self._push(
                at,
                "gpu.ecc",
                node=node,
                gpu=gpu,
                corrected=0,
                uncorrected=0,
                remapped_rows_uncorrected=0,
                remapped_rows_pending=False,
                remapped_rows_failure=False,
            )

    def _replace(self, node: str, at: float) -> float:
        """Swap `node` for a hot spare; returns when the job can start, later if it had to wait for a repair."""
        while self.repairs and self.repairs[0][0] <= at:
            self.spares.append(heapq.heappop(self.repairs)[1])
        if not self.spares:
            ready, host = heapq.heappop(self.repairs)
            self.spares.append(host)
            at = max(at, ready + 60)
        spare = self.spares.popleft()
        self.nodes[self.nodes.index(node)] = spare
        reason = f"Joined {self.c.run} in place of {node}"
        self._push(at, "node.state", node=spare, state="in_service", reason=reason, cluster=self.c.cluster)
        return at

    def _fleet_at_start(self) -> None:
        c = self.c
        for host in [*self.nodes, *self.spares]:
            self._push(0.0, "node.heartbeat", node=host, cluster=c.cluster)
        for host in self.spares:
            self._push(0.0, "node.state", node=host, state="hot_spare", reason="Passed burn-in", cluster=c.cluster)

    def _fleet_at_end(self) -> None:
        """A last heartbeat from every node not in repair, so that a live demo's nodes look alive."""
        end = self.c.duration_s
        back = [host for ready, host in self.repairs if ready <= end]
        for host in sorted([*self.nodes, *self.spares, *back]):
            self._push(end, "node.heartbeat", node=host, cluster=self.c.cluster)

    def _planned_times(self) -> deque[float]:
        """One planned stop in each of `planned_count` equal slots of the run, away from the slot edges."""
        count = self.c.planned_count
        slot = self.c.duration_s / count if count else 0.0
        return deque(slot * (i + self.rng.planned.uniform(0.1, 0.9)) for i in range(count))

    # -- output

    def _push(self, at: float, type_: str, **data) -> None:
        if not self.emit:
            return
        heapq.heappush(self.heap, (at, self.pushed, type_, data))
        self.pushed += 1

    def _flush(self, until: float) -> Iterator[dict]:
        """Events up to `until` (seconds), in time order; the same instant keeps the order they were pushed in."""
        c = self.c
        while self.heap and self.heap[0][0] <= until:
            at, _, type_, data = heapq.heappop(self.heap)
            self.emitted += 1
            yield {
                "specversion": "1.0",
                "id": f"{c.run}-{c.seed}-{self.emitted:07d}",
                "source": c.source,
                "type": type_,
                "time": self._time(at),
                "data": data,
            }

    def _time(self, seconds: float) -> str:
        at = self.c.start + timedelta(milliseconds=round(seconds * 1000))
        return format_time(at)
