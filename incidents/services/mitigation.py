"""Writes to incidents: detector findings become alerts, alerts group into incidents, people act on them.

Every change writes a TimelineEntry (append-only), which is both the incident's timeline and the audit log.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, Max, OuterRef, Q
from django.utils import timezone

from incidents.domain.detectors import Finding
from incidents.domain.response import more_severe, severity_from_impact
from incidents.domain.xid import Action
from incidents.models import Alert, Incident, Postmortem, Preference, RunDiscard, TimelineEntry
from incidents.notifications import services as notifications
from incidents.postmortems.services import postmortem_draft
from incidents.selectors import cost_per_minute_usd, incident_impact, incident_impacts_get
from runs.models import GPU, Attempt, Event, Interruption, Node, Run

SYSTEM = "FleetOps"
_ALERT_RANK = {"critical": 0, "error": 1, "warning": 2, "info": 3}
_SEVERITIES = ("SEV1", "SEV2", "SEV3", "SEV4")


class IncidentError(Exception):
    """An action the incident's state does not allow; the message says why, for the person who tried."""


@dataclass(frozen=True)
class Actor:
    """Who acts: a signed-in user, an API token ('token:<name>'), or FleetOps itself."""

    user: object | None
    name: str

    @classmethod
    def of_user(cls, user) -> "Actor":
        return cls(user, user.get_username())

    @classmethod
    def of_token(cls, token) -> "Actor":
        return cls(None, f"token:{token.name}")


FLEETOPS = Actor(None, SYSTEM)


def _entry(incident: Incident, *, kind: str, text: str, actor: Actor = FLEETOPS, at=None, data=None) -> TimelineEntry:
    entry = TimelineEntry.objects.create(
        incident=incident,
        at=at or timezone.now(),
        actor=actor.user,
        actor_name=actor.name,
        kind=kind,
        text=text,
        data=data or {},
    )
    # Every event passes here: the deliveries commit with the entry and are sent after (notifications.EVENT_OF_KIND).
    notifications.notify(entry)
    return entry


# --- Detection: findings become alerts, alerts group into incidents -------------------------------------


def finding_record(
    *, finding: Finding, at: datetime, count: int = 1, recommended_action: str = "", refresh: bool = True
) -> Alert:
    """Fold a finding into its firing alert (same fingerprint: count it) or open a new alert on an incident.

    `refresh=False` leaves the incident's severity and recommended action to the caller, which refreshes each incident
    once after a batch of findings (incident_refresh reads all the incident's firing alerts: once an alert, a batch of
    n alerts on one incident read n^2/2 rows)."""
    with transaction.atomic():
        alert = Alert.objects.select_for_update().filter(fingerprint=finding.fingerprint, status="firing").first()
        if alert is not None:
            alert.count += count
            alert.last_seen_at = max(alert.last_seen_at, at)
            alert.first_seen_at = min(alert.first_seen_at, at)
            alert.save(update_fields=["count", "last_seen_at", "first_seen_at"])
            return alert
        node = Node.objects.filter(hostname=finding.node).first() if finding.node else None
        run = Run.objects.filter(name=finding.run).first() if finding.run else None
        gpu = GPU.objects.filter(node=node, index=finding.gpu).first() if node and finding.gpu is not None else None
        incident = _incident_for(finding=finding, node=node, run=run, at=at)
        try:
            with transaction.atomic():
                alert = _new_alert(finding, incident, node, gpu, at, count, recommended_action)
                alert.save(force_insert=True)
        except IntegrityError:
            # Another worker opened the same alert first: count into theirs.
            return finding_record(
                finding=finding, at=at, count=count, recommended_action=recommended_action, refresh=refresh
            )
        if node is not None:
            incident.nodes.add(node)
        _entry(incident, kind="alert", at=at, **_alert_entry(finding))
        if refresh:
            incident_refresh(incident=incident, at=at)
        return alert


def _new_alert(finding: Finding, incident, node, gpu, at: datetime, count: int, action: str = "") -> Alert:
    """The firing alert a new finding opens on its incident (unsaved): one place for finding_record and
    findings_record. An occurrence's alert keeps the episode it counted last in its evidence (findings_record)."""
    evidence = finding.evidence
    if finding.episode is not None:
        evidence = {**evidence, _EPISODE: finding.episode.isoformat()}
    return Alert(
        incident=incident,
        fingerprint=finding.fingerprint,
        kind=finding.kind,
        severity=finding.severity,
        summary=finding.summary[:500],
        explanation=finding.explanation,
        node=node,
        gpu=gpu,
        run=incident.run,
        evidence=evidence,
        count=count,
        first_seen_at=at,
        last_seen_at=at,
        recommended_action=action,
    )


def _alert_entry(finding: Finding) -> dict:
    """The text and data of the timeline entry a new alert writes."""
    return {
        "text": f"{finding.summary} — {finding.explanation}",
        "data": {"fingerprint": finding.fingerprint, "severity": finding.severity},
    }


