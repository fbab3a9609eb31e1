from django.utils import timezone
from rest_framework import serializers

from incidents import selectors
from incidents.models import Alert, Incident, TimelineEntry


class ImpactSerializer(serializers.Serializer):
    gpus_idle = serializers.IntegerField()
    gpu_hours_lost = serializers.FloatField()
    goodput_lost = serializers.FloatField(help_text="Fraction points of the run's goodput.")
    rewound_min = serializers.FloatField()
    gpu_hours_per_minute = serializers.FloatField()
    cost_per_minute_usd = serializers.FloatField()
    silent_since = serializers.DateTimeField(
        allow_null=True, help_text="The run restarts and has said nothing since: its loss stopped being counted."
    )
    interruptions = serializers.IntegerField(help_text="The run's interruptions this incident owns.")
    gpus_idled = serializers.IntegerField(help_text="The GPUs its faults idled, now or before (severity's input).")


class IncidentSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.name", allow_null=True, read_only=True)
    nodes = serializers.SlugRelatedField(slug_field="hostname", many=True, read_only=True)
    commander = serializers.CharField(source="commander.username", allow_null=True, read_only=True)
    assignees = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    alerts = serializers.SerializerMethodField()
    impact = serializers.SerializerMethodField()

    class Meta:
        model = Incident
        fields = [
            "id",
            "title",
            "status",
            "severity",
            "severity_overridden",
            "group_key",
            "run",
            "nodes",
            "recommended_action",
            "started_at",
            "detected_at",
            "acknowledged_at",
            "mitigated_at",
            "resolved_at",
            "closed_at",
            "commander",
            "assignees",
            "alerts",
            "impact",
        ]

    def get_alerts(self, obj) -> dict:
        alerts = [(a.fingerprint, a.count, a.status) for a in obj.alerts.all()]  # prefetched by the view
        return {
            "count": sum(count for _, count, _ in alerts),
            "firing": sum(1 for _, _, state in alerts if state == "firing"),
            "fingerprints": sorted({fingerprint for fingerprint, _, _ in alerts}),
        }

    def get_impact(self, obj) -> ImpactSerializer:
        impacts = self.context.get("impacts")  # a list computes them all at once (IncidentViewSet.list)
        impact = impacts[obj.pk] if impacts and obj.pk in impacts else None
        return ImpactSerializer(impact or selectors.incident_impact(incident=obj, now=timezone.now())).data


class AlertSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.hostname", allow_null=True, read_only=True)
    gpu = serializers.IntegerField(source="gpu.index", allow_null=True, read_only=True)

    class Meta:
        model = Alert
        fields = [
            "fingerprint",
            "kind",
            "severity",
            "status",
            "summary",
            "explanation",
            "recommended_action",
            "node",
            "gpu",
            "count",
            "first_seen_at",
            "last_seen_at",
            "resolved_at",
            "evidence",
        ]


class TimelineEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = TimelineEntry
        fields = ["at", "actor", "kind", "text", "data"]


class IncidentDetailSerializer(IncidentSerializer):
    alert_list = AlertSerializer(source="alerts", many=True, read_only=True)
    timeline = serializers.SerializerMethodField()

    class Meta(IncidentSerializer.Meta):
        fields = [*IncidentSerializer.Meta.fields, "alert_list", "timeline"]

    def get_timeline(self, obj) -> list[dict]:
        # Refusals are audit entries: kept, but not part of the story the timeline tells.
        entries = obj.timeline.exclude(kind=TimelineEntry.Kind.REFUSED).order_by("at", "id")
        return TimelineEntrySerializer(entries, many=True).data


# --- Response metrics (views.response_metrics builds the JSON; this declares it for the schema) ---


class ResponseSummarySerializer(serializers.Serializer):
    """One metric over the window's incidents (those that started in it and have its two timestamps)."""

    count = serializers.IntegerField(help_text="Incidents measured, a count.")
    mean_s = serializers.FloatField(allow_null=True, help_text="Mean, seconds; null when count is 0.")
    p50_s = serializers.FloatField(allow_null=True, help_text="Median (linear interpolation), seconds; null at 0.")
    p90_s = serializers.FloatField(allow_null=True, help_text="90th percentile (linear), seconds; null at 0.")


class ResponseMetricsSerializer(serializers.Serializer):
    """MTTD, MTTA, MTTM and MTTR of the incidents that started in [since, until) (docs/DOMAIN.md section 6); a
    negative duration (clocks that disagree) counts as 0."""

    since = serializers.DateTimeField(
        help_text="The window's start: as asked, else 30 days before until; ISO 8601, UTC."
    )
    until = serializers.DateTimeField(help_text="The window's end (exclusive): as asked, else now; ISO 8601, UTC.")
    mttd = ResponseSummarySerializer(help_text="Time to detect: fault (started_at) to detected_at.")
    mtta = ResponseSummarySerializer(help_text="Time to acknowledge: detected_at to acknowledged_at.")
    mttm = ResponseSummarySerializer(help_text="Time to mitigate: fault to mitigated_at.")
    mttr = ResponseSummarySerializer(help_text="Time to resolve: fault to resolved_at.")
