"""The fleet simulator (runs/domain/simulator/) and `manage.py simulate`.

Counts are checked against docs/DOMAIN.md section 1 (Llama 3: 419 unexpected and 47 planned interruptions
in 54 days on 16,384 GPUs; Table 5 causes by count).
"""

import json
import math
import threading
from collections import Counter
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from runs.domain.cloudevents import EVENT_TYPES, parse_events, parse_time
from runs.domain.simulator import (
    DEFAULT_START,
    LLAMA3_RATE_PER_GPU_HOUR,
    XID_MESSAGES,
    SimulationConfig,
    Triangular,
    expected_unexpected,
    simulate,
    summary,
)
from runs.domain.taxonomy import CAUSES, XID_CAUSE, Cause
from runs.management.commands.simulate import Progress
from runs.models import Event, Run

# A week on 512 GPUs at 20x Llama 3's rate: about 30 stops, small enough to check event by event.
SMALL = SimulationConfig(gpus=512, days=7, rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * 20, planned_stops=2)


@pytest.fixture(scope="module")
def small():
    return list(simulate(SMALL))


@pytest.fixture(scope="module")
def full_scale():
    return summary(simulate(SimulationConfig()))


def of_type(events, kind):
    return [e for e in events if e["type"] == kind]


def dump(events) -> str:
    return "\n".join(json.dumps(e, separators=(",", ":")) for e in events)


def test_it_gives_the_same_stream_for_the_same_seed_and_another_for_another(small):
    assert dump(simulate(SMALL)) == dump(small)
    other = list(simulate(SimulationConfig(**{**SMALL.__dict__, "seed": 2})))
    assert dump(other) != dump(small)


def test_every_event_validates_and_the_stream_uses_the_event_types(small):
    events, problems = parse_events(small, max_batch=len(small))
    assert problems == [] and len(events) == len(small)
    kinds = {e["type"] for e in small}
    assert {"run.started", "run.step", "run.failed", "run.restored", "checkpoint.started"} <= kinds
    assert {"checkpoint.completed", "gpu.xid", "gpu.health", "node.state", "node.heartbeat"} <= kinds
    assert kinds <= set(EVENT_TYPES)


def test_events_are_in_time_order_with_unique_ids_and_none_after_the_end(small):
    events, _ = parse_events(small, max_batch=len(small))
    times = [e.time for e in events]
    assert times == sorted(times)
    assert times[0] == SMALL.start and times[-1] <= SMALL.end
    assert len({e.id for e in events}) == len(events)


def test_there_is_one_step_event_a_minute_of_training(small):
    events, _ = parse_events(small, max_batch=len(small))
    steps = [e for e in events if e.type == "run.step"]
    gaps = Counter((b.time - a.time).total_seconds() for a, b in zip(steps, steps[1:], strict=False))
    # Between two step events: a minute, or a minute plus a checkpoint's blocking, or a whole stop.
    assert gaps.most_common(1)[0][0] == 60.0
    assert min(gaps) >= 60.0


def test_at_full_scale_it_shows_llama3s_interruptions(full_scale):
    # Poisson 99.9% band around 419: 419 +- 3.29 sqrt(419).
    assert expected_unexpected(SimulationConfig()) == pytest.approx(419)
    assert 352 <= full_scale.unexpected <= 486
    assert 45 <= full_scale.planned <= 47
    assert full_scale.checkpoints > 1500
    minutes = 54 * 24 * 60
    assert 0.75 * minutes < full_scale.steps < minutes
    assert full_scale.events < 200_000


def test_the_planned_count_scales_with_days_and_fleet():
    assert SimulationConfig().planned_count == 47
    assert SimulationConfig(gpus=8192, days=27).planned_count == round(47 / 4)
    assert SimulationConfig(planned_stops=0).planned_count == 0


def test_causes_come_in_table_5_proportions():
    # Ten times Llama 3's rate on Llama 3's fleet: about 4,190 stops.
    config = SimulationConfig(rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * 10, planned_stops=0)
    seen = Counter(e["data"]["category"] for e in of_type(simulate(config), "run.failed"))
    total = sum(seen.values())
    assert total > 3500
    drawn = {cause: count for cause, (_, _, count) in CAUSES.items() if count}
    assert set(seen) <= {c.value for c in drawn}
    chi2 = sum((seen[c.value] - total * n / 419) ** 2 / (total * n / 419) for c, n in drawn.items())
    assert chi2 < 40.79  # chi-square, 17 degrees of freedom, p = 0.001


def test_a_restart_resumes_from_the_last_durable_checkpoint_and_steps_go_on_from_there(small):
    durable, last_fault = 0, None
    for event in small:
        data = event["data"]
        if event["type"] == "checkpoint.completed":
            durable = data["step"]
        elif event["type"] == "run.failed":
            last_fault = event
        elif event["type"] == "run.restored":
            assert last_fault is not None and data["from_step"] == durable
    restored = of_type(small, "run.restored")
    assert len(restored) == len(of_type(small, "run.failed")) >= 20
    assert any(r["data"]["from_step"] > 0 for r in restored)
    for r in restored:
        following = next(e for e in small[small.index(r) :] if e["type"] == "run.step")
        assert r["data"]["from_step"] < following["data"]["step"] <= r["data"]["from_step"] + 60 / SMALL.step_s


