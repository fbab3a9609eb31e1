"""Postmortems: gather an incident's record into facts, draft the Markdown, keep versions and action items.

The drafting itself is pure (incidents.domain.postmortem); this module reads rows for it and does the writes.
Every write leaves a TimelineEntry on the incident (kind "postmortem"), as every other change does.
`actor` is an incidents.services.Actor (anything with `.user` and `.name`); this module does not import
services, because services.incident_resolve calls postmortem_draft.
"""

from datetime import date, datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from incidents.domain import postmortem as domain
from incidents.models import ActionItem, Incident, Postmortem, PostmortemVersion, TimelineEntry
from incidents.selectors import incident_faults_span_get, incident_impact
from runs.domain import advisor
from runs.domain.taxonomy import cause_group, cause_label
from runs.models import GPU, Event, Interruption
from runs.selectors import run_advice_inputs_get

_GATE_STATES = ("burn_in",)
_BACK_STATES = ("hot_spare", "in_service")


class PostmortemError(Exception):
    """A postmortem action the state does not allow; the message says why."""


def _log(incident: Incident, actor, text: str, at: datetime, data: dict | None = None) -> None:
    TimelineEntry.objects.create(
        incident=incident, at=at, actor=actor.user, actor_name=actor.name, kind="postmortem", text=text, data=data or {}
    )


# --- Reads -----------------------------------------------------------------------------------------------


def postmortem_facts_get(*, incident: Incident, now: datetime) -> domain.PostmortemFacts:
    """Everything the draft states, read from the record of the incident, its run, nodes and playbooks."""
    end = incident.resolved_at or now
    impact = incident_impact(incident=incident, now=now)
    run = incident.run
    interruptions = _interruptions(incident, end)
    playbooks = _playbooks(incident)
    culprit = _culprit(incident, interruptions)
    links = {"incident": incident.get_absolute_url()}
    if run is not None:
        links[f"run {run.name}"] = run.get_absolute_url()
        links["checkpoint advisor"] = reverse("run-advisor", args=[run.name])
    if culprit is not None and culprit.node_url:
        links[f"node {culprit.node}"] = culprit.node_url
    changes = [
        (at, severity)
        for at, text in incident.timeline.filter(kind__in=["severity", "escalated", "paged"]).values_list("at", "text")
        if (severity := domain.severity_from_text(text)) is not None
    ]
    return domain.PostmortemFacts(
        incident_id=incident.pk,
        title=incident.title,
        severity=incident.severity,
        milestones=_milestones(incident, playbooks, culprit),
        gpu_hours_lost=impact.gpu_hours_lost,
        goodput_lost=impact.goodput_lost,
        rewound_min=impact.rewound_min,
        runs_affected=(run.name,) if run is not None else (),
        gpus_affected=run.gpu_count if run is not None else sum(n.gpu_count for n in incident.nodes.all()),
        # Incidents open at SEV4 (the model default) and move with impact: the entries say when.
        severity_minutes=domain.severity_minutes(
            initial=Incident.Severity.SEV4, changes=changes, start=incident.started_at, end=end
        ),
        interruptions=tuple(interruptions),
        playbooks=tuple(playbooks),
        alerts=tuple(
            domain.AlertFact(kind, severity, summary, count, node or "")
            for kind, severity, summary, count, node in incident.alerts.values_list(
                "kind", "severity", "summary", "count", "node__hostname"
            )
        ),
        culprit=culprit,
        usual_detection_s=_usual_detection_s(incident),
        checkpoint_interval_s=run.checkpoint_interval_s if run is not None else None,
        advised_interval_s=_advised_interval_s(run, now),
        links=links,
    )


def _interruptions(incident: Incident, end: datetime) -> list[domain.InterruptionFact]:
    span = incident_faults_span_get(incident=incident, now=end)
    if span is None:
        return []
    # The faults it owns, as its impact counts them: not a later incident's of the same run.
    rows = Interruption.objects.filter(
        run_id=incident.run_id, planned=False, fault_at__gte=span[0], fault_at__lt=span[1]
    ).values_list("cause", "fault_at", "node__hostname", "gpu__index", "xid", "reason")
    return [
        domain.InterruptionFact(cause, cause_label(cause), str(cause_group(cause)), at, node or "", gpu, xid, reason)
        for cause, at, node, gpu, xid, reason in rows.order_by("fault_at")
    ]


def _playbooks(incident: Incident) -> list[domain.PlaybookFact]:
    facts = []
    for execution in incident.playbooks.select_related("node").prefetch_related("steps").order_by("started_at", "id"):
        steps = tuple(
            domain.StepFact(s.name, s.status, s.seconds, s.approver_role, s.approved_by)
            for s in sorted(execution.steps.all(), key=lambda s: s.index)
        )
        facts.append(
            domain.PlaybookFact(
                name=execution.playbook,
                status=execution.status,
                started_by=execution.started_by,
                started_at=execution.started_at,
                finished_at=execution.finished_at,
                steps=steps,
                node=execution.node.hostname if execution.node else "",
                dry_run=execution.dry_run,
                error=execution.error,
            )
        )
    return facts