class _Grouping:
    """What `_incident_for` reads, remembered for one transaction that holds the grouping lock (`findings_record`).

    While the lock is held nobody else opens an incident, so an open incident read once stays the one to join, and
    what this transaction opens or attributes it writes here too. Incidents are locked (FOR UPDATE) on first read, so
    a concurrent resolve waits for the commit instead of racing the alerts being added."""

    def __init__(self, nodes: list[Node], ats: list[datetime]):
        self.window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
        self.by_key: dict[str, Incident | None] = {}
        self.of_run: dict[int, list[Incident]] = {}
        self.links: set[tuple[int, int]] = set()  # (incident, node) pairs to add to Incident.nodes
        self.attempts: dict[int, list[Attempt]] = {node.pk: [] for node in nodes}
        if nodes and ats:
            rows = (
                Attempt.objects.filter(nodes__in=nodes, started_at__lte=max(ats))
                .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=min(ats) - self.window))
                .select_related("run")
                .annotate(node_pk=F("nodes__pk"))
            )
            for attempt in rows:
                self.attempts[attempt.node_pk].append(attempt)

    def run_on(self, node: Node, at: datetime) -> Run | None:
        """_run_on, from the attempts read once for every node."""
        live = [
            a
            for a in self.attempts.get(node.pk, [])
            if a.started_at <= at and (a.ended_at is None or a.ended_at >= at - self.window)
        ]
        return max(live, key=lambda a: a.started_at).run if live else None

    def open_incident(self, key: str) -> Incident | None:
        if key not in self.by_key:
            self.by_key[key] = (
                Incident.objects.select_for_update().filter(group_key=key, status__in=Incident.OPEN).first()
            )
        return self.by_key[key]

    def key(self, node: Node | None, run: Run | None, at: datetime, kind: str) -> str:
        """_group_key, with each open incident read once."""
        if run is not None:
            if run.pk not in self.of_run:
                rows = Incident.objects.select_for_update().filter(run=run, status__in=Incident.OPEN)
                self.of_run[run.pk] = list(rows)
                self.by_key.update({i.group_key: i for i in self.of_run[run.pk]})  # one object per row, kept in step
            near = [i for i in self.of_run[run.pk] if i.started_at <= at + self.window]
            held = (lambda i: (i.pk, node.pk) in self.links or i.nodes.filter(pk=node.pk).exists()) if node else None
            return _run_key(run, near, at, kind=kind, holds=held)
        return _group_key(node=node, run=None, at=at, kind=kind, open_incident=self.open_incident)

    def opened(self, incident: Incident) -> None:
        self.by_key[incident.group_key] = incident
        if incident.run_id is not None and incident not in self.of_run.setdefault(incident.run_id, []):
            self.of_run[incident.run_id].append(incident)

    def flush_links(self) -> None:
        """Write the nodes of the incidents so far: before a query that reads them (_adopt_unattributed), and last."""
        through = Incident.nodes.through
        rows = [through(incident_id=i, node_id=n) for i, n in sorted(self.links)]
        through.objects.bulk_create(rows, ignore_conflicts=True)
        self.links.clear()


def findings_record(*, findings: list[tuple[Finding, datetime]], repeat_count: int = 0) -> list[Alert]:
    """Many findings at once, in the caller's transaction, as `finding_record` would record them one by one with
    refresh=False, but in queries that grow with the incidents touched, not the findings: the intake's Alertmanager
    webhook of up to 1,000 alerts. A finding whose alert fires already counts `repeat_count` into it (a repeated
    notification is not a new occurrence: 0); a new one counts 1. The caller refreshes the incidents touched.

    A finding with an episode (an occurrence its source re-sends while one episode lasts) counts once per episode:
    1 when its episode began after the one its fingerprint's latest alert counted, else nothing, not even a new alert
    when that one was resolved since (a re-sent notice of what the on-call has dealt with opens nothing again)."""
    if not findings:
        return []
    _lock_grouping()  # first: from here no one else opens an alert, so the firing ones read next stay all there are
    fingerprints = {finding.fingerprint for finding, _ in findings}
    firing = {
        a.fingerprint: a
        for a in Alert.objects.select_for_update().filter(fingerprint__in=fingerprints, status="firing")
    }
    counted_episodes = _episodes_counted({finding.fingerprint for finding, _ in findings if finding.episode})
    hostnames = {finding.node for finding, _ in findings if finding.node}
    nodes = {node.hostname: node for node in Node.objects.filter(hostname__in=hostnames)}
    runs = {run.name: run for run in Run.objects.filter(name__in={f.run for f, _ in findings if f.run})}
    gpus = {(g.node_id, g.index): g for g in GPU.objects.filter(node__in=nodes.values())}
    grouping = _Grouping(list(nodes.values()), [at for finding, at in findings if finding.fingerprint not in firing])
    recorded, counted, entries = [], {}, []
    for finding, at in findings:
        alert = firing.get(finding.fingerprint)
        if finding.episode is not None:
            last = counted_episodes.get(finding.fingerprint)
            if last is not None and finding.episode <= last:  # a notice of an episode counted already
                if alert is not None:
                    recorded.append(alert)
                continue
            counted_episodes[finding.fingerprint] = finding.episode
        if alert is not None:
            if finding.episode is None:
                alert.count += repeat_count
            else:
                alert.count += 1
                alert.evidence = {**alert.evidence, _EPISODE: finding.episode.isoformat()}
            alert.last_seen_at, alert.first_seen_at = max(alert.last_seen_at, at), min(alert.first_seen_at, at)
            counted[alert.pk] = alert
            recorded.append(alert)
            continue
        node = nodes.get(finding.node) if finding.node else None
        run = runs.get(finding.run) if finding.run else None
        gpu = gpus.get((node.pk, finding.gpu)) if node is not None and finding.gpu is not None else None
        incident = _incident_for(finding=finding, node=node, run=run, at=at, grouping=grouping)
        action = finding.recommended_action if finding.action != Action.NONE else ""
        alert = _new_alert(finding, incident, node, gpu, at, 1, action)
        alert.save(force_insert=True)
        firing[finding.fingerprint] = alert  # the same fingerprint again in this batch is a repeat of this one
        if node is not None:
            grouping.links.add((incident.pk, node.pk))
        entries.append(
            TimelineEntry(incident=incident, at=at, actor_name=FLEETOPS.name, kind="alert", **_alert_entry(finding))
        )
        recorded.append(alert)
    written = ["count", "last_seen_at", "first_seen_at"] + (["evidence"] if counted_episodes else [])
    Alert.objects.bulk_update(list(counted.values()), written)
    grouping.flush_links()
    for entry in TimelineEntry.objects.bulk_create(entries):
        notifications.notify(entry)
    return recorded


