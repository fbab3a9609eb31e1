"""Incidents, the alerts attached to them, and the append-only timeline that is also the audit log."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from runs.models import GPU, Node, Run


class LiveIncidents(models.Manager):
    """Incidents not discarded with a test run (incidents.services.run_discard): what every page, metric, report
    and API answer counts. `Incident.every` holds them all; their timelines stay, the audit log."""

    def get_queryset(self):
        return super().get_queryset().filter(discarded_at__isnull=True)


class Incident(models.Model):
    class Status(models.TextChoices):
        TRIGGERED = "triggered"
        ACKNOWLEDGED = "acknowledged"
        MITIGATED = "mitigated"  # the run trains again
        RESOLVED = "resolved"
        CLOSED = "closed"  # after the postmortem

    class Severity(models.TextChoices):
        SEV1 = "SEV1"
        SEV2 = "SEV2"
        SEV3 = "SEV3"
        SEV4 = "SEV4"

    OPEN = (Status.TRIGGERED, Status.ACKNOWLEDGED, Status.MITIGATED)

    title = models.CharField(max_length=300)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.TRIGGERED)
    severity = models.CharField(max_length=4, choices=Severity.choices, default=Severity.SEV4)
    severity_overridden = models.BooleanField(
        default=False, help_text="Set by a person: impact moves it again only when graded worse than when they set it."
    )
    # What the grouped alerts have in common: run:<name>, rack:<rack>, switch:<switch> or node:<hostname>.
    group_key = models.CharField(max_length=300)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="incidents")
    nodes = models.ManyToManyField(Node, blank=True, related_name="incidents")
    recommended_action = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(help_text="When the impact began (the earliest fault).")
    detected_at = models.DateTimeField(help_text="When FleetOps noticed.")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    mitigated_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    commander = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="commanded_incidents"
    )
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="assigned_incidents")
    discarded_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Discarded with its test run: out of every page and figure; its timeline stays.",
    )

    every = models.Manager()
    objects = LiveIncidents()

    class Meta:
        ordering = ["-started_at"]
        default_manager_name = "objects"
        base_manager_name = "every"  # a timeline entry, an alert, a delivery still reaches its discarded incident
        constraints = [
            # Grouping is enforced here, not by a lock in memory: one open incident per group.
            models.UniqueConstraint(
                fields=["group_key"],
                condition=Q(status__in=["triggered", "acknowledged", "mitigated"]),
                name="incident_one_open_per_group",
            )
        ]
        indexes = [models.Index(fields=["status", "severity"])]

    def __str__(self):
        return f"#{self.pk} {self.title}"

    def get_absolute_url(self):
        return reverse("incident-page", args=[self.pk])

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN


class Alert(models.Model):
    class Status(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="alerts")
    fingerprint = models.CharField(max_length=300)
    kind = models.CharField(max_length=40)  # an AlertKind (incidents/domain/alert_kinds.py)
    severity = models.CharField(max_length=10)  # critical, error, warning, info
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.FIRING)
    summary = models.CharField(max_length=500)
    explanation = models.TextField(blank=True, help_text="Why the detector decided this, in words.")
    recommended_action = models.CharField(max_length=200, blank=True)
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts")
    gpu = models.ForeignKey(GPU, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts")
    evidence = models.JSONField(default=dict, blank=True)
    count = models.PositiveIntegerField(default=1, help_text="Occurrences folded into this alert (a storm is one).")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint"], condition=Q(status="firing"), name="alert_one_firing_per_fingerprint"
            )
        ]
        # The unique index above holds only firing alerts; an occurrence's resolved alerts are read by fingerprint
        # too (services.findings_record: which episode was counted last).
        indexes = [models.Index(fields=["fingerprint"], name="alert_fingerprint")]

    def __str__(self):
        return f"{self.fingerprint} x{self.count}"


class AppendOnlyError(Exception):
    """A write that would change or remove an audit record (TimelineEntry)."""


class TimelineEntryQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("Timeline entries are the audit log: they are never updated.")

    def delete(self):
        raise AppendOnlyError("Timeline entries are the audit log: they are never deleted.")

    delete.queryset_only = True  # as Django's: no TimelineEntry.objects.delete()


class TimelineEntry(models.Model):
    """Append-only: every action and automatic step on an incident, who did it and when; also the audit log.

    The application never changes or removes a row: save() of a stored row, delete() and the QuerySet's update()
    and delete() raise AppendOnlyError, and on PostgreSQL a trigger refuses UPDATE and DELETE from any client
    (migration 0006). Incidents and people who acted are therefore PROTECTed: deactivate a person, never delete.
    """

    class Kind(models.TextChoices):
        OPENED = "opened"
        ALERT = "alert"
        ACKNOWLEDGED = "acknowledged"
        ASSIGNED = "assigned"
        ESCALATED = "escalated"
        NOTE = "note"
        SEVERITY = "severity"
        MITIGATED = "mitigated"
        RESOLVED = "resolved"
        REOPENED = "reopened"
        CLOSED = "closed"
        REFUSED = "refused"  # an action someone was not allowed to take
        PLAYBOOK = "playbook"
        PAGED = "paged"
        POSTMORTEM = "postmortem"
        DISCARDED = "discarded"  # with its test run (run_discard)

    incident = models.ForeignKey(Incident, on_delete=models.PROTECT, related_name="timeline")
    at = models.DateTimeField()
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    actor_name = models.CharField(max_length=200, help_text="Who: a username, 'token:<name>' or 'FleetOps'.")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    text = models.TextField()
    data = models.JSONField(default=dict, blank=True)

    objects = TimelineEntryQuerySet.as_manager()

    class Meta:
        ordering = ["at", "id"]
        verbose_name_plural = "timeline entries"

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.kind}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError(f"Timeline entry {self.pk} is part of the audit log: it is never updated.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"Timeline entry {self.pk} is part of the audit log: it is never deleted.")


# For the OpenAPI schema's enum names (settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]).
INCIDENT_STATUS_CHOICES = Incident.Status.choices
ALERT_STATUS_CHOICES = Alert.Status.choices


class PlaybookExecution(models.Model):
    """One run of a playbook. Its steps are frozen into `definition` when it starts: later edits don't apply."""

    class Status(models.TextChoices):
        RUNNING = "running"
        WAITING = "waiting_approval"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        ABORTED = "aborted"

    ACTIVE = (Status.RUNNING, Status.WAITING)

    playbook = models.CharField(max_length=100)
    definition = models.JSONField(help_text="The steps as they were when the execution started.")
    incident = models.ForeignKey(Incident, null=True, blank=True, on_delete=models.SET_NULL, related_name="playbooks")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="playbooks")
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="playbooks")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    dry_run = models.BooleanField(default=False)
    started_by = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    # A worker holding a step renews this; a stale one means the worker died and the sweeper resumes it.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            # At most one active execution per node and per run: enforced by the database.
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(status__in=["running", "waiting_approval"], dry_run=False),
                name="playbook_one_active_per_node",
            ),
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(status__in=["running", "waiting_approval"], dry_run=False),
                name="playbook_one_active_per_run",
            ),
        ]

    def __str__(self):
        return f"{self.playbook} #{self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE


