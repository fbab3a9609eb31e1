"""The fleet record: clusters, nodes, GPUs, runs, attempts, interruptions, checkpoints, and the event log.

Everything but Event and the tokens (runs/models/tokens.py) is derived from the event log
(runs.services.events_apply) and can be rebuilt from it (`manage.py rebuild_record`). All times are stored in UTC.
"""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse

from runs.domain.cloudevents import CHECKPOINT_TIERS, INTERRUPTION_KINDS, NODE_STATE_CHOICES
from runs.domain.taxonomy import CAUSES, cause_group
from runs.models.tokens import ApiToken, TokenQuota, TokenSource  # noqa: F401  (the app's models, importable from here)


class Cluster(models.Model):
    class Scheduler(models.TextChoices):
        SLURM = "slurm"
        KUBERNETES = "kubernetes"
        SIMULATED = "simulated"

    name = models.CharField(max_length=200, unique=True)
    scheduler = models.CharField(max_length=20, choices=Scheduler.choices, default=Scheduler.SIMULATED)
    api_url = models.CharField(max_length=500, blank=True, help_text="Where the scheduler's API answers.")
    max_out_share = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Circuit breaker: the share of this cluster's nodes that may be out of service before a playbook "
        "pages a human instead of draining one more. Blank: PLAYBOOK_MAX_OUT_SHARE. A small cluster needs more than "
        "a large one: at 5 %, a 40-node cluster may have two nodes out.",
    )
    # Checkpoint I/O (docs/DOMAIN.md section 3, "Checkpoint I/O"): each hop's bandwidth, GB/s; blank: the setting's.
    gpu_host_gb_s = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="GB/s from one GPU to pinned host memory (its PCIe link). Blank: CHECKPOINT_GPU_HOST_GB_S.",
    )  # fmt: skip
    nvme_gb_s = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="GB/s from a node's host memory to its local NVMe drives, together. Blank: CHECKPOINT_NVME_GB_S.",
    )  # fmt: skip
    storage_gb_s = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="GB/s the shared file system takes from all its writers together (aggregate). Blank: "
        "CHECKPOINT_STORAGE_GB_S.",
    )  # fmt: skip
    peer_gb_s = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="GB/s from a node's host memory to another node's over the network. Blank: CHECKPOINT_PEER_GB_S.",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Node(models.Model):
    STATES = NODE_STATE_CHOICES

    hostname = models.CharField(max_length=200, unique=True)
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes")
    gpu_count = models.PositiveSmallIntegerField(default=8)
    gpu_model = models.CharField(max_length=100, blank=True)
    rack = models.CharField(max_length=100, blank=True)
    switch = models.CharField(max_length=100, blank=True)
    state = models.CharField(max_length=20, choices=STATES, default="in_service")
    state_reason = models.CharField(max_length=1000, blank=True)
    # Event time of the state now shown; an older node.state arriving late does not overwrite it.
    state_changed_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["hostname"]
        indexes = [models.Index(fields=["cluster", "state"])]

    def __str__(self):
        return self.hostname

    def get_absolute_url(self):
        return reverse("node-page", args=[self.hostname])


class GPU(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=100, blank=True)
    serial = models.CharField(max_length=100, blank=True)
    xid_count = models.PositiveBigIntegerField(default=0)  # a sum of folded storms: bigint, never full
    last_xid = models.PositiveIntegerField(null=True, blank=True)
    last_xid_at = models.DateTimeField(null=True, blank=True)
    last_xid_message = models.CharField(max_length=1000, blank=True)
    ecc_corrected = models.PositiveBigIntegerField(default=0)
    ecc_uncorrected = models.PositiveBigIntegerField(default=0)
    remapped_rows_corrected = models.PositiveIntegerField(default=0)
    remapped_rows_uncorrected = models.PositiveIntegerField(default=0)
    remapped_rows_pending = models.BooleanField(default=False)
    remapped_rows_failure = models.BooleanField(default=False)
    retired_pages = models.PositiveIntegerField(default=0)
    ecc_at = models.DateTimeField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    throttle_reasons = models.JSONField(default=list, blank=True)
    nvlink_errors = models.PositiveBigIntegerField(default=0)
    recovery_action = models.PositiveSmallIntegerField(
        default=0, help_text="NVML field 230: 0 none .. 4 drain and reset"
    )
    health_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")]

    def __str__(self):
        return f"{self.node.hostname}/gpu{self.index}"


