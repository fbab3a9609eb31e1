"""The simulated fleet's telemetry (runs.domain.telemetry) and the 131,072-GPU run (simulator.frontier_config): the
rates they state are the rates they send, and what they send is what the detectors and the intake take."""

import dataclasses
import json
import math
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from incidents.domain import detectors
from runs.domain import advisor
from runs.domain.cloudevents import parse_events, parse_time
from runs.domain.simulator import FRONTIER_GPUS, FRONTIER_MTTF_S, SimulationConfig, frontier_config, simulate
from runs.domain.telemetry import AT_SCALE, SHIPPED, TelemetryRates, telemetry
from runs.models import Event, Node, Run
from runs.services import events_apply, events_ingest

SMALL = SimulationConfig(gpus=64, days=1, run="tele-run", cluster="tele")  # 8 nodes


def test_the_rates_at_131072_gpus_are_the_stated_ones():
    config = frontier_config()
    rates = AT_SCALE.per_s(config)
    # By hand: 131,072 ranks / 60 s; / (100 steps x 6 s); 16,384 nodes / 30 s; 131,072 GPUs / 300 s, twice.
    assert rates == pytest.approx(
        {
            "rank.step_time": 2184.533,
            "rank.grad_norm": 218.453,
            "node.heartbeat": 546.133,
            "gpu.ecc": 436.907,
            "gpu.health": 436.907,
        },
        abs=1e-3,
    )
    assert AT_SCALE.total_per_s(config) == pytest.approx(3822.93, abs=0.01)
    # The client's and agent's shipped defaults: 13,107 + 2,185 + 546 + 2 x 4,369.
    assert SHIPPED.total_per_s(config) == pytest.approx(24576.0)


def test_each_reporter_sends_once_a_period_and_the_stream_keeps_time_order():
    rates = TelemetryRates(step_time_every_s=10, grad_norm_every=5, heartbeat_every_s=5, readings_every_s=20)
    events = list(telemetry(SMALL, rates, start_s=100, seconds=20))
    times = [parse_time(e["time"]) for e in events]
    assert times == sorted(times)
    assert times[0] >= SMALL.start + timedelta(seconds=100) and times[-1] < SMALL.start + timedelta(seconds=120)
    counts = Counter((e["type"], e["data"].get("rank", e["data"]["node"]), e["data"].get("gpu")) for e in events)
    step_times = [k for k in counts if k[0] == "rank.step_time"]
    assert len(step_times) == 64 and all(counts[k] == 2 for k in step_times)  # 20 s / 10 s, every rank
    heartbeats = [k for k in counts if k[0] == "node.heartbeat"]
    assert len(heartbeats) == 8 and all(counts[k] == 4 for k in heartbeats)
    for kind in ("gpu.ecc", "gpu.health"):
        readings = [k for k in counts if k[0] == kind]
        assert len(readings) == 64 and all(counts[k] == 1 for k in readings)
    # Step k is reached at 6k s and its norms leave at 6k + 1 s: in [100, 120) steps 17-19, none of them sampled.
    assert not [e for e in events if e["type"] == "rank.grad_norm"]
    burst = list(telemetry(SMALL, rates, start_s=120, seconds=10))  # step 20 at 120 s, sent at 121 s
    norms = [e for e in burst if e["type"] == "rank.grad_norm"]
    assert {e["data"]["step"] for e in norms} == {20} and sorted(e["data"]["rank"] for e in norms) == list(range(64))
    assert {e["time"][:19] for e in norms} == {"2026-01-05T00:02:01"}


def test_the_same_arguments_give_the_same_bytes_and_ids_stay_unique():
    first = list(telemetry(SMALL, start_s=600, seconds=30))
    again = list(telemetry(SMALL, start_s=600, seconds=30))
    assert json.dumps(first) == json.dumps(again)
    later = list(telemetry(SMALL, start_s=630, seconds=30))
    ids = [e["id"] for e in first + later]
    assert len(ids) == len(set(ids))


def test_a_slow_rank_in_the_samples_is_the_straggler_the_detector_flags():
    config = dataclasses.replace(SMALL, gpus=256)  # 32 nodes
    rates = TelemetryRates(step_time_every_s=60)
    window_s = 300
    windows = []
    for k in range(3):
        samples = {}
        for e in telemetry(config, rates, start_s=k * window_s, seconds=window_s, slow_ranks=frozenset({77})):
            if e["type"] == "rank.step_time":
                d = e["data"]
                samples.setdefault((d["rank"], d["node"]), []).append(d["seconds"])
        windows.append({key: sum(v) / len(v) for key, v in samples.items()})
    findings = detectors.stragglers(run=config.run, windows=windows, threshold_mads=3.5, consecutive=3)
    assert [f.node for f in findings] == ["tele-00009"]  # rank 77 on node 77 // 8


@pytest.mark.django_db
def test_the_stream_is_valid_and_applying_samples_costs_no_query_per_sample():
    events = list(telemetry(SMALL, TelemetryRates(step_time_every_s=1, grad_norm_every=1), start_s=1, seconds=5))
    parsed, problems = parse_events(events, max_batch=len(events))
    assert not problems
    samples = [e for e in parsed if e.type.startswith("rank.")]
    assert len(samples) >= 5 * 64  # a step time from every rank each second, and the norms
    ids = events_ingest(events=samples, backfill=True).event_ids  # inside the test's transaction: not applied yet
    events_apply(event_ids=ids)  # the run and the nodes are made
    assert Run.objects.filter(name="tele-run").exists()
    assert Node.objects.filter(hostname__startswith="tele-").count() == 8
    Event.objects.filter(pk__in=ids).update(applied_at=None)
    with CaptureQueriesContext(connection) as few:
        events_apply(event_ids=ids[:64])
    Event.objects.filter(pk__in=ids).update(applied_at=None)
    with CaptureQueriesContext(connection) as many:
        events_apply(event_ids=ids)
    # Claim, mark applied, look up and lock the run and the nodes: per chunk, whatever the samples in it.
    assert len(many) == len(few)
    assert not Event.objects.filter(pk__in=ids, applied_at=None).exists()


def test_the_131072_gpu_run_fails_at_the_projected_rate_and_checkpoints_at_dalys_interval():
    config = frontier_config(days=1)
    assert config.gpus == FRONTIER_GPUS and config.nodes == 16_384
    mttf_s = 3600 / (config.gpus * config.rate_per_gpu_hour)
    assert mttf_s == pytest.approx(0.23 * 3600)  # Kokolis et al.: 0.23 h at 131,072 GPUs
    blocking = config.checkpoint_blocking.mean  # (20 + 30 + 60) / 3
    assert config.checkpoint_interval_s == round(advisor.daly(delta_s=blocking, mtbf_s=FRONTIER_MTTF_S)) == 223
    # About 104 faults a wall-clock day at this rate; a day of the stream shows them within Poisson's spread.
    failures = sum(1 for e in simulate(config) if e["type"] == "run.failed" and not e["data"].get("planned"))
    expected = 86400 / mttf_s
    assert abs(failures - expected) < 4 * math.sqrt(expected)
