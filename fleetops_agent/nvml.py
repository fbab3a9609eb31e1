"""A thin layer over nvidia-ml-py (``pynvml``): the event set and the polled health readings.

Every call goes through the ``pynvml`` module at call time, so a fake (``fleetops_agent.fake_nvml``, or a
test's monkeypatch) can stand in at the level of nvidia-ml-py's own functions. A reading that a GPU or
driver does not support (NVML_ERROR_NOT_SUPPORTED and the like) is left out, never guessed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pynvml

log = logging.getLogger(__name__)

# what NVIDIA's Xid catalog says of the common ones (docs/DOMAIN.md section 4)
XID_MESSAGES = {
    13: "Graphics engine exception (application error)",
    31: "GPU memory page fault (application error)",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double-bit ECC error",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "Unrecovered ECC error",
    154: "GPU recovery action changed",
}

RECOVERY_ACTION_FIELD = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)

_EVENT_TYPES = {
    "xid": pynvml.nvmlEventTypeXidCriticalError,
    "sbe": pynvml.nvmlEventTypeSingleBitEccError,
    "dbe": pynvml.nvmlEventTypeDoubleBitEccError,
}
WANTED_EVENTS = _EVENT_TYPES["xid"] | _EVENT_TYPES["sbe"] | _EVENT_TYPES["dbe"]

# clock event (throttle) reason bits -> names; the ClocksEvent constants are the newer spelling
_REASONS = [
    ("gpu_idle", "GpuIdle"),
    ("applications_clocks_setting", "ApplicationsClocksSetting"),
    ("sw_power_cap", "SwPowerCap"),
    ("hw_slowdown", "HwSlowdown"),
    ("sync_boost", "SyncBoost"),
    ("sw_thermal_slowdown", "SwThermalSlowdown"),
    ("hw_thermal_slowdown", "HwThermalSlowdown"),
    ("hw_power_brake_slowdown", "HwPowerBrakeSlowdown"),
    ("display_clock_setting", "DisplayClockSetting"),
]
THROTTLE_BITS: list[tuple[int, str]] = []
for _name, _suffix in _REASONS:
    _bit = getattr(pynvml, "nvmlClocksEventReason" + _suffix, None) or getattr(
        pynvml, "nvmlClocksThrottleReason" + _suffix, None
    )
    if _bit:
        THROTTLE_BITS.append((int(_bit), _name))

_NVLINK_COUNTERS = [
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
]


class NoDriver(RuntimeError):
    """NVML could not be loaded or initialised: no NVIDIA driver on this machine."""


@dataclass(frozen=True)
class GpuEvent:
    gpu: int
    kind: str  # "xid", "sbe", "dbe"
    xid: int | None


def decode_throttle(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS if mask & bit]


def _try(fn, *args, default=None):
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        log.debug("%s%r: %s", getattr(fn, "__name__", fn), args[1:], exc)
        return default


class Nvml:
    def __init__(self) -> None:
        self.handles: list = []
        self.uuids: list[str | None] = []
        self.event_set = None

    def init(self) -> int:
        try:
            pynvml.nvmlInit()
        except (pynvml.NVMLError, OSError) as exc:
            raise NoDriver(str(exc)) from exc
        count = pynvml.nvmlDeviceGetCount()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.uuids = [_decode(_try(pynvml.nvmlDeviceGetUUID, h)) for h in self.handles]
        return count

    def shutdown(self) -> None:
        if self.event_set is not None:
            _try(pynvml.nvmlEventSetFree, self.event_set)
            self.event_set = None
        _try(pynvml.nvmlShutdown)

    def driver_version(self) -> str | None:
        return _decode(_try(pynvml.nvmlSystemGetDriverVersion))

    # -- events --------------------------------------------------------------------------------------

    def register_events(self) -> None:
        self.event_set = pynvml.nvmlEventSetCreate()
        for i, handle in enumerate(self.handles):
            supported = _try(pynvml.nvmlDeviceGetSupportedEventTypes, handle, default=WANTED_EVENTS)
            mask = WANTED_EVENTS & supported
            if not mask:
                log.warning("GPU %d supports none of the Xid/ECC events", i)
                continue
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, mask, self.event_set)
            except pynvml.NVMLError as exc:
                log.warning("GPU %d: could not register for events: %s", i, exc)

    def wait_event(self, timeout_ms: int) -> GpuEvent | None:
        """The next Xid/ECC event, or None after ``timeout_ms`` without one."""
        if self.event_set is None:
            return None
        try:
            data = pynvml.nvmlEventSetWait(self.event_set, timeout_ms)
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise
        gpu = self._index(data.device)
        kind = next((k for k, bit in _EVENT_TYPES.items() if data.eventType & bit), "xid")
        return GpuEvent(gpu, kind, int(data.eventData) if kind == "xid" else None)

    def _index(self, device) -> int:
        index = _try(pynvml.nvmlDeviceGetIndex, device)
        return int(index) if index is not None else 0

    # -- polled health -------------------------------------------------------------------------------

    def ecc(self, i: int) -> dict | None:
        """The gpu.ecc data of GPU ``i`` (volatile totals since the driver loaded), or None without ECC."""
        h = self.handles[i]
        corrected = _try(
            pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
        )
        uncorrected = _try(
            pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
        )
        if corrected is None or uncorrected is None:
            return None
        data: dict = {"corrected": int(corrected), "uncorrected": int(uncorrected)}
        remapped = _try(pynvml.nvmlDeviceGetRemappedRows, h)
        if remapped is not None:
            corr, unc, pending, failure = remapped
            data |= {
                "remapped_rows_corrected": int(corr),
                "remapped_rows_uncorrected": int(unc),
                "remapped_rows_pending": bool(pending),
                "remapped_rows_failure": bool(failure),
            }
        pages = [
            _try(pynvml.nvmlDeviceGetRetiredPages, h, cause)
            for cause in (
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            )
        ]
        if any(p is not None for p in pages):
            data["retired_pages"] = sum(len(p) for p in pages if p is not None)
        return data

    def health(self, i: int) -> dict | None:
        """The gpu.health data of GPU ``i`` (plus slowdown threshold and PCIe replays), or None."""
        h = self.handles[i]
        temperature = _try(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
        if temperature is None:
            return None
        # nvmlDeviceGetCurrentClocksEventReasons is the newer name (drivers >= 535); older ones only know Throttle
        mask = _try(getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", _missing), h)
        if mask is None:
            mask = _try(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h, default=0)
        data: dict = {
            "temperature_c": int(temperature),
            "throttle_reasons": decode_throttle(int(mask)),
            "nvlink_errors": self.nvlink_errors(i),
            "recovery_action": self.recovery_action(i),
        }
        slowdown = _try(pynvml.nvmlDeviceGetTemperatureThreshold, h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        if slowdown is not None:
            data["temperature_slowdown_c"] = int(slowdown)
            data["temperature_margin_c"] = int(slowdown) - int(temperature)
        replays = _try(pynvml.nvmlDeviceGetPcieReplayCounter, h)
        if replays is not None:
            data["pcie_replay_errors"] = int(replays)
        return data

    def nvlink_errors(self, i: int) -> int:
        h = self.handles[i]
        total = 0
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            state = _try(pynvml.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                continue  # no such link (or no NVLink at all)
            for counter in _NVLINK_COUNTERS:
                total += int(_try(pynvml.nvmlDeviceGetNvLinkErrorCounter, h, link, counter, default=0))
        return total

    def recovery_action(self, i: int) -> int:
        values = _try(pynvml.nvmlDeviceGetFieldValues, self.handles[i], [RECOVERY_ACTION_FIELD])
        if not values or values[0].nvmlReturn != pynvml.NVML_SUCCESS:
            return 0
        action = int(values[0].value.uiVal)
        return action if 0 <= action <= 4 else 0


def _missing(*args):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def _decode(value):
    return value.decode() if isinstance(value, bytes) else value