_EPISODE = "episode"  # the evidence key of the episode an occurrence's alert counted last (ISO 8601, UTC)


def _episodes_counted(fingerprints: set[str]) -> dict[str, datetime]:
    """The episode each fingerprint's latest alert, firing or resolved, counted last: one query."""
    latest: dict[str, str | None] = {}
    if fingerprints:
        rows = Alert.objects.filter(fingerprint__in=fingerprints).order_by("fingerprint", "-pk")
        for fingerprint, episode in rows.values_list("fingerprint", f"evidence__{_EPISODE}"):
            latest.setdefault(fingerprint, episode)
    return {fingerprint: datetime.fromisoformat(episode) for fingerprint, episode in latest.items() if episode}


def _incident_for(
    *, finding: Finding, node: Node | None, run: Run | None, at: datetime, grouping: "_Grouping | None" = None
) -> Incident:
    """The open incident this finding belongs to, opened if there is none. `grouping`: the reads remembered for a
    batch of findings (findings_record), which holds the grouping lock already."""
    if grouping is None:
        run = run or (_run_on(node, at) if node else None)
        _lock_grouping()
        key = _group_key(node=node, run=run, at=at, kind=finding.kind)
        incident = Incident.objects.select_for_update().filter(group_key=key, status__in=Incident.OPEN).first()
    else:
        run = run or (grouping.run_on(node, at) if node else None)
        key = grouping.key(node, run, at, finding.kind)
        incident = grouping.open_incident(key)
    if incident is None and run is not None and node is not None:
        if grouping is not None:
            grouping.flush_links()
        incident = _adopt_unattributed(node=node, run=run, at=at)
        if incident is not None and grouping is not None:
            grouping.opened(incident)
    # When it was noticed is what the record holds (a reporter's detected_at, else the signal's own time), never when
    # FleetOps got to it: a replay of old history gives the same times as the live stream (issue 17).
    detected = max(finding.detected_at or at, at)
    if incident is not None:
        started, noticed = min(incident.started_at, at), min(incident.detected_at, detected)
        if (started, noticed) != (incident.started_at, incident.detected_at):
            incident.started_at, incident.detected_at = started, max(noticed, started)
            incident.save(update_fields=["started_at", "detected_at"])
        return incident
    try:
        with transaction.atomic():
            incident = Incident.objects.create(
                title=finding.summary[:300], group_key=key, run=run, started_at=at, detected_at=detected
            )
    except IntegrityError:
        return Incident.objects.select_for_update().get(group_key=key, status__in=Incident.OPEN)
    _entry(incident, kind="opened", text=f"Opened by the {finding.kind} detector: {finding.summary}")
    if grouping is not None:
        grouping.opened(incident)
    return incident


def _adopt_unattributed(*, node: Node, run: Run, at: datetime) -> Incident | None:
    """An open incident on this node, from within the window, that no run was known for when it opened: its fault
    is this run's. Workers apply batches in parallel, so a node's Xid can be detected before the run.started that
    put the node in the run is applied; without this the run's own findings would open a second incident."""
    window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
    incident = (
        Incident.objects.select_for_update()
        .filter(run__isnull=True, status__in=Incident.OPEN, nodes=node)
        .filter(started_at__gte=at - window, started_at__lte=at + window)
        .order_by("-started_at")
        .first()
    )
    if incident is not None:
        incident.run = run
        incident.save(update_fields=["run"])
        incident.alerts.filter(run__isnull=True).update(run=run)
        _entry(incident, kind="note", at=at, text=f"Attributed to run {run.name}: {node.hostname} was in it.")
    return incident


