from rest_framework import serializers

from runs.domain.cloudevents import EVENT_TYPES
from runs.domain.taxonomy import cause_label
from runs.models import GPU, Attempt, Checkpoint, Event, Interruption, Node, Run


def _seconds(start, end):
    return (end - start).total_seconds() if start and end else None


class RunSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    attempts = serializers.IntegerField(source="attempt_count", read_only=True)
    interruptions = serializers.IntegerField(source="interruption_count", read_only=True)

    class Meta:
        model = Run
        fields = [
            "name",
            "cluster",
            "state",
            "gpu_count",
            "model_params",
            "checkpoint_interval_s",
            "started_at",
            "ended_at",
            "last_step",
            "last_step_at",
            "attempts",
            "interruptions",
        ]


class AttemptSerializer(serializers.ModelSerializer):
    nodes = serializers.SlugRelatedField(slug_field="hostname", many=True, read_only=True)

    class Meta:
        model = Attempt
        fields = ["number", "job_id", "nodes", "gpus", "started_at", "ended_at", "end_reason", "resumed_from_step"]


class InterruptionSerializer(serializers.ModelSerializer):
    attempt = serializers.IntegerField(source="attempt.number", allow_null=True, read_only=True)
    node = serializers.CharField(source="node.hostname", allow_null=True, read_only=True)
    gpu = serializers.IntegerField(source="gpu.index", allow_null=True, read_only=True)
    cause_label = serializers.SerializerMethodField()
    cause_group = serializers.CharField(read_only=True)
    detection_s = serializers.SerializerMethodField(help_text="Fault to detection, seconds.")
    rescheduling_s = serializers.SerializerMethodField(help_text="Detection to running again, seconds.")
    reload_s = serializers.SerializerMethodField(help_text="Running again to training again, seconds.")

    class Meta:
        model = Interruption
        fields = [
            "number",
            "attempt",
            "fault_at",
            "detected_at",
            "running_at",
            "resumed_at",
            "resumed_from_step",
            "cause",
            "cause_label",
            "cause_group",
            "planned",
            "kind",
            "reason",
            "node",
            "gpu",
            "xid",
            "detection_s",
            "rescheduling_s",
            "reload_s",
        ]

    def get_cause_label(self, obj) -> str:
        return cause_label(obj.cause)

    def get_detection_s(self, obj) -> float | None:
        return _seconds(obj.fault_at, obj.detected_at)

    def get_rescheduling_s(self, obj) -> float | None:
        return _seconds(obj.detected_at, obj.running_at)

    def get_reload_s(self, obj) -> float | None:
        return _seconds(obj.running_at, obj.resumed_at)


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = [
            "step",
            "status",
            "started_at",
            "blocking_s",
            "completed_at",
            "durable_at",
            "bytes",
            "tier",
            "failure_reason",
        ]


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Node
        fields = [
            "hostname",
            "cluster",
            "state",
            "state_reason",
            "state_changed_at",
            "last_heartbeat_at",
            "gpu_count",
            "gpu_model",
            "rack",
            "switch",
        ]


class GPUSerializer(serializers.ModelSerializer):
    class Meta:
        model = GPU
        exclude = ["id", "node"]


class EventSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="event_id")

    class Meta:
        model = Event
        fields = ["id", "source", "type", "subject", "time", "received_at", "applied_at", "skew_s", "data"]


class NodeDetailSerializer(NodeSerializer):
    gpus = GPUSerializer(many=True, read_only=True)
    recent_events = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "gpus", "recent_events"]

    def get_recent_events(self, obj) -> list[dict]:
        events = Event.objects.filter(node_name=obj.hostname).order_by("-time", "-id")[:50]
        return EventSerializer(events, many=True).data


# --- Documentation of the intake (the view validates with runs.domain.cloudevents) ---


class CloudEventSerializer(serializers.Serializer):
    specversion = serializers.ChoiceField(choices=["1.0"])
    id = serializers.CharField()
    source = serializers.CharField()
    type = serializers.ChoiceField(choices=EVENT_TYPES)
    time = serializers.DateTimeField(help_text="RFC 3339; for run.failed, when the fault happened.")
    subject = serializers.CharField(required=False)
    data = serializers.DictField(help_text="Fields by type: see docs/EVENTS.md.")


class IngestItemSerializer(serializers.Serializer):
    id = serializers.CharField()
    source = serializers.CharField()
    status = serializers.ChoiceField(choices=["accepted", "duplicate"])


class IngestResultSerializer(serializers.Serializer):
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    events = IngestItemSerializer(many=True)


class ProblemSerializer(serializers.Serializer):
    index = serializers.IntegerField(required=False, help_text="The event's place in a batch; absent for one object.")
    field = serializers.CharField()
    reason = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    errors = ProblemSerializer(many=True, required=False)