class StepExecution(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        WAITING = "waiting_approval"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"

    execution = models.ForeignKey(PlaybookExecution, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=100)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    output = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    approver_role = models.CharField(max_length=20, blank=True, help_text="Who may approve: oncall or admin.")
    approved_by = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["execution", "index"]
        constraints = [models.UniqueConstraint(fields=["execution", "index"], name="step_unique_index")]

    def __str__(self):
        return f"{self.execution_id}.{self.index} {self.name} ({self.status})"

    @property
    def seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class Postmortem(models.Model):
    """The write-up of one incident: drafted by FleetOps from the record when it is resolved, then edited."""

    incident = models.OneToOneField(Incident, on_delete=models.CASCADE, related_name="postmortem")
    markdown = models.TextField()
    drafted_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    reviewed_at = models.DateTimeField(null=True, blank=True, help_text="Cleared when the text changes after.")
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_by_name = models.CharField(max_length=200, blank=True)

    def __str__(self):
        return f"Postmortem of #{self.incident_id}"

    def get_absolute_url(self):
        return reverse("incident-postmortem", args=[self.incident_id])


class PostmortemVersion(models.Model):
    """Append-only: every draft and every save of a postmortem, with who wrote it."""

    postmortem = models.ForeignKey(Postmortem, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    markdown = models.TextField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    author_name = models.CharField(max_length=200)
    note = models.CharField(max_length=200, blank=True, help_text="drafted, redrafted or edited")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["postmortem", "-number"]
        constraints = [models.UniqueConstraint(fields=["postmortem", "number"], name="postmortem_version_unique")]

    def __str__(self):
        return f"{self.postmortem} v{self.number} by {self.author_name}"


class ActionItem(models.Model):
    """Something a postmortem says must be done, with who does it and by when; tracked across incidents."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="action_items")
    text = models.CharField(max_length=500)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="action_items"
    )
    due_on = models.DateField(null=True, blank=True)
    created_by_name = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    done_at = models.DateTimeField(null=True, blank=True)
    done_by_name = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["done_at", "due_on"])]

    def __str__(self):
        return f"#{self.incident_id}: {self.text}"

    @property
    def is_done(self) -> bool:
        return self.done_at is not None


class WebhookEndpoint(models.Model):
    """Where incident events go: a webhook (generic JSON, Slack, PagerDuty Events v2) or a list of e-mail addresses."""

    class Format(models.TextChoices):
        GENERIC = "generic"
        SLACK = "slack"
        PAGERDUTY = "pagerduty"
        EMAIL = "email"

    name = models.CharField(max_length=100, unique=True)
    url = models.CharField(
        max_length=1000, help_text="The https:// URL to POST to; for e-mail, addresses, comma-separated."
    )
    format = models.CharField(max_length=20, choices=Format.choices, default=Format.GENERIC)
    secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="Signs each body with HMAC-SHA256 (X-FleetOps-Signature); blank: unsigned.",
    )
    routing_key = models.CharField(max_length=200, blank=True, help_text="PagerDuty format: the integration's key.")
    events = models.JSONField(
        default=list, blank=True, help_text='Event names to send, e.g. ["triggered"]; empty: all.'
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.format})"

    def wants(self, event: str) -> bool:
        return not self.events or event in self.events


class Delivery(models.Model):
    """One event for one endpoint: created with the timeline entry, sent by a task, retried with backoff."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="deliveries")
    entry = models.ForeignKey(TimelineEntry, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    payload = models.JSONField(help_text="What is sent, built when the event happened.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # A worker sending this holds it until then; a later worker may take it over only after (the first one died).
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        # One event is delivered at most once per endpoint.
        constraints = [models.UniqueConstraint(fields=["endpoint", "entry"], name="delivery_one_per_endpoint_entry")]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self):
        return f"{self.event} #{self.incident_id} -> {self.endpoint_id} ({self.status})"


class WeeklyReport(models.Model):
    """A reliability report of one window (a week, usually), frozen when generated: later events do not change it.

    `data` holds plain numbers (incidents/reports/selectors.py: report_build). One report per window: regenerating
    replaces it. Its table keeps the name it had when the model lived in runs (moved by state-only migrations).
    """

    since = models.DateTimeField()
    until = models.DateTimeField()
    generated_at = models.DateTimeField()
    data = models.JSONField()

    class Meta:
        db_table = "runs_weeklyreport"
        ordering = ["-since", "-until"]
        constraints = [models.UniqueConstraint(fields=["since", "until"], name="weekly_report_unique_window")]

    def __str__(self):
        return f"report {self.since:%Y-%m-%d} to {self.until:%Y-%m-%d}"

    def get_absolute_url(self):
        return reverse("report-page", args=[self.pk])


class RunDiscard(models.Model):
    """The audit of a test run discarded (incidents.services.run_discard): who, when, why, and what went with it. The
    run's own rows and events are gone; its incidents stay, discarded, with an entry on each timeline. Append-only."""

    at = models.DateTimeField()
    actor_name = models.CharField(max_length=200, help_text="Who: a username, or 'command:<os user>'.")
    run_name = models.CharField(max_length=200)
    reason = models.TextField()
    removed = models.JSONField(default=dict, help_text="How many of each: events, attempts, interruptions, ...")

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self):
        return f"{self.run_name} discarded by {self.actor_name}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnlyError("Run discards are the audit log: they are never changed.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Run discards are the audit log: they are never deleted.")


class Preference(models.Model):
    """A person's console settings: the time zone the pages show times in (UTC unless they chose another; every time
    says its zone). The weekly report keeps UTC whatever this says: its week and off-hours are UTC by definition."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference")
    time_zone = models.CharField(max_length=64, default="UTC")

    def __str__(self):
        return f"{self.user} · {self.time_zone}"
