"""The demo fleet's run: one 256-GPU run over the last weeks, failing at ten times Llama 3's rate (pure)."""

from datetime import datetime, timedelta

from runs.domain.simulator import LLAMA3_RATE_PER_GPU_HOUR, SimulationConfig

DEMO_DAYS = 21
# At Llama 3's rate a 256-GPU run fails about once a week: ten times that gives the pages a few dozen stops.
DEMO_RATE_FACTOR = 10
DEMO_RUN = "llama3-70b-pretrain"
DEMO_SOURCE = "fleetops/demo"
DEMO_CLUSTER = "demo-slurm"
# The circuit breaker's share for the demo's 40-node cluster (Cluster.max_out_share): at the default 5 % two nodes
# may be out, fewer than its repairs hold on a usual day (48 h each, at ten times Llama 3's failure rate), so every
# automatic drain would page a person instead. 20 %: eight nodes.
DEMO_MAX_OUT_SHARE = 0.2


def demo_config(*, now: datetime, seed: int, days: float = DEMO_DAYS) -> SimulationConfig:
    """A 256-GPU run over the `days` before `now`, still running at `now`; maintenance once a week.

    The start is whole minutes, so that loading again within the same minute gives the same event ids (and stores
    nothing new).
    """
    end = now.replace(second=0, microsecond=0)
    return SimulationConfig(
        gpus=256,
        days=days,
        seed=seed,
        start=end - timedelta(days=days),
        rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * DEMO_RATE_FACTOR,
        planned_stops=max(round(days / 7), 1),
        completes=False,
        model_params=70_000_000_000,
        step_s=15.0,
        cluster=DEMO_CLUSTER,
        run=DEMO_RUN,
        source=DEMO_SOURCE,
    )