def _culprit(incident: Incident, interruptions: list[domain.InterruptionFact]) -> domain.HardwareFact | None:
    """The hardware the interruptions (else the worst hardware alert) point at, and its history before."""
    hit = next((i for i in interruptions if i.node), None)
    node, gpu_index = (hit.node, hit.gpu) if hit is not None else (None, None)
    if node is None:
        alert = incident.alerts.filter(node__isnull=False).order_by("severity", "first_seen_at")
        row = alert.values_list("node__hostname", "gpu__index").first()
        if row is None:
            return None
        node, gpu_index = row
    if gpu_index is None:
        gpu_index = (
            incident.alerts.filter(node__hostname=node, gpu__isnull=False).values_list("gpu__index", flat=True).first()
        )
    gpu = GPU.objects.filter(node__hostname=node, index=gpu_index).first() if gpu_index is not None else None
    before = incident.started_at - timedelta(seconds=1)
    return domain.HardwareFact(
        node=node,
        gpu=gpu_index,
        serial=gpu.serial if gpu else "",
        xid_count=gpu.xid_count if gpu else 0,
        last_xid=gpu.last_xid if gpu else None,
        ecc_uncorrected=gpu.ecc_uncorrected if gpu else 0,
        retired_pages=gpu.retired_pages if gpu else 0,
        remapped_rows_uncorrected=gpu.remapped_rows_uncorrected if gpu else 0,
        earlier_interruptions=Interruption.objects.filter(node__hostname=node, fault_at__lt=before).count(),
        earlier_incidents=Incident.objects.filter(nodes__hostname=node, started_at__lt=before).count(),
        node_url=reverse("node-page", args=[node]),
    )


def _milestones(incident, playbooks, culprit) -> domain.Milestones:
    """Repair, gate and return come from the culprit's playbooks (drain-and-replace's 'send to repair',
    return-to-service) and, failing those, from its node.state events."""
    repair_at = gate_at = returned_at = None
    for playbook in playbooks:
        if culprit is not None and playbook.node and playbook.node != culprit.node or playbook.dry_run:
            continue
        if playbook.name == "drain-and-replace" and any(
            s.name == "send to repair" and s.status == "succeeded" for s in playbook.steps
        ):
            repair_at = repair_at or playbook.finished_at
        if playbook.name == "return-to-service":
            gate_at = gate_at or playbook.started_at
            if playbook.status == "succeeded":
                returned_at = returned_at or playbook.finished_at
    if culprit is not None:
        states = Event.objects.filter(
            type="node.state", node_name=culprit.node, time__gte=incident.started_at
        ).values_list("time", "data__state")
        for at, state in states.order_by("time"):
            if state == "in_repair" and repair_at is None:
                repair_at = at
            elif state in _GATE_STATES and repair_at is not None and gate_at is None:
                gate_at = at
            elif state in _BACK_STATES and gate_at is not None and returned_at is None:
                returned_at = at
    return domain.Milestones(
        started_at=incident.started_at,
        detected_at=incident.detected_at,
        acknowledged_at=incident.acknowledged_at,
        mitigated_at=incident.mitigated_at,
        repair_at=repair_at,
        gate_at=gate_at,
        returned_at=returned_at,
        resolved_at=incident.resolved_at,
    )


def _usual_detection_s(incident: Incident, sample: int = 200) -> float | None:
    """The median detection time (seconds) of the latest earlier incidents."""
    rows = (
        Incident.objects.filter(started_at__lt=incident.started_at)
        .exclude(pk=incident.pk)
        .order_by("-started_at")
        .values_list("started_at", "detected_at")[:sample]
    )
    return domain.usual_detection_s(max((d - s).total_seconds(), 0.0) for s, d in rows)


def _advised_interval_s(run, now: datetime) -> float | None:
    if run is None:
        return None
    inputs = run_advice_inputs_get(run=run, now=now)
    if inputs.missing:
        return None
    try:
        return advisor.daly(delta_s=inputs.delta_s, mtbf_s=inputs.mtbf_s)
    except ValueError:
        return None


def action_items_list(*, open_only: bool = False, incident: Incident | None = None):
    """Action items across incidents: open ones first, by due date (none last), then oldest first."""
    items = ActionItem.objects.select_related("incident", "owner")
    if open_only:
        items = items.filter(done_at__isnull=True)
    if incident is not None:
        items = items.filter(incident=incident)
    return items.order_by(F("done_at").asc(nulls_first=True), F("due_on").asc(nulls_last=True), "id")


