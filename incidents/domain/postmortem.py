"""The postmortem draft: Markdown written from the incident's record (docs/DOMAIN.md section 5).

Pure: no Django import. The selector (incidents.postmortems.services) gathers the facts into these dataclasses and
calls `draft()`; every duration in the output is in minutes, every input duration in seconds.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from statistics import median

import nh3
from markdown_it import MarkdownIt

from incidents.domain.playbooks import status_words
from runs.domain.numbers import number_text

SEVERITIES = ("SEV1", "SEV2", "SEV3", "SEV4")
# Detection counts as slow when it took this many times the usual (the median of earlier incidents).
SLOW_DETECTION_FACTOR = 1.5
# A checkpoint interval this many times off the advised one (either way) is worth a line.
CHECKPOINT_OFF_FACTOR = 2.0


@dataclass(frozen=True)
class StepFact:
    name: str
    status: str
    seconds: float | None
    approver_role: str = ""
    approved_by: str = ""


@dataclass(frozen=True)
class PlaybookFact:
    name: str
    status: str
    started_by: str
    started_at: datetime
    finished_at: datetime | None
    steps: tuple[StepFact, ...] = ()
    node: str = ""
    dry_run: bool = False
    error: str = ""


@dataclass(frozen=True)
class InterruptionFact:
    cause: str  # a runs.domain.taxonomy.Cause value
    cause_label: str
    cause_group: str
    fault_at: datetime
    node: str = ""
    gpu: int | None = None
    xid: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class AlertFact:
    kind: str
    severity: str
    summary: str
    count: int
    node: str = ""


@dataclass(frozen=True)
class HardwareFact:
    """The culprit and what the record knew about it: counters and how often it failed before this incident."""

    node: str
    gpu: int | None = None
    serial: str = ""
    xid_count: int = 0
    last_xid: int | None = None
    ecc_uncorrected: int = 0
    retired_pages: int = 0
    remapped_rows_uncorrected: int = 0
    earlier_interruptions: int = 0
    earlier_incidents: int = 0
    node_url: str = ""


@dataclass(frozen=True)
class Milestones:
    """When the incident's stages began and ended (UTC); None where the record does not say."""

    started_at: datetime
    detected_at: datetime
    acknowledged_at: datetime | None = None
    mitigated_at: datetime | None = None
    repair_at: datetime | None = None  # the culprit was sent to repair
    gate_at: datetime | None = None  # its return gate (diagnostics, all-reduce, burn-in) began
    returned_at: datetime | None = None  # it passed the gate and rejoined the pool
    resolved_at: datetime | None = None


@dataclass(frozen=True)
class PostmortemFacts:
    incident_id: int
    title: str
    severity: str
    milestones: Milestones
    gpu_hours_lost: float = 0.0
    goodput_lost: float = 0.0  # a fraction of the run's GPU-hours
    rewound_min: float = 0.0
    runs_affected: tuple[str, ...] = ()
    gpus_affected: int = 0
    severity_minutes: dict[str, float] = field(default_factory=dict)
    interruptions: tuple[InterruptionFact, ...] = ()
    playbooks: tuple[PlaybookFact, ...] = ()
    alerts: tuple[AlertFact, ...] = ()
    culprit: HardwareFact | None = None
    usual_detection_s: float | None = None  # median detection time of earlier incidents
    checkpoint_interval_s: float | None = None
    advised_interval_s: float | None = None  # Daly's optimum for the run (runs.domain.advisor)
    links: dict[str, str] = field(default_factory=dict)  # label -> URL of the data behind the numbers


