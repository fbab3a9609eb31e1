import time

import pynvml
import pytest

from fleetops_agent import main as agent_main
from fleetops_agent.fake_nvml import FakeGpuModel
from fleetops_agent.main import Agent
from fleetops_agent.nvml import Nvml, decode_throttle
from fleetops_client.spool import Spool


@pytest.fixture
def gpus(monkeypatch):
    scenario = {
        "gpus": [
            {"uuid": "GPU-aaa", "temperature": 71, "slowdown": 87, "throttle": 0x40 | 0x4, "recovery_action": 2},
            {"uuid": "GPU-bbb", "nvlink_errors": 12, "pcie_replay": 3, "remapped": [1, 2, 1, 0], "retired_pages": 2},
        ]
    }
    return FakeGpuModel(scenario).install(monkeypatch.setattr)


def test_polls_every_health_signal(gpus):
    nvml = Nvml()
    assert nvml.init() == 2
    assert nvml.uuids == ["GPU-aaa", "GPU-bbb"]
    assert nvml.health(0) == {
        "temperature_c": 71,
        "throttle_reasons": ["sw_power_cap", "hw_thermal_slowdown"],
        "nvlink_errors": 0,
        "recovery_action": 2,
        "temperature_slowdown_c": 87,
        "temperature_margin_c": 16,
        "pcie_replay_errors": 0,
    }
    health = nvml.health(1)
    assert health["nvlink_errors"] == 12 and health["pcie_replay_errors"] == 3
    assert nvml.ecc(0) == {
        "corrected": 0,
        "uncorrected": 0,
        "remapped_rows_corrected": 0,
        "remapped_rows_uncorrected": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
    }  # no retired pages: not supported there, left out
    assert nvml.ecc(1)["remapped_rows_pending"] is True and nvml.ecc(1)["retired_pages"] == 2


def test_event_set_carries_xids_and_ecc(gpus):
    nvml = Nvml()
    nvml.init()
    nvml.register_events()
    assert gpus.registered == {0: 11, 1: 11}  # Xid | single-bit | double-bit
    gpus.raise_xid(1, 79)
    gpus.ecc_error(0, "dbe")
    first, second = nvml.wait_event(100), nvml.wait_event(100)
    assert (first.gpu, first.kind, first.xid) == (1, "xid", 79)
    assert (second.gpu, second.kind) == (0, "dbe")
    assert nvml.wait_event(100) is None  # NVML_ERROR_TIMEOUT
    assert nvml.ecc(0)["uncorrected"] == 1


def test_older_drivers_fall_back_to_throttle_reasons(gpus, monkeypatch):
    def missing(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", missing)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", lambda h: 0x20)
    nvml = Nvml()
    nvml.init()
    assert nvml.health(0)["throttle_reasons"] == ["sw_thermal_slowdown"]
    assert decode_throttle(0) == []


def test_an_xid_storm_becomes_one_event_with_its_count(gpus, tmp_path):
    nvml = Nvml()
    nvml.init()
    nvml.register_events()
    spool = Spool(tmp_path)
    agent = Agent(nvml, spool, None, node="gpu-001", cluster="c1", storm_s=60)
    gpus.raise_xid(0, 79, repeat=5000)
    gpus.raise_xid(0, 13)
    gpus.ecc_error(1, "sbe")
    agent.handle_events(0, until_quiet=True)
    agent.flush_storms(everything=True)
    events = [r.event for r in spool.all_records()]
    xids = sorted((e["data"]["xid"], e["data"]["count"]) for e in events if e["type"] == "gpu.xid")
    assert xids == [(13, 1), (79, 5000)]
    ecc = [e for e in events if e["type"] == "gpu.ecc"]
    assert [(e["data"]["gpu"], e["data"]["corrected"]) for e in ecc] == [(1, 1)]
    xid79 = next(e for e in events if e["type"] == "gpu.xid" and e["data"]["xid"] == 79)
    assert xid79["source"] == "fleetops-agent://c1/gpu-001"
    assert xid79["id"].startswith("gpu-001:gpu.xid:0:")
    assert xid79["data"]["uuid"] == "GPU-aaa" and "fallen off the bus" in xid79["data"]["message"]


def test_readings_every_nth_poll_and_a_heartbeat_every_poll(gpus, tmp_path):
    nvml = Nvml()
    nvml.init()
    spool = Spool(tmp_path)
    agent = Agent(nvml, spool, None, node="gpu-001", cluster="c1", storm_s=60, readings_every=3)
    for _ in range(7):
        agent.poll()
    events = [r.event for r in spool.all_records()]
    assert sum(e["type"] == "node.heartbeat" for e in events) == 7
    # Polls 1, 4 and 7 read every GPU: three readings of each type per GPU.
    gpus_n = len(nvml.handles)
    assert sum(e["type"] == "gpu.health" for e in events) == 3 * gpus_n
    assert sum(e["type"] == "gpu.ecc" for e in events) == 3 * gpus_n
    with pytest.raises(ValueError):
        Agent(nvml, spool, None, node="gpu-001", cluster="c1", storm_s=60, readings_every=0)


def test_without_a_driver_it_says_so(monkeypatch, tmp_path, capsys):
    def no_library():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    rc = agent_main.main(["--url", "http://127.0.0.1:9", "--token", "t", "--spool-dir", str(tmp_path), "--once"])
    assert rc == 3
    assert "no NVIDIA driver found: " in capsys.readouterr().err


def test_a_fault_injected_into_a_running_agent_comes_out_of_the_wait_and_an_idle_wait_blocks(monkeypatch, tmp_path):
    inject = tmp_path / "inject.jsonl"
    FakeGpuModel({"gpus": [{}, {}], "inject": str(inject)}).install(monkeypatch.setattr)
    nvml = Nvml()
    nvml.init()
    nvml.register_events()
    started = time.monotonic()
    assert nvml.wait_event(200) is None
    assert time.monotonic() - started >= 0.19  # waits out its timeout as the real call does: no busy loop
    inject.write_text('{"gpu": 1, "xid": 79}\n{"gpu": 0, "xid"')  # the second line is still being written
    event = nvml.wait_event(200)
    assert (event.gpu, event.xid) == (1, 79) and nvml.wait_event(0) is None
    with inject.open("a") as f:
        f.write(": 48}\n")
    assert nvml.wait_event(200).xid == 48