class Run(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        RESTARTING = "restarting"
        COMPLETED = "completed"
        CANCELLED = "cancelled"

    name = models.CharField(max_length=200, unique=True)
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    # As counted in every GPU-hour figure: the most GPUs a run.started claimed (gpus_claimed; an attempt on fewer ran
    # shrunk), unless more than that attempt's nodes can hold (runs.domain.quality.gpus_counted), which the run's
    # data-quality findings then say.
    gpu_count = models.PositiveIntegerField(default=0)
    gpus_claimed = models.PositiveIntegerField(null=True, blank=True, help_text="The most GPUs a run.started says.")
    model_params = models.PositiveBigIntegerField(null=True, blank=True, help_text="Model size in parameters.")
    checkpoint_interval_s = models.FloatField(
        null=True, blank=True, help_text="Checkpoint policy: seconds between checkpoints."
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    last_step = models.PositiveBigIntegerField(null=True, blank=True)
    last_step_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "name"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("run-page", args=[self.name])


class Attempt(models.Model):
    """One start of a run by the scheduler; a restart after a failure is the next attempt."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    job_id = models.CharField(max_length=200)
    nodes = models.ManyToManyField(Node, related_name="attempts", blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=20, blank=True)
    resumed_from_step = models.PositiveBigIntegerField(null=True, blank=True)
    # The GPUs this attempt started on, as its run.started said: fewer than the run's own (Run.gpu_count, the most any
    # start claimed) when it was shrunk to continue without a node (the shrink-and-continue playbook).
    gpus = models.PositiveIntegerField(null=True, blank=True)
    # The id of the run.started event this attempt began with: while it stays the same, so do the attempt's nodes,
    # and a rebuild of the run need not read its 2,048 hostnames again. Not a foreign key: retention and rebuilds
    # delete events in bulk, and nothing follows this link but the rebuild's comparison. So a membership changed by
    # hand (deleting a node) stays so until the attempt's start changes or `manage.py rebuild_record` runs.
    start_event_id = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="attempt_unique_number")]

    def __str__(self):
        return f"{self.run.name} #{self.number}"

    @staticmethod
    def sizing_node_count(run) -> int:
        """How many nodes the attempt that claimed the run's size holds (0 with no attempt): the latest of those that
        claimed the most GPUs, else the latest. One indexed query, whatever the run's history (counting every
        attempt's nodes of a 2,048-node run with 477 restarts read a million rows)."""
        sizing = run.attempts.order_by(models.F("gpus").desc(nulls_last=True), "-number").values("pk")[:1]
        return Attempt.nodes.through.objects.filter(attempt_id=models.Subquery(sizing)).count()


class Interruption(models.Model):
    """A stop of a run: fault, detection, running again, training again (four timestamps, UTC)."""

    CAUSES = [(cause.value, label) for cause, (label, _, _) in CAUSES.items()]

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="interruptions")
    number = models.PositiveIntegerField()
    attempt = models.ForeignKey(Attempt, null=True, blank=True, on_delete=models.SET_NULL, related_name="interruptions")
    fault_at = models.DateTimeField(help_text="When the fault happened.")
    detected_at = models.DateTimeField(help_text="When it was noticed.")
    running_at = models.DateTimeField(null=True, blank=True, help_text="When the next attempt started.")
    resumed_at = models.DateTimeField(null=True, blank=True, help_text="When training resumed from a checkpoint.")
    resumed_from_step = models.PositiveBigIntegerField(null=True, blank=True)
    cause = models.CharField(max_length=40, choices=CAUSES, default="unknown")
    planned = models.BooleanField(default=False)
    kind = models.CharField(max_length=10, choices=[(k, k) for k in INTERRUPTION_KINDS], default="crash")
    reason = models.CharField(max_length=1000, blank=True)
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="interruptions")
    gpu = models.ForeignKey(GPU, null=True, blank=True, on_delete=models.SET_NULL, related_name="interruptions")
    xid = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="interruption_unique_number")]
        indexes = [models.Index(fields=["fault_at"])]

    def __str__(self):
        return f"{self.run.name} interruption {self.number}"

    @property
    def cause_group(self) -> str:
        return cause_group(self.cause).value

    @property
    def resumed_from_checkpoint(self):
        """The checkpoint training resumed from, once both its event and the restore are known."""
        if self.resumed_from_step is None:
            return None
        return Checkpoint.objects.filter(run_id=self.run_id, step=self.resumed_from_step).first()


