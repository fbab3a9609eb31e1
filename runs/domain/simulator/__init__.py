"""A simulated training run on a GPU cluster, as the CloudEvents its scheduler, trainer and node agents would send.

Pure: no Django import, standard library only. `simulate(config)` yields CloudEvents 1.0 dicts (docs/EVENTS.md)
in time order; the same config gives the same stream, byte for byte: every draw comes from random streams seeded
from the config's seed, in a fixed order (no set or hash order is ever iterated). `simulate_timeline(config)` is
the same run as the goodput engine's RunTimeline, the truth the record built from the stream should equal.

One stream per concern (when faults strike, what they are, detection, rescheduling, reload, checkpoint writes,
repairs, planned stops, job ids), so that two configs of one seed that differ in one cost see the same faults at
the same training times and differ only in that cost (common random numbers): a lever's counterfactual
(runs/domain/levers.py) is checked against the simulation of the same seed with the fix applied.

The model (docs/DOMAIN.md sections 1, 2 and 5):
- Unexpected faults strike while the run trains (checkpoint writes included). The cause is drawn in Llama 3's
  Table 5 proportions by count; the culprit node and GPU at random among the run's nodes. GPU causes come with
  the Xid, ECC and health readings an NVML agent would report.
- Each fault is detected (seconds for a crash, 10-30 min for a hang), the culprit node is cordoned and sent to
  repair, the job is rescheduled onto a hot spare (or waits for a repaired node when none is left) and reloads
  the last durable checkpoint; the steps since that checkpoint are computed again. Software faults and NCCL
  timeouts without a culprit restart on the same nodes.
- Checkpoints are asynchronous: training blocks for the copy to host memory (seconds), the drain to storage
  makes the checkpoint durable minutes later. A fault before then loses it and the restart goes further back.
- Planned maintenance waits for the next checkpoint, saves synchronously, stops, and restarts on the same nodes
  after the maintenance window, so it rewinds no work.
- Repaired nodes go through burn-in and a health check, then back into the spare pool.

The rate. Llama 3 measured 419 unexpected interruptions in 54 days of wall-clock on 16,384 GPUs, so the default
`rate_per_gpu_hour` is per GPU-hour of wall-clock. A run can only be interrupted while it trains, and it spends
part of its time restarting; to show the measured count, faults strike during training at rate / training_share
(see `training_share`). This is exact in expectation for a renewal process (faults per wall-clock hour =
h / (1 + h D) = gpus x rate when h = gpus x rate / (1 - gpus x rate x D), D the mean downtime per fault), so the
rate an analysis estimates from the stream (faults / wall-clock GPU-hours) is the rate configured.

Times are float seconds from `config.start` inside; the events carry RFC 3339 UTC with milliseconds.
"""

from runs.domain.simulator.causes import (
    HANG_CAUSES,
    NO_CULPRIT_CAUSES,
    XID_MESSAGES,
)
from runs.domain.simulator.config import (
    CHECKPOINT_BYTES_PER_PARAM,
    DEFAULT_START,
    FRONTIER_GPUS,
    FRONTIER_MTTF_S,
    LLAMA3_DAYS,
    LLAMA3_GPUS,
    LLAMA3_PLANNED,
    LLAMA3_RATE_PER_GPU_HOUR,
    LLAMA3_UNEXPECTED,
    SPARE_POOL_TARGET,
    STEP_EVENT_S,
    SimulationConfig,
    Triangular,
    default_spare_nodes,
    expected_unexpected,
    fault_hazard_per_s,
    frontier_config,
    training_share,
)
from runs.domain.simulator.stream import (
    Summary,
    simulate,
    simulate_timeline,
    summary,
)

__all__ = [
    "CHECKPOINT_BYTES_PER_PARAM",
    "DEFAULT_START",
    "FRONTIER_GPUS",
    "FRONTIER_MTTF_S",
    "HANG_CAUSES",
    "LLAMA3_DAYS",
    "LLAMA3_GPUS",
    "LLAMA3_PLANNED",
    "LLAMA3_RATE_PER_GPU_HOUR",
    "LLAMA3_UNEXPECTED",
    "NO_CULPRIT_CAUSES",
    "SPARE_POOL_TARGET",
    "STEP_EVENT_S",
    "SimulationConfig",
    "Summary",
    "Triangular",
    "XID_MESSAGES",
    "default_spare_nodes",
    "expected_unexpected",
    "fault_hazard_per_s",
    "frontier_config",
    "simulate",
    "simulate_timeline",
    "summary",
    "training_share",
]
