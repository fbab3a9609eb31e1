"""An incident's severity as its impact grades it (incidents/domain/severity.py, docs/DOMAIN.md section 6): the one
reading of the thresholds and of the figures that the grading service, the incident page and the API share."""

from dataclasses import dataclass, replace
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from incidents.domain import severity as rules
from incidents.domain.alert_kinds import RUN_STOPS
from incidents.models import Alert, Incident
from incidents.selectors.impact import Impact, cost_per_minute_usd
from runs.models import Interruption

_FIGURES = {"gpus": int, "runs": int, "gpu_hours": float}


def severity_thresholds() -> tuple[rules.Thresholds, rules.Thresholds]:
    """SEV1's and SEV2's thresholds: the domain's defaults, with what INCIDENT_SEV1 and INCIDENT_SEV2 give
    ("gpus=256,runs=2,gpu_hours=100") and INCIDENT_SEV<n>_USD_PER_MIN over them."""
    levels = []
    for n, default in ((1, rules.SEV1), (2, rules.SEV2)):
        name, given = f"INCIDENT_SEV{n}", dict(getattr(settings, f"INCIDENT_SEV{n}", {}))
        unknown = set(given) - set(_FIGURES)
        if unknown:
            raise ImproperlyConfigured(f"{name}: {', '.join(sorted(unknown))} is no threshold ({', '.join(_FIGURES)})")
        try:
            figures = {key: _FIGURES[key](value) for key, value in given.items()}
        except ValueError as error:
            raise ImproperlyConfigured(f"{name}: {error}") from error
        usd = getattr(settings, f"{name}_USD_PER_MIN", None)
        levels.append(replace(default, **figures, **({"usd_per_min": usd} if usd is not None else {})))
    sev1, sev2 = levels
    for key in ("gpus", "runs", "gpu_hours", "usd_per_min"):
        one, two = getattr(sev1, key), getattr(sev2, key)
        if one is not None and two is not None and one < two:
            raise ImproperlyConfigured(f"SEV1's {key} ({one}) is below SEV2's ({two}): INCIDENT_SEV1, INCIDENT_SEV2")
    return sev1, sev2


@dataclass(frozen=True)
class SeverityGrade:
    """What impact grades an incident now, the figures it read and the thresholds it read them against."""

    grade: rules.Grade
    figures: rules.Figures
    sev1: rules.Thresholds
    sev2: rules.Thresholds
    current: str = ""  # the incident's severity as it was read
    set_by_hand: bool = False

    @property
    def severity(self) -> str:
        return self.grade.severity

    @property
    def note(self) -> str:
        """Why the incident's severity differs from this grade, in words; "" when it does not."""
        if not self.current or self.current == self.severity:
            return ""
        if self.set_by_hand:
            return f"It stays {self.current}, set by hand, until impact grades worse than when it was set."
        if rules.more_severe(self.current, self.severity) == self.severity:
            return f"It is {self.current} until the minute sweep raises it."
        return f"It stays {self.current}: FleetOps never lowers a severity (the worst its impact graded stays)."

    def thresholds(self) -> dict[str, str]:
        """{"SEV1": "1,024 GPUs ($42.67/min) idled, 3 runs affected or 1,000 GPU-h lost ($2,500)", "SEV2": ...}"""
        price = settings.GPU_HOUR_COST_USD
        return {"SEV1": rules.describe(self.sev1, price), "SEV2": rules.describe(self.sev2, price)}


def incident_grade_get(
    *, incident: Incident, impact: Impact | None, alerts: list[Alert] | None = None
) -> SeverityGrade:
    """The severity the incident's impact grades (docs/DOMAIN.md section 6), from the record rather than the moment:
    the GPUs its faults idled (now or before), the GPU-hours they lost so far, the runs its faults hit; so a replay
    grades as the live stream did once it was over. Without `impact` (an alert opened or cleared), what the alerts say
    at once: a run's fault idles its GPUs, nothing lost is counted yet. `alerts`: the incident's, where read already."""
    run = incident.run
    if impact is None:
        faulted = run is not None and _any(incident, alerts, lambda a: a.kind in RUN_STOPS, kind__in=RUN_STOPS)
        gpus, lost, runs = (run.gpu_count if faulted else 0), None, int(run is not None)
    else:
        gpus, lost, runs = impact.gpus_idled, impact.gpu_hours_lost, _runs_affected(incident)
    # Asked only where it can count: an incident that hits a run or its GPUs is SEV3 or worse without it.
    firing_critical = {"status": "firing", "severity": "critical"}
    critical = not (gpus or lost or runs) and _any(
        incident, alerts, lambda a: all(getattr(a, k) == v for k, v in firing_critical.items()), **firing_critical
    )
    figures = rules.Figures(
        gpus_idled=gpus,
        runs_affected=runs,
        gpu_hours_lost=lost,
        usd_per_min=cost_per_minute_usd(gpus),
        critical_alert=critical,
    )
    sev1, sev2 = severity_thresholds()
    grade = rules.grade(figures, sev1=sev1, sev2=sev2, usd_per_gpu_hour=settings.GPU_HOUR_COST_USD)
    return SeverityGrade(grade, figures, sev1, sev2, incident.severity, incident.severity_overridden)


def _any(incident: Incident, alerts: list[Alert] | None, test, **where) -> bool:
    """Whether one of its alerts passes `test`: in `alerts` when read already, else asked of the database (an
    incident of 16,384 alerts is not read whole for one yes or no)."""
    if alerts is not None:
        return any(test(alert) for alert in alerts)
    return incident.alerts.filter(**where).exists()


def _runs_affected(incident: Incident) -> int:
    """Its run, and the other runs a fault on its nodes stopped within the grouping window of its start (one switch
    or node taking two jobs down): what the runs threshold counts. The other runs' faults in the window are read first
    and the incident's nodes only for theirs: most windows hold none, and an incident of 16,384 nodes polled every
    10 s is not joined to its nodes for nothing."""
    window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
    others = list(
        Interruption.objects.filter(
            planned=False,
            fault_at__gte=incident.started_at - window,
            fault_at__lte=incident.started_at + window,
            node__isnull=False,
        )
        .exclude(run_id=incident.run_id)
        .values_list("node_id", "run_id")
    )
    through = Incident.nodes.through.objects.filter(incident_id=incident.pk)
    hit = (
        set(through.filter(node_id__in={node for node, _ in others}).values_list("node_id", flat=True))
        if others
        else set()
    )
    return len({incident.run_id, *(run for node, run in others if node in hit)} - {None})
