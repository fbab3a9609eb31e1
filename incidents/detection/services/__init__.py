"""Detection: applied events and periodic sweeps become findings (incidents/domain), then alerts (services).

Event-driven detectors run on each applied batch (`events_detect`); the watchdogs run on the beat schedule.
A hang is written back as a `run.failed` event of kind hang, so the record stays derived from events.
"""

from incidents.detection.services.events import (
    CHUNK,
    DETECTOR,
    WATCHDOG,
    events_detect,
    pending_detect,
)
from incidents.detection.services.reconcile import schedulers_reconcile
from incidents.detection.services.watchdogs import (
    hangs_detect,
    heartbeats_detect,
    lemons_detect,
    sdc_detect,
    silent_runs_detect,
    stragglers_detect,
)

__all__ = [
    "CHUNK",
    "DETECTOR",
    "WATCHDOG",
    "events_detect",
    "hangs_detect",
    "heartbeats_detect",
    "lemons_detect",
    "pending_detect",
    "schedulers_reconcile",
    "sdc_detect",
    "silent_runs_detect",
    "stragglers_detect",
]