def test_a_gpu_fault_names_its_hardware_and_the_node_goes_to_repair_and_is_replaced(small):
    starts = of_type(small, "run.started")
    checked = 0
    for failed in of_type(small, "run.failed"):
        data = failed["data"]
        if "xid" in data:
            xid = next(e for e in of_type(small, "gpu.xid") if e["time"] == failed["time"])
            assert (xid["data"]["node"], xid["data"]["gpu"], xid["data"]["xid"]) == (
                data["node"],
                data["gpu"],
                data["xid"],
            )
            assert xid["data"]["message"] == XID_MESSAGES[data["xid"]][0]
            if data["xid"] in (79, 48, 64):  # Xids that name one cause (95 may be HBM3 or SRAM)
                assert XID_CAUSE[data["xid"]].value == data["category"]
        if "node" not in data:
            continue
        states = [
            e["data"]["state"]
            for e in of_type(small, "node.state")
            if e["data"]["node"] == data["node"] and e["time"] >= failed["time"]
        ]
        assert states[:2] == ["cordoned", "in_repair"]
        restart = next(s for s in starts if s["time"] > failed["time"])
        assert data["node"] not in restart["data"]["nodes"] and len(restart["data"]["nodes"]) == SMALL.nodes
        checked += 1
    assert checked >= 10


def test_a_repaired_gpu_is_read_clean_before_its_node_is_back(small):
    """Without it the record kept the fault's reading (a driver asking for a reboot, a pending row remap) on nodes
    back in service for ever, and FleetOps' own return-to-service gate failed every repaired node."""
    readings = [e for e in small if e["type"] in ("gpu.health", "gpu.ecc")]
    checked = 0
    for fault in readings:
        data = fault["data"]
        if not (data.get("recovery_action") or data.get("remapped_rows_pending") or data.get("remapped_rows_failure")):
            continue
        back = next(
            (
                e["time"]
                for e in of_type(small, "node.state")
                if e["data"]["node"] == data["node"] and e["time"] > fault["time"] and e["data"]["state"] == "hot_spare"
            ),
            None,
        )
        if back is None:
            continue  # still in repair when the stream ends
        clean = [
            e["data"]
            for e in readings
            if e["type"] == fault["type"]
            and (e["data"]["node"], e["data"]["gpu"]) == (data["node"], data["gpu"])
            and fault["time"] < e["time"] <= back
        ]
        assert clean and not any(
            d.get("recovery_action") or d.get("remapped_rows_pending") or d.get("remapped_rows_failure") for d in clean
        ), fault
        checked += 1
    assert checked >= 5


def test_detection_is_seconds_for_a_crash_and_minutes_for_a_hang(small):
    from runs.domain.cloudevents import parse_time

    for failed in of_type(small, "run.failed"):
        data = failed["data"]
        took = (parse_time(data["detected_at"]) - parse_time(failed["time"])).total_seconds()
        if data.get("planned"):
            assert took == 0
        elif data["category"] in ("nccl_watchdog", "network_switch_cable", "nic", "silent_data_corruption"):
            assert 600 <= took <= 1800
        else:
            assert 5 <= took <= 120


def test_planned_maintenance_stops_right_after_a_durable_checkpoint(small):
    planned = [e for e in of_type(small, "run.failed") if e["data"].get("planned")]
    assert len(planned) == 2
    for stop in planned:
        assert stop["data"]["category"] == Cause.PLANNED_MAINTENANCE.value
        saved = [e for e in of_type(small, "checkpoint.completed") if e["time"] == stop["time"]]
        assert len(saved) == 1
        restored = next(e for e in of_type(small, "run.restored") if e["time"] > stop["time"])
        assert restored["data"]["from_step"] == saved[0]["data"]["step"]


def test_it_refuses_a_config_it_cannot_simulate():
    with pytest.raises(ValueError, match="multiple"):
        SimulationConfig(gpus=100)
    with pytest.raises(ValueError, match="timezone"):
        SimulationConfig(start=datetime(2026, 1, 5))
    with pytest.raises(ValueError, match="cluster"):
        SimulationConfig(cluster="has space")
    with pytest.raises(ValueError, match="low"):
        Triangular(10, 5, 20)


def test_without_faults_it_trains_and_checkpoints_the_whole_time():
    config = SimulationConfig(gpus=16, days=1, rate_per_gpu_hour=0, planned_stops=0)
    result = summary(simulate(config))
    assert result.interruptions == 0 and result.checkpoints_lost == 0 and result.by_type["run.completed"] == 1
    # Every 30 min of training: 47 start in the day, the last one still draining at the end.
    assert result.by_type["checkpoint.started"] == 47 and result.checkpoints == 46
    assert 1400 < result.steps <= 1440


# --- the command ---------------------------------------------------------------------------------------

TINY_NOW = ["--gpus", "64", "--days", "2", "--rate", str(LLAMA3_RATE_PER_GPU_HOUR * 150), "--planned", "1"]
TINY = [*TINY_NOW, "--start", f"{DEFAULT_START:%Y-%m-%dT%H:%M:%SZ}"]  # tiny_config()'s window: the same stream


