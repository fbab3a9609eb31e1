"""A fake GPU model standing in for nvidia-ml-py at the level of its ``pynvml`` functions.

Used by the tests (through monkeypatch) and by ``fleetops-agent --fake``, which reads a scenario from the
JSON file named by ``FLEETOPS_AGENT_FAKE_NVML`` (two healthy GPUs without one)::

    {"driver": "550.54.15",
     "gpus": [{"uuid": "GPU-0", "temperature": 61, "slowdown": 90, "throttle": 0, "corrected": 0,
               "uncorrected": 0, "remapped": [0, 0, 0, 0], "retired_pages": null, "nvlinks": 4,
               "nvlink_errors": 0, "pcie_replay": 0, "recovery_action": 0}],
     "events": [{"gpu": 0, "xid": 79, "repeat": 500}, {"gpu": 0, "ecc": "dbe"}]}

Queued events come out of ``nvmlEventSetWait`` in order; after them it waits out its timeout like the real call.
A scenario may also name ``"inject": "/path/file.jsonl"``: each line appended there later (an event as in
``events``) is raised while the agent runs, which is how the tests inject a fault into a running agent.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from types import SimpleNamespace

import pynvml

ENV = "FLEETOPS_AGENT_FAKE_NVML"

_DEFAULT_GPU = {
    "temperature": 60,
    "slowdown": 90,
    "throttle": 0,
    "corrected": 0,
    "uncorrected": 0,
    "remapped": [0, 0, 0, 0],
    "retired_pages": None,  # None: not supported (Ampere and later remap rows instead)
    "nvlinks": 4,
    "nvlink_errors": 0,
    "pcie_replay": 0,
    "recovery_action": 0,
}


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeGpuModel:
    def __init__(self, scenario: dict | None = None):
        scenario = scenario or {"gpus": [{}, {}]}
        self.driver = scenario.get("driver", "550.54.15")
        self.gpus = []
        for i, gpu in enumerate(scenario.get("gpus", [])):
            merged = dict(_DEFAULT_GPU) | {"uuid": f"GPU-fake-{i:04d}"} | gpu
            self.gpus.append(merged)
        self.queue: deque = deque()
        self.inject = scenario.get("inject")
        self._injected = 0  # bytes of the inject file already raised
        self.initialised = False
        self.registered: dict[int, int] = {}
        self.raise_events(scenario.get("events", []))

    def raise_events(self, events: list[dict]) -> None:
        for event in events:
            if "xid" in event:
                self.raise_xid(event["gpu"], event["xid"], event.get("repeat", 1))
            elif "ecc" in event:
                self.ecc_error(event["gpu"], event["ecc"], event.get("repeat", 1))

    def _read_injected(self) -> None:
        if not self.inject:
            return
        try:
            with open(self.inject, "rb") as f:
                f.seek(self._injected)
                data = f.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]  # whole lines only: the writer may be mid-line
        self._injected += len(complete)
        self.raise_events([json.loads(line) for line in complete.splitlines() if line.strip()])

    @classmethod
    def from_env(cls) -> FakeGpuModel:
        path = os.environ.get(ENV)
        if not path:
            return cls()
        with open(path) as f:
            return cls(json.load(f))

    # -- driving the model ---------------------------------------------------------------------------

    def raise_xid(self, gpu: int, xid: int, repeat: int = 1) -> None:
        for _ in range(repeat):
            self.queue.append((gpu, pynvml.nvmlEventTypeXidCriticalError, xid))

    def ecc_error(self, gpu: int, kind: str = "sbe", repeat: int = 1) -> None:
        for _ in range(repeat):
            if kind == "dbe":
                self.gpus[gpu]["uncorrected"] += 1
                self.queue.append((gpu, pynvml.nvmlEventTypeDoubleBitEccError, 0))
            else:
                self.gpus[gpu]["corrected"] += 1
                self.queue.append((gpu, pynvml.nvmlEventTypeSingleBitEccError, 0))

    # -- the pynvml functions ------------------------------------------------------------------------

    def _gpu(self, handle) -> dict:
        if not self.initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        return self.gpus[handle.index]

    def functions(self) -> dict:
        model = self

        def nvmlInit():
            model.initialised = True

        def nvmlShutdown():
            model.initialised = False

        def nvmlDeviceGetCount():
            return len(model.gpus)

        def nvmlDeviceGetHandleByIndex(i):
            if not 0 <= i < len(model.gpus):
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return SimpleNamespace(index=i)

        def nvmlDeviceGetIndex(handle):
            return handle.index

        def nvmlDeviceGetUUID(handle):
            return model._gpu(handle)["uuid"]

        def nvmlSystemGetDriverVersion():
            return model.driver

        def nvmlEventSetCreate():
            return SimpleNamespace(fake_event_set=True)

        def nvmlEventSetFree(event_set):
            return None

        def nvmlDeviceGetSupportedEventTypes(handle):
            model._gpu(handle)
            return (
                pynvml.nvmlEventTypeXidCriticalError
                | pynvml.nvmlEventTypeSingleBitEccError
                | pynvml.nvmlEventTypeDoubleBitEccError
            )

        def nvmlDeviceRegisterEvents(handle, mask, event_set):
            model.registered[handle.index] = mask

        def nvmlEventSetWait(event_set, timeout_ms):
            deadline = time.monotonic() + timeout_ms / 1000
            while True:
                model._read_injected()
                while model.queue:
                    gpu, kind, data = model.queue.popleft()
                    if model.registered.get(gpu, 0) & kind:
                        return SimpleNamespace(device=SimpleNamespace(index=gpu), eventType=kind, eventData=data)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _error(pynvml.NVML_ERROR_TIMEOUT)
                time.sleep(min(left, 0.05))

        def nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type):
            gpu = model._gpu(handle)
            return gpu["corrected"] if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu["uncorrected"]

        def nvmlDeviceGetRemappedRows(handle):
            return tuple(model._gpu(handle)["remapped"])

        def nvmlDeviceGetRetiredPages(handle, cause):
            pages = model._gpu(handle)["retired_pages"]
            if pages is None:
                raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return list(range(pages)) if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else []

        def nvmlDeviceGetTemperature(handle, sensor):
            return model._gpu(handle)["temperature"]

        def nvmlDeviceGetTemperatureThreshold(handle, threshold):
            return model._gpu(handle)["slowdown"]

        def nvmlDeviceGetCurrentClocksEventReasons(handle):
            return model._gpu(handle)["throttle"]

        def nvmlDeviceGetNvLinkState(handle, link):
            if link >= model._gpu(handle)["nvlinks"]:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return 1

        def nvmlDeviceGetNvLinkErrorCounter(handle, link, counter):
            # all of a GPU's NVLink errors are reported as replays of its first link
            gpu = model._gpu(handle)
            return gpu["nvlink_errors"] if link == 0 and counter == pynvml.NVML_NVLINK_ERROR_DL_REPLAY else 0

        def nvmlDeviceGetPcieReplayCounter(handle):
            return model._gpu(handle)["pcie_replay"]

        def nvmlDeviceGetFieldValues(handle, field_ids):
            gpu = model._gpu(handle)
            out = []
            for field in field_ids:
                if field == 230:
                    value = SimpleNamespace(uiVal=gpu["recovery_action"])
                    out.append(SimpleNamespace(fieldId=field, nvmlReturn=pynvml.NVML_SUCCESS, value=value))
                else:
                    out.append(SimpleNamespace(fieldId=field, nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, value=None))
            return out

        found = dict(locals())
        return {name: fn for name, fn in found.items() if name.startswith("nvml")}

    def install(self, setattr_=setattr) -> FakeGpuModel:
        """Replace pynvml's functions with this model's (``monkeypatch.setattr`` in tests)."""
        for name, fn in self.functions().items():
            setattr_(pynvml, name, fn)
        return self
