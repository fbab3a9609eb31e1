"""Detection: findings become alerts, alerts group into incidents; alerts cleared when their condition
is."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q

from incidents.domain.alert_kinds import RUN_STOPS
from incidents.domain.detectors import Finding
from incidents.domain.xid import Action
from incidents.models import Alert, Incident, TimelineEntry
from incidents.notifications import services as notifications
from incidents.services.severity import incident_refresh
from incidents.services.timeline import FLEETOPS, _entry
from runs.models import GPU, Attempt, Node, Run


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
        if kind not in RUN_STOPS and at <= latest.mitigated_at + window and holds is not None and holds(latest):
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