def command(*args) -> str:
    out = StringIO()
    call_command("simulate", *args, stdout=out)
    return out.getvalue()


def tiny_config() -> SimulationConfig:
    return SimulationConfig(gpus=64, days=2, rate_per_gpu_hour=LLAMA3_RATE_PER_GPU_HOUR * 150, planned_stops=1)


def test_it_applies_through_the_intake_and_the_record_holds_every_stop(db, django_capture_on_commit_callbacks):
    events = list(simulate(tiny_config()))
    failed = of_type(events, "run.failed")
    assert len(failed) >= 5
    with django_capture_on_commit_callbacks(execute=True):
        out = command(*TINY, "--apply")
    assert f"{len(events):,} events ({len(events):,} stored, 0 already there)" in out
    assert Event.objects.filter(applied_at__isnull=False).count() == len(events)
    run = Run.objects.get(name="llama3-405b-sim")
    interruptions = list(run.interruptions.order_by("number"))
    assert len(interruptions) == len(failed) and run.attempts.count() == len(of_type(events, "run.started"))
    assert sum(i.planned for i in interruptions) == 1 and run.state == "completed"
    # Every stop resumed, but the last one if the run ended while it was restarting.
    resumed = len(of_type(events, "run.restored"))
    assert resumed in (len(failed), len(failed) - 1)
    assert all(i.running_at and i.resumed_at for i in interruptions[:resumed])
    assert run.checkpoints.filter(status="completed").count() > 0


def test_a_run_left_running_has_no_end(tmp_path):
    path = tmp_path / "events.jsonl"
    command(*TINY, "--running", "--jsonl", str(path))
    assert '"run.completed"' not in path.read_text() and '"run.step"' in path.read_text()


def test_its_default_window_ends_now(tmp_path):
    """Without --start the run's days end now: one left running (--running) steps until now, where a fixed past
    start left a run the record calls running whose last step was months ago."""
    path = tmp_path / "events.jsonl"
    before = timezone.now()
    command("--gpus", "16", "--days", "2", "--rate", "0", "--planned", "0", "--running", "--jsonl", str(path))
    after = timezone.now()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    first = parse_time(events[0]["time"])
    assert before - timedelta(days=2, minutes=1) <= first <= after - timedelta(days=2)
    last_step = max(parse_time(e["time"]) for e in events if e["type"] == "run.step")
    assert before - timedelta(minutes=2) <= last_step <= after  # a step event each minute of training
    assert not of_type(events, "run.completed")


def test_it_writes_jsonl_that_parses_to_the_same_stream(tmp_path):
    path = tmp_path / "events.jsonl"
    out = command(*TINY, "--jsonl", str(path))
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == list(simulate(tiny_config()))
    assert out.startswith(f"{len(lines):,} events (written to {path})")
    assert "interruptions" in out and "checkpoints" in out


class _Intake(BaseHTTPRequestHandler):
    """A stand-in intake: records each batch, and answers 401 to a wrong token."""

    batches: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer good":
            self._answer(401, {"detail": "Unknown or revoked API token."})
            return
        assert self.headers["Content-Type"] == "application/cloudevents-batch+json"
        self.batches.append(body)
        self._answer(202, {"accepted": len(body), "duplicates": 0})

    def _answer(self, status, body):
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def intake():
    _Intake.batches = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Intake)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/v1/events"
    server.shutdown()
    server.server_close()


def test_it_posts_batches_with_the_token(intake):
    out = command(*TINY, "--url", intake, "--token", "good")
    sent = [event for batch in _Intake.batches for event in batch]
    assert sent == list(simulate(tiny_config()))
    assert all(len(batch) <= 1000 for batch in _Intake.batches) and len(_Intake.batches) == math.ceil(len(sent) / 1000)
    assert f"({len(sent):,} stored, 0 already there)" in out


def test_it_reports_a_refusal_with_the_status_and_the_answer(intake):
    with pytest.raises(CommandError, match=r"refused events 0-999 with HTTP 401 .*Unknown or revoked API token"):
        command(*TINY, "--url", intake, "--token", "bad")


def test_it_reports_an_intake_it_cannot_reach():
    with pytest.raises(CommandError, match="failed after 0 events"):
        command(*TINY, "--url", "http://127.0.0.1:9/api/v1/events")


def test_it_wants_exactly_one_destination():
    with pytest.raises(CommandError, match="one of the arguments"):
        command(*TINY)


def test_the_progress_line_counts_simulated_days():
    stream = StringIO()
    progress = Progress(SimulationConfig(gpus=16, days=1), stream=stream)
    progress.EVERY = 100
    events = list(simulate(SimulationConfig(gpus=16, days=1)))
    assert list(progress.track(events)) == events
    assert "simulated day" in stream.getvalue() and stream.getvalue().endswith("\n")


def test_a_naive_start_is_refused():
    with pytest.raises(CommandError, match="time zone"):
        command(*TINY, "--start", "2026-01-05T00:00:00", "--jsonl", "-")