class Checkpoint(models.Model):
    TIERS = [(tier, tier) for tier in CHECKPOINT_TIERS]

    class Status(models.TextChoices):
        STARTED = "started"
        COMPLETED = "completed"
        FAILED = "failed"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveBigIntegerField()
    started_at = models.DateTimeField(null=True, blank=True, help_text="When training blocked for the write.")
    blocking_s = models.FloatField(null=True, blank=True, help_text="Seconds training was blocked.")
    completed_at = models.DateTimeField(null=True, blank=True)
    durable_at = models.DateTimeField(null=True, blank=True, help_text="When the checkpoint could be restored from.")
    bytes = models.PositiveBigIntegerField(null=True, blank=True)
    tier = models.CharField(max_length=10, choices=TIERS, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.STARTED)
    failure_reason = models.CharField(max_length=1000, blank=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="checkpoint_unique_step")]

    def __str__(self):
        return f"{self.run.name} checkpoint @{self.step}"


class Event(models.Model):
    """Every accepted CloudEvent, append-only. The rest of the record is derived from these."""

    source = models.CharField(max_length=1000)
    event_id = models.CharField(max_length=1000)
    type = models.CharField(max_length=50)
    subject = models.CharField(max_length=1000, blank=True)
    time = models.DateTimeField(help_text="When it happened, as the sender says (UTC).")
    received_at = models.DateTimeField(auto_now_add=True)
    data = models.JSONField()
    # Denormalised from data so a run's or node's events are one indexed query away.
    run_name = models.CharField(max_length=200, blank=True)
    node_name = models.CharField(max_length=200, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    # Claimed by the detectors (incidents.detection.services) once they have looked at it: each event counts once.
    detected_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Set when the event failed to apply on its own (its `error` says why): it is left out of the record, every other
    # event goes on, and `manage.py replay_quarantined` (or the quarantine page) tries it again after a fix.
    quarantined_at = models.DateTimeField(null=True, blank=True)
    # The token that sent it (empty: FleetOps itself, a loaded history): who said what, and the unit of fair applying.
    token = models.ForeignKey(
        "ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # The apply turn it waits in until applied (runs.services.turn_of): its token's id, 0 for FleetOps itself, -1 for
    # a node agent's poll. Empty for events stored before turns had a column: the sweeper applies those.
    turn = models.BigIntegerField(null=True, blank=True)
    # Set when the sender's clock is off, accepted but flagged (docs/EVENTS.md): + the lead its source's clock showed in
    # the batch (EVENTS_FUTURE_TOLERANCE_S), by which the event was moved back; - how far behind its receipt it was
    # sent (EVENTS_LATE_FLAG_S), kept as sent.
    skew_s = models.FloatField(
        null=True, blank=True, help_text="Seconds the event's time is ahead of (+) or behind (-) its receipt."
    )

    class Meta:
        ordering = ["time", "id"]
        constraints = [models.UniqueConstraint(fields=["source", "event_id"], name="event_unique_source_id")]
        indexes = [
            models.Index(fields=["run_name", "type", "time"]),
            models.Index(fields=["run_name", "time"], name="event_run_time"),  # a run's latest event (its silence)
            models.Index(fields=["node_name", "time"]),
            models.Index(fields=["id"], condition=Q(applied_at__isnull=True), name="event_unapplied"),
            # Each turn's backlog, oldest first: the fair apply takes a chunk of one turn at a time.
            models.Index(fields=["turn", "id"], condition=Q(applied_at__isnull=True), name="event_unapplied_turn"),
            # The quarantine (a handful of rows, if any): counted on every overview.
            models.Index(fields=["id"], condition=Q(quarantined_at__isnull=False), name="event_quarantined"),
            # The detection sweeper's backlog (incidents.detection.services.pending_detect): without it, a scan of the
            # table every minute. Small: events leave it within seconds, once detected.
            models.Index(fields=["id"], condition=Q(detected_at__isnull=True), name="event_undetected"),
            # A node's rare fault events among its many samples: the Xid history, repair times, ECC deltas.
            models.Index(
                fields=["node_name", "time"],
                condition=Q(type__in=["gpu.xid", "gpu.ecc", "node.state"]),
                name="event_node_faults",
            ),
            # A GPU's previous health reading, for the NVLink error delta (incidents.detection.services): a node's
            # samples are mostly heartbeats, and at 131,072 GPUs a chunk of readings asks this 500 times.
            models.Index(fields=["node_name", "time"], condition=Q(type="gpu.health"), name="event_gpu_health"),
        ]

    def __str__(self):
        return f"{self.type} {self.source}#{self.event_id}"


class EventRollup(models.Model):
    """Raw high-rate events of one series and one UTC day, summed before retention deleted them (runs.retention).

    A series is the event type with its run, node, GPU and rank; `gpu` and `rank` are -1 where the type has none
    (a unique constraint treats NULLs as distinct). `value_*` summarise what the type measures: seconds a step took
    (rank.step_time), the gradient norm (rank.grad_norm), degrees Celsius (gpu.health); a heartbeat has no value,
    only its count. The mean is value_sum / count.
    """

    type = models.CharField(max_length=50)
    day = models.DateField(help_text="The UTC day of the events' time.")
    run_name = models.CharField(max_length=200, blank=True)
    node_name = models.CharField(max_length=200, blank=True)
    gpu = models.SmallIntegerField(default=-1)
    rank = models.IntegerField(default=-1)
    count = models.PositiveBigIntegerField(default=0)
    value_min = models.FloatField(null=True, blank=True)
    value_max = models.FloatField(null=True, blank=True)
    value_sum = models.FloatField(default=0.0)
    first_at = models.DateTimeField(help_text="The earliest event's time (UTC).")
    last_at = models.DateTimeField(help_text="The latest event's time (UTC).")

    class Meta:
        ordering = ["-day", "type", "run_name", "node_name", "gpu", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["type", "day", "run_name", "node_name", "gpu", "rank"], name="event_rollup_unique_series_day"
            )
        ]
        indexes = [models.Index(fields=["node_name", "day"]), models.Index(fields=["run_name", "day"])]

    def __str__(self):
        return f"{self.type} {self.day} {self.run_name or self.node_name}"

    @property
    def value_mean(self) -> float | None:
        return self.value_sum / self.count if self.count and self.value_min is not None else None


# For the OpenAPI schema's enum names (settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]).
CHECKPOINT_STATUS_CHOICES = Checkpoint.Status.choices


class ApplyTurn(models.Model):
    """A sender whose events wait to be applied has one turn queued, no more (runs.services.apply_turn_take): the
    apply queue holds a turn per sender, not a task per batch, so a flood from one token waits behind everyone
    else's next chunk instead of everyone waiting behind the flood. `sender` is the turn (runs.services.turn_of): the
    token's id, 0 for no token, -1 for the node agents' polls together."""

    sender = models.BigIntegerField(primary_key=True)
    queued_at = models.DateTimeField()

    def __str__(self):
        return f"turn of sender {self.sender} queued at {self.queued_at:%H:%M:%S}"
