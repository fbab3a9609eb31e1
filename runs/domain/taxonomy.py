"""Root-cause taxonomy of training interruptions (docs/DOMAIN.md section 1, Llama 3 Table 5).

Pure data: no Django import. `Cause.value` is what the event API accepts as `category` and what the
record stores; `group` is the broader category the paper uses for its shares.
"""

import re
from enum import StrEnum


class Group(StrEnum):
    GPU = "GPU"
    HOST = "Host"
    NETWORK = "Network"
    DEPENDENCY = "Dependency"
    UNPLANNED_MAINTENANCE = "Unplanned maintenance"
    PLANNED_MAINTENANCE = "Planned maintenance"
    UNKNOWN = "Unknown"


class Cause(StrEnum):
    FAULTY_GPU = "faulty_gpu"
    GPU_HBM3 = "gpu_hbm3"
    SOFTWARE_BUG = "software_bug"
    NETWORK_SWITCH_CABLE = "network_switch_cable"
    HOST_MAINTENANCE = "host_maintenance"
    GPU_SRAM = "gpu_sram"
    GPU_SYSTEM_PROCESSOR = "gpu_system_processor"
    NIC = "nic"
    NCCL_WATCHDOG = "nccl_watchdog"
    SILENT_DATA_CORRUPTION = "silent_data_corruption"
    GPU_THERMAL = "gpu_thermal"
    SSD = "ssd"
    POWER_SUPPLY = "power_supply"
    SERVER_CHASSIS = "server_chassis"
    IO_EXPANSION_BOARD = "io_expansion_board"
    DEPENDENCY = "dependency"
    CPU = "cpu"
    SYSTEM_MEMORY = "system_memory"
    PLANNED_MAINTENANCE = "planned_maintenance"
    UNKNOWN = "unknown"


# (label, group, count among Llama 3's 419 unexpected interruptions)
CAUSES: dict[Cause, tuple[str, Group, int]] = {
    Cause.FAULTY_GPU: ("Faulty GPU", Group.GPU, 148),
    Cause.GPU_HBM3: ("GPU HBM3 memory", Group.GPU, 72),
    Cause.SOFTWARE_BUG: ("Software bug", Group.DEPENDENCY, 54),
    Cause.NETWORK_SWITCH_CABLE: ("Network switch/cable", Group.NETWORK, 35),
    Cause.HOST_MAINTENANCE: ("Host maintenance", Group.UNPLANNED_MAINTENANCE, 32),
    Cause.GPU_SRAM: ("GPU SRAM memory", Group.GPU, 19),
    Cause.GPU_SYSTEM_PROCESSOR: ("GPU system processor", Group.GPU, 17),
    Cause.NIC: ("NIC", Group.HOST, 7),
    Cause.NCCL_WATCHDOG: ("NCCL watchdog timeouts", Group.UNKNOWN, 7),
    Cause.SILENT_DATA_CORRUPTION: ("Silent data corruption", Group.GPU, 6),
    Cause.GPU_THERMAL: ("GPU thermal interface + sensor", Group.GPU, 6),
    Cause.SSD: ("SSD", Group.HOST, 3),
    Cause.POWER_SUPPLY: ("Power supply", Group.HOST, 3),
    Cause.SERVER_CHASSIS: ("Server chassis", Group.HOST, 2),
    Cause.IO_EXPANSION_BOARD: ("IO expansion board", Group.HOST, 2),
    Cause.DEPENDENCY: ("Dependency", Group.DEPENDENCY, 2),
    Cause.CPU: ("CPU", Group.HOST, 2),
    Cause.SYSTEM_MEMORY: ("System memory", Group.HOST, 2),
    Cause.PLANNED_MAINTENANCE: ("Planned maintenance", Group.PLANNED_MAINTENANCE, 0),
    Cause.UNKNOWN: ("Unknown", Group.UNKNOWN, 0),
}

# The cause a bare Xid points at when the reporter named none (NVIDIA's Xid catalog, docs/DOMAIN.md section 4).
XID_CAUSE: dict[int, Cause] = {
    13: Cause.SOFTWARE_BUG,
    31: Cause.SOFTWARE_BUG,
    48: Cause.GPU_HBM3,
    62: Cause.GPU_SYSTEM_PROCESSOR,
    63: Cause.GPU_HBM3,
    64: Cause.GPU_HBM3,
    74: Cause.NETWORK_SWITCH_CABLE,
    79: Cause.FAULTY_GPU,
    92: Cause.GPU_HBM3,
    94: Cause.GPU_HBM3,
    95: Cause.GPU_HBM3,
    109: Cause.FAULTY_GPU,
    119: Cause.GPU_SYSTEM_PROCESSOR,
    120: Cause.GPU_SYSTEM_PROCESSOR,
    140: Cause.GPU_HBM3,
}


def _key(text: str) -> str:
    """Case, spaces and punctuation forgiven: "Network switch/cable", "network_switch_cable" and "GPU thermal
    interface + sensor" all come down to their letters and digits, joined by "_"."""
    return "_".join(re.findall(r"[a-z0-9]+", text.lower()))


# Each cause under its slug and under the label Llama 3's Table 5 prints.
_BY_KEY = {_key(name): cause for cause, (label, _group, _count) in CAUSES.items() for name in (cause.value, label)}


def cause_named(text: str) -> Cause | None:
    """The cause a sender names, by its slug or its published label ("Faulty GPU"); None if it names none."""
    return _BY_KEY.get(_key(text))


def cause_label(cause: str) -> str:
    return CAUSES[Cause(cause)][0]


def cause_group(cause: str) -> Group:
    return CAUSES[Cause(cause)][1]


def infer_cause(*, category: str | None, xid: int | None, planned: bool) -> Cause:
    """The cause of an interruption: as reported, else from its Xid, else unknown."""
    if category:
        return Cause(category)
    if planned:
        return Cause.PLANNED_MAINTENANCE
    if xid is not None and xid in XID_CAUSE:
        return XID_CAUSE[xid]
    return Cause.UNKNOWN