def _lock_grouping() -> None:
    """Held to the end of the transaction: one worker at a time decides which incident a new alert joins.

    Two workers grouping findings of one fault at once (a run.failed and the Xids of its fault, detected from two
    batches) would each find no open incident and each open one, under keys that differ by the time of each finding
    or by whether the run was known yet, which the one-open-incident-per-key constraint cannot catch: the second
    waits here until the first commits, then finds its incident. Only a new alert comes here (a repeat counts into
    its firing alert first), so one lock for the fleet costs nothing. SQLite has one writer at a time anyway."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ["fleetops:incident-grouping"])


def _run_on(node: Node, at: datetime) -> Run | None:
    """The run the node was working for at `at`, or had just stopped working for (within the group window).

    Decided by time, not by the run's state now: detection may run long after the events it looks at.
    """
    window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
    attempt = (
        Attempt.objects.filter(nodes=node, started_at__lte=at)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=at - window))
        .select_related("run")
        .order_by("-started_at")
        .first()
    )
    return attempt.run if attempt is not None else None


# A run's own stop is news however soon it comes: never a straggler of the outage before it.
_RUN_STOPS = ("run_failed", "hang")


def _run_key(run: Run, near: list[Incident], at: datetime, *, kind: str, holds=None) -> str:
    """The group key of a run's alert at `at`, from its open incidents begun by `at` + the window (docs/DOMAIN.md
    section 6): the latest begun by `at`, while that outage lasts; else one that begins within the window after
    `at` (this is an early report of it); else a new outage's, keyed by when it began.

    One incident per outage: until the run trains again it takes every alert (a late report of something before
    that, too); after, it takes only its own nodes' stragglers for a window (the scheduler's cordon, the dead GPU's
    last Xids), and never the run stopping again. Anything else after the run trained again is a new fault, so a new
    incident: joined to the old one, its fault would be charged to an incident that began before the run was last
    healthy, and the next alert of it, past the window, would open a second incident for the same fault. Choosing
    from the incidents begun by `at` first keeps the choice the same whichever order the events came in.
    `holds(incident)`: whether the alert's node is one of the incident's, asked only when that decides."""
    window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
    latest = max((i for i in near if i.started_at <= at), key=lambda i: (i.started_at, i.pk), default=None)
    if latest is not None:
        if latest.mitigated_at is None or at <= latest.mitigated_at:
            return latest.group_key
        if kind not in _RUN_STOPS and at <= latest.mitigated_at + window and holds is not None and holds(latest):
            return latest.group_key
    soon = min((i for i in near if i.started_at > at), key=lambda i: (i.started_at, i.pk), default=None)
    if soon is not None:
        return soon.group_key
    return f"run:{run.name}@{at:%Y-%m-%dT%H:%M:%S}"


def _group_key(*, node: Node | None, run: Run | None, at: datetime, kind: str, open_incident=None) -> str:
    """run:<name>@<start> when a run is hit; else a burst in one switch or rack within the window; else the node."""
    window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
    if run is not None:
        near = list(Incident.objects.filter(run=run, status__in=Incident.OPEN, started_at__lte=at + window))
        held = (lambda i: i.nodes.filter(pk=node.pk).exists()) if node else None
        return _run_key(run, near, at, kind=kind, holds=held)
    if node is None:
        return "fleet"
    for place in ("switch", "rack"):
        value = getattr(node, place)
        if not value:
            continue
        key = f"{place}:{value}"
        current = (
            open_incident(key)
            if open_incident is not None
            else Incident.objects.filter(group_key=key, status__in=Incident.OPEN).first()
        )
        if current is None or current.detected_at >= at - window:
            return key
    return f"node:{node.hostname}"


def incident_refresh(*, incident: Incident, at: datetime | None = None, impact=None) -> None:
    """Recompute the recommended action from its alerts and the severity from impact. Without `impact` (each alert
    opened or cleared) the grade is what the alerts say at once: a run's fault idles its GPUs; the minute sweep
    (incidents_reassess) prices the incident and grades the GPU-hours lost and the runs affected as well."""
    with transaction.atomic():
        # Under the row's lock, from the row as it is now: a person may have set the severity since it was read.
        fresh = Incident.objects.select_for_update().get(pk=incident.pk)
        incident.severity, incident.severity_overridden = fresh.severity, fresh.severity_overridden
        incident.recommended_action = fresh.recommended_action
        alerts = list(incident.alerts.order_by("first_seen_at"))
        firing = _by_rank(a for a in alerts if a.status == "firing")
        action = next((a.recommended_action for a in firing if a.recommended_action), incident.recommended_action)
        fields = []
        if action != incident.recommended_action:
            incident.recommended_action = action
            fields.append("recommended_action")
        graded, why = _severity(incident, firing[0] if firing else None, alerts, impact)
        severity = _raised(incident, graded)
        if severity != incident.severity:
            # Set first: the entry's notifications describe the incident as it is (a mail said "[SEV4] ... SEV4 →
            # SEV2").
            before, incident.severity = incident.severity, severity
            _entry(
                incident,
                kind="severity",
                at=at,
                text=f"Severity {before} → {severity} from impact: {why}",
                data={"from": before, "to": severity, "impact": graded},
            )
            fields.append("severity")
        if fields:
            incident.save(update_fields=fields)


def _by_rank(alerts) -> list[Alert]:
    """Alerts, the most severe first (critical, error, warning, info)."""
    return sorted(alerts, key=lambda a: _ALERT_RANK.get(a.severity, 3))


def _severity(incident: Incident, worst: Alert | None, alerts: list[Alert], impact=None) -> tuple[str, str]:
    """The severity the incident's impact grades (docs/DOMAIN.md section 6), and why in words. From the record, not
    the moment: the GPUs its faults idled (now or before), the GPU-hours they lost so far, the runs its faults hit;
    so a replay grades an incident as the live stream did once it was over. Without `impact`: the alerts' grade."""
    run = incident.run
    if impact is None:
        faulted = run is not None and any(a.kind in ("run_failed", "hang") for a in alerts)
        gpus, lost, runs = (run.gpu_count if faulted else 0), None, int(run is not None)
    else:
        gpus, lost, runs = impact.gpus_idled, impact.gpu_hours_lost, _runs_affected(incident)
    severity = severity_from_impact(
        gpus_idle=gpus,
        runs_affected=runs,
        gpu_hours_lost=lost or 0.0,
        cost_per_minute_usd=cost_per_minute_usd(gpus),
        sev1_usd_per_min=settings.INCIDENT_SEV1_USD_PER_MIN,
        sev2_usd_per_min=settings.INCIDENT_SEV2_USD_PER_MIN,
    )
    lost_words = "" if lost is None else f", {lost:,.1f} GPU-h lost"
    why = f"{gpus:,} GPUs idled{lost_words}, {runs} run(s) affected"
    if worst is not None and worst.severity == "critical" and severity == "SEV4":
        severity, why = "SEV3", why + ", a critical alert"  # a critical hardware fault is worth a look before it hurts
    return severity, why


