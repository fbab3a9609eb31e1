"""Detectors: plain data in, `Finding`s out, each with the sentence the on-call reads (docs/DOMAIN.md section 4).

Pure: no Django import, standard library only. Selectors fetch the readings and pass them in with an
explicit `now`. Times are timezone-aware datetimes; durations and thresholds are seconds unless a name
says otherwise (`_c` is degrees Celsius, `_mads` is scaled median absolute deviations).

A fingerprint names what a finding is about, not when: the same problem seen again gives the same
fingerprint, so the caller folds it into the alert already firing. Evidence holds only JSON-safe values
(no NaN or infinity: those become None) because it is stored as it is.
"""

from incidents.domain.detectors.faults import (
    SCHEDULER_OUT_STATES,
    hang,
    heartbeat_lost,
    job_unknown,
    node_state,
    run_silent,
    xids,
)
from incidents.domain.detectors.findings import (
    Finding,
)
from incidents.domain.detectors.fleet import (
    MAD_SCALE,
    lemons,
    silent_data_corruption,
    stragglers,
)
from incidents.domain.detectors.gpu import (
    HARDWARE_THROTTLE_REASONS,
    gpu_ecc,
    gpu_health,
)

__all__ = [
    "Finding",
    "HARDWARE_THROTTLE_REASONS",
    "MAD_SCALE",
    "SCHEDULER_OUT_STATES",
    "gpu_ecc",
    "gpu_health",
    "hang",
    "heartbeat_lost",
    "job_unknown",
    "lemons",
    "node_state",
    "run_silent",
    "silent_data_corruption",
    "stragglers",
    "xids",
]