@dataclass(frozen=True)
class Stage:
    name: str
    start: datetime | None
    end: datetime | None
    meaning: str

    @property
    def minutes(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max((self.end - self.start).total_seconds(), 0.0) / 60


def stages(m: Milestones) -> list[Stage]:
    """The five stages of docs/DOMAIN.md section 5. Diagnose overlaps stabilize: the culprit is found while the run
    is moved off it, so each stage names its own boundaries rather than tiling the incident."""
    return [
        Stage("detect", m.started_at, m.detected_at, "fault → FleetOps noticed"),
        Stage("stabilize", m.detected_at, m.mitigated_at, "noticed → the run trains again"),
        Stage("diagnose", m.detected_at, m.repair_at, "noticed → culprit identified and sent to repair"),
        Stage("repair", m.repair_at, m.gate_at, "sent to repair → return gate began"),
        Stage("return through the gate", m.gate_at, m.returned_at, "gate began → passed, back in the pool"),
    ]


def severity_minutes(
    *, initial: str, changes: Iterable[tuple[datetime, str]], start: datetime, end: datetime
) -> dict[str, float]:
    """Minutes spent at each severity between start and end, given the severity at start and later changes."""
    spent = dict.fromkeys(SEVERITIES, 0.0)
    current, since = initial, start
    for at, severity in sorted(changes):
        at = min(max(at, start), end)
        spent[current] = spent.get(current, 0.0) + (at - since).total_seconds() / 60
        current, since = severity, at
    spent[current] = spent.get(current, 0.0) + max((end - since).total_seconds(), 0.0) / 60
    return {severity: minutes for severity, minutes in spent.items() if minutes > 0}


def usual_detection_s(detections_s: Iterable[float]) -> float | None:
    values = [s for s in detections_s if s is not None]
    return median(values) if values else None


def root_cause(interruptions: Iterable[InterruptionFact]) -> InterruptionFact | None:
    """The most frequent unplanned cause among the incident's interruptions (ties: the earliest fault)."""
    faults = sorted(interruptions, key=lambda i: i.fault_at)
    if not faults:
        return None
    counts: dict[str, int] = {}
    for fault in faults:
        counts[fault.cause] = counts.get(fault.cause, 0) + 1
    best = max(counts.values())
    return next(fault for fault in faults if counts[fault.cause] == best)


def _min(minutes: float | None) -> str:
    return number_text(minutes, 1)  # "—" for None


def _time(moment: datetime | None) -> str:
    return "—" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def assessment(facts: PostmortemFacts) -> tuple[list[str], list[str]]:
    """(went well, went badly), each a list of sentences drawn from the record."""
    good: list[str] = []
    bad: list[str] = []
    m = facts.milestones
    detect_s = max((m.detected_at - m.started_at).total_seconds(), 0.0)
    usual = facts.usual_detection_s
    if usual is not None and detect_s > SLOW_DETECTION_FACTOR * max(usual, 1.0):
        bad.append(f"Detection took {_min(detect_s / 60)} min, slower than the usual {_min(usual / 60)} min.")
    elif usual is not None:
        good.append(f"Detected in {_min(detect_s / 60)} min (usual: {_min(usual / 60)} min).")
    for playbook in facts.playbooks:
        if playbook.dry_run:
            continue
        waited = [s for s in playbook.steps if s.approver_role]
        for step in waited:
            who = f", approved by {step.approved_by}" if step.approved_by else ", never approved"
            bad.append(
                f"Playbook {playbook.name} waited for approval by {step.approver_role} "
                f"at step '{step.name}' ({_min(None if step.seconds is None else step.seconds / 60)} min{who})."
            )
        if playbook.status == "succeeded" and not waited and playbook.started_by == "FleetOps":
            took = (
                ""
                if playbook.finished_at is None
                else f" in {_min((playbook.finished_at - playbook.started_at).total_seconds() / 60)} min"
            )
            good.append(f"Playbook {playbook.name} ran with no human{took}.")
        elif playbook.status in ("failed", "aborted"):
            bad.append(
                f"Playbook {playbook.name} {playbook.status}" + (f": {playbook.error}" if playbook.error else ".")
            )
    if m.mitigated_at is not None:
        good.append(
            f"The run trained again {_min((m.mitigated_at - m.started_at).total_seconds() / 60)} min after the fault."
        )
    current, advised = facts.checkpoint_interval_s, facts.advised_interval_s
    if current and advised:
        ratio = current / advised
        if ratio >= CHECKPOINT_OFF_FACTOR or ratio <= 1 / CHECKPOINT_OFF_FACTOR:
            bad.append(
                f"The checkpoint interval was {_min(current / 60)} min, far from the advised {_min(advised / 60)} min "
                f"(x{number_text(ratio, 1)}): rewound work was {_min(facts.rewound_min)} min."
            )
        else:
            good.append(
                f"The checkpoint interval ({_min(current / 60)} min) was close to the advised {_min(advised / 60)} min."
            )
    return good, bad


def contributing_factors(facts: PostmortemFacts) -> list[str]:
    factors = []
    culprit = facts.culprit
    if culprit is not None:
        if culprit.earlier_interruptions:
            factors.append(f"{culprit.node} had {culprit.earlier_interruptions} earlier interruption(s) on record.")
        if culprit.earlier_incidents:
            factors.append(f"{culprit.node} was in {culprit.earlier_incidents} earlier incident(s).")
        if culprit.ecc_uncorrected or culprit.retired_pages or culprit.remapped_rows_uncorrected:
            factors.append(
                f"The GPU showed memory wear: {culprit.ecc_uncorrected} uncorrected ECC, "
                f"{culprit.retired_pages} retired pages, {culprit.remapped_rows_uncorrected} uncorrectable remaps."
            )
    storms = [a for a in facts.alerts if a.count >= 100]
    for alert in storms:
        occurrences = number_text(alert.count)
        factors.append(f"An alert storm ({alert.kind}, {occurrences} occurrences) was folded into one alert.")
    if len(facts.interruptions) > 1:
        factors.append(f"The run was interrupted {len(facts.interruptions)} times within the incident.")
    return factors


def suggested_actions(facts: PostmortemFacts) -> list[str]:
    actions = []
    culprit = facts.culprit
    if culprit is not None:
        where = culprit.node + (f" GPU {culprit.gpu}" if culprit.gpu is not None else "")
        actions.append(f"Confirm the repair of {where} and that it passed the return gate.")
        if culprit.earlier_interruptions or culprit.earlier_incidents:
            actions.append(f"Decide whether {where} should be retired or RMA'd: it failed before.")
    _, bad = assessment(facts)
    if facts.checkpoint_interval_s and facts.advised_interval_s and any("checkpoint interval" in b for b in bad):
        actions.append(f"Set the run's checkpoint interval near {_min(facts.advised_interval_s / 60)} min.")
    if any("waited for approval" in b for b in bad):
        actions.append("Review whether the approval gate on this playbook step is still needed.")
    if any(b.startswith("Detection took") for b in bad):
        actions.append("Find why detection was slow and tighten the detector.")
    return actions


def draft(facts: PostmortemFacts) -> str:
    """The postmortem as Markdown: impact, stages, playbook steps with minutes, cause, factors, assessment."""
    m = facts.milestones
    cause = root_cause(facts.interruptions)
    lines = [f"# Postmortem: #{facts.incident_id} {facts.title}", ""]
    lines += ["## Summary", ""]
    summary = f"{facts.severity} incident"
    if facts.runs_affected:
        summary += f" on run {', '.join(facts.runs_affected)}"
    summary += f", started {_time(m.started_at)}"
    if cause is not None:
        summary += f"; root cause: {cause.cause_label} ({cause.cause_group})"
    if facts.culprit is not None:
        summary += f" on {facts.culprit.node}" + (f" GPU {facts.culprit.gpu}" if facts.culprit.gpu is not None else "")
    lines += [summary + ".", "", "_Drafted by FleetOps from the record; edit freely._", ""]

    lines += ["## Impact", ""]
    lines += [
        f"- GPU-hours lost: {number_text(facts.gpu_hours_lost, 1)}",
        f"- Goodput lost: {number_text(facts.goodput_lost * 100, 2)} % of the run's GPU-hours",
        f"- Work rewound: {_min(facts.rewound_min)} min",
        f"- Runs affected: {len(facts.runs_affected)}"
        + (f" ({', '.join(facts.runs_affected)})" if facts.runs_affected else ""),
        f"- GPUs affected: {number_text(facts.gpus_affected)}",
    ]
    if facts.severity_minutes:
        at_each = ", ".join(f"{s} {_min(minutes)} min" for s, minutes in facts.severity_minutes.items())
        lines.append(f"- Minutes at each severity: {at_each}")
    lines.append("")

    lines += ["## Timeline", "", "| Stage | From | To | Minutes |", "|---|---|---|---|"]
    for stage in stages(m):
        lines.append(f"| {stage.name} | {_time(stage.start)} | {_time(stage.end)} | {_min(stage.minutes)} |")
    lines.append("")
    lines += [f"- Started: {_time(m.started_at)}", f"- Detected: {_time(m.detected_at)}"]
    lines += [f"- Acknowledged: {_time(m.acknowledged_at)}", f"- Mitigated: {_time(m.mitigated_at)}"]
    lines += [f"- Resolved: {_time(m.resolved_at)}", ""]
    for playbook in facts.playbooks:
        label = "dry run of " if playbook.dry_run else ""
        where = f" on {playbook.node}" if playbook.node else ""
        lines += [
            f"### Playbook {label}{playbook.name}{where} ({status_words(playbook.status, dry_run=playbook.dry_run)})",
            "",
            f"Started by {playbook.started_by} at {_time(playbook.started_at)}.",
            "",
            "| # | Step | Status | Minutes |",
            "|---|---|---|---|",
        ]
        for index, step in enumerate(playbook.steps, start=1):
            minutes = None if step.seconds is None else step.seconds / 60
            status = status_words(step.status, dry_run=playbook.dry_run, step=True)
            lines.append(f"| {index} | {_cell(step.name)} | {status} | {_min(minutes)} |")
        lines.append("")
    if facts.links:
        lines += ["Data: " + " · ".join(f"[{label}]({url})" for label, url in facts.links.items()), ""]

    lines += ["## Root cause", ""]
    if cause is not None:
        lines.append(f"- Category: **{cause.cause_label}** ({cause.cause_group}; Llama 3 taxonomy: `{cause.cause}`)")
        if cause.xid is not None:
            lines.append(f"- Xid {cause.xid}" + (f": {cause.reason}" if cause.reason else ""))
    else:
        lines.append("- Category: not recorded (no interruption in the incident names one).")
    culprit = facts.culprit
    if culprit is not None:
        name = f"[{culprit.node}]({culprit.node_url})" if culprit.node_url else culprit.node
        gpu = (
            f" GPU {culprit.gpu}" + (f" (serial {culprit.serial})" if culprit.serial else "")
            if culprit.gpu is not None
            else ""
        )
        lines.append(f"- Culprit hardware: {name}{gpu}")
        history = [
            f"{culprit.xid_count} Xid errors" + (f" (last Xid {culprit.last_xid})" if culprit.last_xid else ""),
            f"{culprit.ecc_uncorrected} uncorrected ECC",
            f"{culprit.retired_pages} retired pages",
            f"{culprit.earlier_interruptions} earlier interruptions",
            f"{culprit.earlier_incidents} earlier incidents",
        ]
        lines.append(f"- Its history: {', '.join(history)}")
    lines.append("")

    lines += ["## Contributing factors", ""]
    lines += [f"- {f}" for f in contributing_factors(facts)] or ["- None recorded."]
    good, bad = assessment(facts)
    lines += ["", "## What went well", ""]
    lines += [f"- {g}" for g in good] or ["- Nothing recorded."]
    lines += ["", "## What went badly", ""]
    lines += [f"- {b}" for b in bad] or ["- Nothing recorded."]
    lines += ["", "## Action items", ""]
    lines += [f"- [ ] {a}" for a in suggested_actions(facts)] or ["- [ ] None suggested."]
    lines += ["", "Tracked action items (owner, due date) are kept on the postmortem page.", ""]
    return "\n".join(lines)


# --- Rendering -------------------------------------------------------------------------------------------

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").enable("strikethrough")
_TAGS = {
    "a", "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "strong", "em", "del", "s",
    "code", "pre", "blockquote", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
_ATTRIBUTES = {"a": {"href", "title"}, "th": {"style"}, "td": {"style"}, "ol": {"start"}}
_SAFE_SCHEMES = {"http", "https", "mailto"}


def to_html(markdown: str) -> str:
    """Markdown to HTML safe to put in a page: raw HTML is escaped by the parser, and nh3 strips anything else
    (scripts, event handlers, javascript: links) in case a plugin lets it through."""
    html = _MARKDOWN.render(markdown or "")
    return nh3.clean(
        html, tags=_TAGS, attributes=_ATTRIBUTES, url_schemes=_SAFE_SCHEMES, link_rel="noopener noreferrer"
    )


_SEVERITY_CHANGE = re.compile(r"→\s*(SEV[1-4])")


def severity_from_text(text: str) -> str | None:
    """The severity a timeline entry's text says the incident moved to ('Severity SEV4 → SEV3 ...')."""
    found = _SEVERITY_CHANGE.search(text)
    return found.group(1) if found else None