def _runs_affected(incident: Incident) -> int:
    """Its run, and the other runs a fault on its nodes stopped within the grouping window of its start (one switch
    or node taking two jobs down): what the "two runs" rule counts."""
    window = timedelta(seconds=settings.INCIDENT_GROUP_WINDOW_S)
    others = Interruption.objects.filter(
        planned=False,
        node__in=incident.nodes.all(),
        fault_at__gte=incident.started_at - window,
        fault_at__lte=incident.started_at + window,
    ).values_list("run_id", flat=True)
    return len({incident.run_id, *others} - {None})


def _raised(incident: Incident, graded: str) -> str:
    """What the incident's severity becomes for `graded`: never lower (the worst it was stays, so a mitigated
    incident keeps the severity its outage earned); once someone set it by hand, moved only by impact graded worse
    than it was when they did (their timeline entry keeps that grade)."""
    if not incident.severity_overridden:
        return more_severe(incident.severity, graded)
    entry = incident.timeline.filter(data__has_key="set_at_impact").order_by("-at", "-id").first()
    at_setting = entry.data["set_at_impact"] if entry is not None else None
    if at_setting not in _SEVERITIES or _SEVERITIES.index(graded) >= _SEVERITIES.index(at_setting):
        return incident.severity
    return more_severe(incident.severity, graded)


def incidents_reassess(*, now: datetime) -> int:
    """Grade every open incident's severity again from its impact now (the GPU-hours an outage loses grow while it
    lasts), priced at once; returns how many changed."""
    opened = list(Incident.objects.filter(status__in=Incident.OPEN).select_related("run").order_by("pk"))
    impacts = incident_impacts_get(incidents=opened, now=now)
    changed = 0
    for incident in opened:
        before = incident.severity
        incident_refresh(incident=incident, at=now, impact=impacts[incident.pk])
        changed += incident.severity != before
    return changed


def alerts_resolve(
    *,
    at: datetime,
    reason: str,
    node: Node | None = None,
    run: Run | None = None,
    kinds: tuple[str, ...] | None = None,
    fingerprint: str | None = None,
    refresh: bool = True,
) -> int:
    """Mark matching firing alerts resolved (the condition cleared) and say so on their incidents; `refresh=False`:
    the caller refreshes the incidents once after a batch (as for finding_record)."""
    alerts = Alert.objects.filter(status="firing")
    if fingerprint is not None:
        alerts = alerts.filter(fingerprint=fingerprint)
    if node is not None:
        alerts = alerts.filter(node=node)
    if run is not None:
        alerts = alerts.filter(run=run)
    if kinds is not None:
        alerts = alerts.filter(kind__in=kinds)
    resolved = 0
    for alert in alerts.select_related("incident"):
        Alert.objects.filter(pk=alert.pk, status="firing").update(status="resolved", resolved_at=at)
        _entry(
            alert.incident,
            kind="alert",
            at=at,
            text=f"Alert cleared: {alert.summary} ({reason})",
            data={"fingerprint": alert.fingerprint, "cleared": True},
        )
        if refresh:
            incident_refresh(incident=alert.incident, at=at)
        resolved += 1
    return resolved