def postmortem_export(*, postmortem: Postmortem) -> str:
    """The Markdown as saved, with the tracked action items appended as a checklist."""
    items = list(action_items_list(incident=postmortem.incident))
    if not items:
        return postmortem.markdown
    lines = [postmortem.markdown.rstrip(), "", "## Tracked action items", ""]
    for item in items:
        owner = item.owner.get_username() if item.owner else "no owner"
        due = f", due {item.due_on:%Y-%m-%d}" if item.due_on else ""
        lines.append(f"- [{'x' if item.is_done else ' '}] {item.text} ({owner}{due})")
    return "\n".join(lines) + "\n"


# --- Writes ----------------------------------------------------------------------------------------------


@transaction.atomic
def postmortem_draft(*, incident: Incident, actor, now: datetime | None = None) -> Postmortem:
    """Draft from the record: the first draft when the incident is resolved, or a redraft on demand, which
    replaces the text (the earlier text stays in the versions) and needs a new review."""
    now = now or timezone.now()
    markdown = domain.draft(postmortem_facts_get(incident=incident, now=now))
    postmortem = Postmortem.objects.select_for_update().filter(incident=incident).first()
    if postmortem is None:
        postmortem = Postmortem.objects.create(incident=incident, markdown=markdown, drafted_at=now, updated_at=now)
        note = "drafted"
    else:
        postmortem.markdown, postmortem.drafted_at, postmortem.updated_at = markdown, now, now
        postmortem.reviewed_at, postmortem.reviewed_by, postmortem.reviewed_by_name = None, None, ""
        postmortem.save()
        note = "redrafted"
    _version(postmortem, actor, note, now)
    _log(incident, actor, f"Postmortem {note} from the record by {actor.name}", now)
    return postmortem


@transaction.atomic
def postmortem_save(*, postmortem: Postmortem, actor, markdown: str) -> Postmortem:
    """Save an edit as a new version; a change to a reviewed text needs another review."""
    postmortem = Postmortem.objects.select_for_update().get(pk=postmortem.pk)
    markdown = markdown.replace("\r\n", "\n")
    if not markdown.strip():
        raise PostmortemError("A postmortem cannot be empty.")
    if markdown == postmortem.markdown:
        return postmortem
    now = timezone.now()
    was_reviewed = postmortem.reviewed_at is not None
    postmortem.markdown, postmortem.updated_at = markdown[:200_000], now
    postmortem.reviewed_at, postmortem.reviewed_by, postmortem.reviewed_by_name = None, None, ""
    postmortem.save()
    version = _version(postmortem, actor, "edited", now)
    text = f"Postmortem edited by {actor.name} (version {version.number})"
    _log(postmortem.incident, actor, text + (": needs review again" if was_reviewed else ""), now)
    return postmortem


@transaction.atomic
def postmortem_review(*, postmortem: Postmortem, actor, at: datetime | None = None) -> Postmortem:
    postmortem = Postmortem.objects.select_for_update().get(pk=postmortem.pk)
    if postmortem.reviewed_at is not None:
        raise PostmortemError(f"Already reviewed by {postmortem.reviewed_by_name}.")
    reviewed_at = timezone.now() if at is None else min(at, timezone.now())
    postmortem.reviewed_at, postmortem.reviewed_by, postmortem.reviewed_by_name = reviewed_at, actor.user, actor.name
    postmortem.save(update_fields=["reviewed_at", "reviewed_by", "reviewed_by_name"])
    _log(postmortem.incident, actor, f"Postmortem marked reviewed by {actor.name}", postmortem.reviewed_at)
    return postmortem


def _version(postmortem: Postmortem, actor, note: str, at: datetime) -> PostmortemVersion:
    last = postmortem.versions.order_by("-number").values_list("number", flat=True).first() or 0
    return PostmortemVersion.objects.create(
        postmortem=postmortem,
        number=last + 1,
        markdown=postmortem.markdown,
        author=actor.user,
        author_name=actor.name,
        note=note,
        created_at=at,
    )


@transaction.atomic
def action_item_add(*, incident: Incident, actor, text: str, owner=None, due_on: date | None = None) -> ActionItem:
    text = text.strip()
    if not text:
        raise PostmortemError("An action item needs some text.")
    now = timezone.now()
    item = ActionItem.objects.create(
        incident=incident, text=text[:500], owner=owner, due_on=due_on, created_by_name=actor.name, created_at=now
    )
    who = f" for {owner.get_username()}" if owner else ""
    due = f", due {due_on:%Y-%m-%d}" if due_on else ""
    _log(incident, actor, f"Action item added by {actor.name}{who}{due}: {item.text}", now, {"action_item": item.pk})
    return item


@transaction.atomic
def action_item_complete(*, item: ActionItem, actor) -> ActionItem:
    now = timezone.now()
    # A conditional update: two people ticking the same item at once complete it once.
    if not ActionItem.objects.filter(pk=item.pk, done_at__isnull=True).update(done_at=now, done_by_name=actor.name):
        raise PostmortemError("This action item is already done.")
    item.refresh_from_db()
    _log(item.incident, actor, f"Action item done by {actor.name}: {item.text}", now, {"action_item": item.pk})
    return item