def timeline_add(*, incident: Incident, kind: str, text: str, actor: Actor = FLEETOPS, data=None) -> TimelineEntry:
    """For other services (the playbook engine) that report on an incident."""
    return _entry(incident, kind=kind, text=text, actor=actor, data=data)


def incident_mitigate(*, incident: Incident, text: str, at: datetime | None = None) -> None:
    """Mitigated by automation (a playbook put the job back on healthy hardware)."""
    with transaction.atomic():
        incident = _locked(incident)
        if incident.status not in (Incident.Status.TRIGGERED, Incident.Status.ACKNOWLEDGED):
            return
        incident.status, incident.mitigated_at = Incident.Status.MITIGATED, at or timezone.now()
        incident.save(update_fields=["status", "mitigated_at"])
        _entry(incident, kind="mitigated", at=incident.mitigated_at, text=text)


def incident_page_human(*, incident: Incident, why: str) -> None:
    """Automation stopped and a person must decide: escalate one level and say why on the timeline."""
    with transaction.atomic():
        incident = _locked(incident)
        position = _SEVERITIES.index(incident.severity)
        if position > 0:
            incident.severity = _SEVERITIES[position - 1]
            incident.save(update_fields=["severity"])
        _entry(incident, kind="paged", text=f"Paged a human: {why}")


def run_mitigated(*, run: Run, at: datetime, text: str) -> None:
    """The run trains again, or ended: its open, unmitigated incident that began by then is mitigated (a late event
    from before it began says nothing of it)."""
    for incident in Incident.objects.select_for_update().filter(
        run=run, status__in=[Incident.Status.TRIGGERED, Incident.Status.ACKNOWLEDGED], started_at__lte=at
    ):
        incident.status, incident.mitigated_at = Incident.Status.MITIGATED, at
        incident.save(update_fields=["status", "mitigated_at"])
        _entry(incident, kind="mitigated", at=at, text=text)
        incident_refresh(incident=incident, at=at)


# --- People's actions -----------------------------------------------------------------------------------


OUT_OF_SERVICE = ("draining", "cordoned", "in_repair", "burn_in", "retired")  # a node that can hurt no job
BACK_IN_SERVICE = ("in_service", "hot_spare")


def nodes_mitigated(*, node: Node, at: datetime, state: str) -> None:
    """The node changed state: each open, unmitigated incident of nodes alone (no run) that holds it and began by
    then is mitigated once its harm stopped: every node of it out of service, or this one back with none of the
    incident's alerts still firing (healthy again)."""
    incidents = Incident.objects.select_for_update().filter(
        run=None, nodes=node, status__in=[Incident.Status.TRIGGERED, Incident.Status.ACKNOWLEDGED], started_at__lte=at
    )
    for incident in incidents:
        if state in OUT_OF_SERVICE:
            # This node as the event says (the record may have moved on since, in a replay); the others as they are.
            others = incident.nodes.exclude(pk=node.pk).values_list("state", flat=True)
            if any(other not in OUT_OF_SERVICE for other in others):
                continue
            text = f"{node.hostname} out of service ({state.replace('_', ' ')}): it can hurt no job"
        elif state in BACK_IN_SERVICE and not incident.alerts.filter(status="firing").exists():
            text = f"{node.hostname} back {state.replace('_', ' ')} with every alert cleared: healthy again"
        else:
            continue
        incident.status, incident.mitigated_at = Incident.Status.MITIGATED, at
        incident.save(update_fields=["status", "mitigated_at"])
        _entry(incident, kind="mitigated", at=at, text=text)


def run_discard(*, run: Run, actor: Actor, reason: str) -> RunDiscard:
    """Discard a test run and what it made: its events and its record (attempts, interruptions, checkpoints) are
    deleted, its incidents closed and discarded (out of every page and figure; their timelines, the audit log, keep
    them, with an entry saying who discarded them and why), and a RunDiscard row records it all. Nodes and clusters
    stay: they are the fleet's, whoever named them first."""
    if not reason.strip():
        raise IncidentError("Say why the run is discarded (a test, a mistake): the reason goes on the audit log.")
    with transaction.atomic():
        now = timezone.now()
        run = Run.objects.select_for_update().get(pk=run.pk)
        incidents = list(Incident.objects.select_for_update().filter(run=run).order_by("pk"))
        for incident in incidents:
            text = f"Discarded with its run {run.name} by {actor.name}: {reason.strip()}"
            _entry(incident, kind=TimelineEntry.Kind.DISCARDED, actor=actor, at=now, text=text)
            if incident.is_open:
                incident.status, incident.closed_at = Incident.Status.CLOSED, now
            incident.discarded_at = now
            incident.save(update_fields=["status", "closed_at", "discarded_at"])
        # Their alerts stop firing: one still firing would fold a new finding of the same fingerprint into itself,
        # out of sight on a discarded incident.
        Alert.objects.filter(incident__in=incidents, status="firing").update(status="resolved", resolved_at=now)
        events = Event.objects.filter(run_name=run.name)
        removed = {
            "events": events.count(),
            "attempts": run.attempts.count(),
            "interruptions": run.interruptions.count(),
            "checkpoints": run.checkpoints.count(),
            "incidents": len(incidents),
        }
        events.delete()
        name = run.name
        run.delete()
        return RunDiscard.objects.create(
            at=now, actor_name=actor.name, run_name=name, reason=reason.strip(), removed=removed
        )


def _when(at: datetime | None) -> datetime:
    """A person's action at `at` (never later than now), or now."""
    now = timezone.now()
    return now if at is None else min(at, now)


def _locked(incident: Incident) -> Incident:
    return Incident.objects.select_for_update().get(pk=incident.pk)


@transaction.atomic
def incident_acknowledge(*, incident: Incident, actor: Actor, at: datetime | None = None) -> Incident:
    """`at`: when the person acknowledged, where that is known and earlier than now (a pager's record); else now."""
    incident = _locked(incident)
    if not incident.is_open or incident.acknowledged_at is not None:
        raise IncidentError(f"This incident is {incident.status} and cannot be acknowledged again.")
    # Automation may have mitigated it already: a person still takes it on, and MTTA counts that moment.
    if incident.status == Incident.Status.TRIGGERED:
        incident.status = Incident.Status.ACKNOWLEDGED
    incident.acknowledged_at = _when(at)
    if incident.commander_id is None and actor.user is not None:
        incident.commander = actor.user
    incident.save(update_fields=["status", "acknowledged_at", "commander"])
    _entry(
        incident, kind="acknowledged", actor=actor, at=incident.acknowledged_at, text=f"Acknowledged by {actor.name}"
    )
    return incident


@transaction.atomic
def incident_assign(*, incident: Incident, actor: Actor, assignee) -> Incident:
    incident = _locked(incident)
    incident.assignees.add(assignee)
    _entry(incident, kind="assigned", actor=actor, text=f"Assigned to {assignee.get_username()}")
    return incident


@transaction.atomic
def incident_commander_set(*, incident: Incident, actor: Actor, commander) -> Incident:
    incident = _locked(incident)
    incident.commander = commander
    incident.save(update_fields=["commander"])
    _entry(incident, kind="assigned", actor=actor, text=f"{commander.get_username()} is incident commander")
    return incident


@transaction.atomic
def incident_escalate(*, incident: Incident, actor: Actor, reason: str = "") -> Incident:
    """One severity level up, fixed by a person from now on."""
    incident = _locked(incident)
    position = _SEVERITIES.index(incident.severity)
    if position == 0:
        raise IncidentError("This incident is already SEV1.")
    return _severity_set(incident, actor, _SEVERITIES[position - 1], reason or "escalated", kind="escalated")


@transaction.atomic
def incident_severity_set(*, incident: Incident, actor: Actor, severity: str, reason: str) -> Incident:
    if severity not in _SEVERITIES:
        raise IncidentError(f"Severity must be one of {', '.join(_SEVERITIES)}.")
    return _severity_set(_locked(incident), actor, severity, reason, kind="severity")


def _severity_set(incident: Incident, actor: Actor, severity: str, reason: str, *, kind: str) -> Incident:
    before = incident.severity
    # What impact graded then, priced: automation moves a person's severity again only for impact graded worse.
    alerts = list(incident.alerts.all())
    firing = _by_rank(a for a in alerts if a.status == "firing")
    graded, _ = _severity(
        incident, firing[0] if firing else None, alerts, incident_impact(incident=incident, now=timezone.now())
    )
    incident.severity, incident.severity_overridden = severity, True
    incident.save(update_fields=["severity", "severity_overridden"])
    _entry(
        incident,
        kind=kind,
        actor=actor,
        text=f"Severity {before} → {severity}: {reason}",
        data={"from": before, "to": severity, "set_at_impact": graded},
    )
    return incident


@transaction.atomic
def incident_note_add(*, incident: Incident, actor: Actor, text: str) -> TimelineEntry:
    text = text.strip()
    if not text:
        raise IncidentError("A note needs some text.")
    return _entry(incident, kind="note", actor=actor, text=text[:10_000])


@transaction.atomic
def incident_resolve(
    *, incident: Incident, actor: Actor, override_reason: str = "", at: datetime | None = None
) -> Incident:
    """Resolve; refused while an attached alert still fires, unless the person gives a reason to override. `at` as
    for incident_acknowledge."""
    incident = _locked(incident)
    if not incident.is_open:
        raise IncidentError(f"This incident is {incident.status} already.")
    firing = incident.alerts.filter(status="firing").count()
    if firing and not override_reason.strip():
        raise IncidentError(f"{firing} alert(s) still firing: resolve them first, or give a reason to override.")
    incident.status, incident.resolved_at = Incident.Status.RESOLVED, _when(at)
    incident.save(update_fields=["status", "resolved_at"])
    text = f"Resolved by {actor.name}"
    if firing:
        text += f" with {firing} alert(s) still firing: {override_reason.strip()}"
    _entry(incident, kind="resolved", actor=actor, at=incident.resolved_at, text=text, data={"firing": firing})
    postmortem_draft(incident=incident, actor=FLEETOPS, now=incident.resolved_at)
    return incident


def incidents_auto_resolve(*, now: datetime, quiet_s: float) -> int:
    """Resolve, as FleetOps, each mitigated incident whose harm stopped and whose alerts have all cleared, once nothing
    has moved on it for `quiet_s` seconds (mitigation, its last alert's clearing or sighting). One a person reopened is
    left to people. Returns how many were resolved."""
    quiet = now - timedelta(seconds=quiet_s)
    reopened = TimelineEntry.objects.filter(incident=OuterRef("pk"), kind=TimelineEntry.Kind.REOPENED)
    moving = Alert.objects.filter(incident=OuterRef("pk")).filter(
        Q(status="firing") | Q(resolved_at__gt=quiet) | Q(last_seen_at__gt=quiet)
    )
    due = Incident.objects.filter(status=Incident.Status.MITIGATED, mitigated_at__lte=quiet).filter(
        ~Exists(reopened), ~Exists(moving)
    )
    last_moved = due.annotate(cleared=Max("alerts__resolved_at"), seen=Max("alerts__last_seen_at"))
    resolved = 0
    for pk, cleared, seen in last_moved.order_by("pk").values_list("pk", "cleared", "seen"):
        with transaction.atomic():
            incident = _locked(Incident(pk=pk))
            if incident.status != Incident.Status.MITIGATED:
                continue
            # Resolved as of when it fell due, the quiet period after the last thing that moved on it, not when the
            # sweep came round: a history replayed days later resolves at the live stream's moment.
            quiet_since = max(t for t in (incident.mitigated_at, cleared, seen) if t is not None)
            at = min(quiet_since + timedelta(seconds=quiet_s), now)
            incident.status, incident.resolved_at = Incident.Status.RESOLVED, at
            incident.save(update_fields=["status", "resolved_at"])
            text = (
                f"Resolved by FleetOps: the harm stopped at {incident.mitigated_at:%Y-%m-%d %H:%M} UTC and every alert "
                f"has cleared, quiet for {quiet_s / 60:,.0f} min since {quiet_since:%Y-%m-%d %H:%M} UTC "
                "(INCIDENT_AUTO_RESOLVE_S)"
            )
            _entry(incident, kind="resolved", at=at, text=text)
            postmortem_draft(incident=incident, actor=FLEETOPS, now=at)
            resolved += 1
    return resolved


@transaction.atomic
def incident_close(*, incident: Incident, actor: Actor, at: datetime | None = None) -> Incident:
    """Resolved -> closed: the write-up is done. Needs the postmortem reviewed, except for SEV4."""
    incident = _locked(incident)
    if incident.status != Incident.Status.RESOLVED:
        raise IncidentError(f"Only a resolved incident can be closed; this one is {incident.status}.")
    postmortem = Postmortem.objects.filter(incident=incident).first()
    if incident.severity != Incident.Severity.SEV4 and (postmortem is None or postmortem.reviewed_at is None):
        raise IncidentError(f"A {incident.severity} incident closes only once its postmortem is marked reviewed.")
    incident.status, incident.closed_at = Incident.Status.CLOSED, _when(at)
    incident.save(update_fields=["status", "closed_at"])
    _entry(incident, kind="closed", actor=actor, at=incident.closed_at, text=f"Closed by {actor.name}")
    return incident


@transaction.atomic
def incident_reopen(*, incident: Incident, actor: Actor, reason: str = "") -> Incident:
    incident = _locked(incident)
    if incident.status != Incident.Status.RESOLVED:
        raise IncidentError("Only a resolved incident can be reopened.")
    if Incident.objects.filter(group_key=incident.group_key, status__in=Incident.OPEN).exists():
        raise IncidentError("Another open incident already covers this group; continue there.")
    incident.status, incident.resolved_at = Incident.Status.ACKNOWLEDGED, None
    incident.save(update_fields=["status", "resolved_at"])
    _entry(incident, kind="reopened", actor=actor, text=f"Reopened by {actor.name}" + (f": {reason}" if reason else ""))
    return incident


def action_refused(*, incident: Incident, actor: Actor, action: str) -> TimelineEntry:
    """The only trace a refused action leaves: an audit entry naming who tried what."""
    return _entry(
        incident, kind="refused", actor=actor, text=f"{actor.name} may not {action}: refused", data={"action": action}
    )


def time_zone_set(*, user, zone: str) -> None:
    """The zone the person's pages show times in from their next request, on every device (read each request)."""
    Preference.objects.update_or_create(user=user, defaults={"time_zone": zone})
