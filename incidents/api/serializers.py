from django.conf import settings
from django.utils import timezone
from rest_framework import serializers

from incidents import selectors
from incidents.domain.advice import STATES
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


class AdviceSerializer(serializers.Serializer):
    """The recommended action with the incident's automation read (docs/DOMAIN.md section 5)."""

    state = serializers.ChoiceField(
        choices=STATES, help_text="Where automation stands: manual (no playbook ran), running, waiting_approval, "
        "refused, failed, aborted or done."
    )  # fmt: skip
    done = serializers.CharField(help_text="What FleetOps did and where its playbook stands, a sentence.")
    left = serializers.CharField(help_text="What is left for a person.")
    alerts = serializers.CharField(help_text="What the alerts recommend, whatever automation did.")
    playbook = serializers.CharField(help_text='The execution read, "drain-and-replace #3"; empty when none ran.')


class IncidentSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.name", allow_null=True, read_only=True)
    nodes = serializers.SlugRelatedField(slug_field="hostname", many=True, read_only=True)
    commander = serializers.CharField(source="commander.username", allow_null=True, read_only=True)
    assignees = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    alerts = serializers.SerializerMethodField()
    impact = serializers.SerializerMethodField()
    recommended_action = serializers.SerializerMethodField(
        help_text="What is left for a person, then what FleetOps did: `advice` in one line."
    )
    advice = serializers.SerializerMethodField()

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
            "advice",
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

    def get_recommended_action(self, obj) -> str:
        return self._advice(obj).text

    def get_advice(self, obj) -> AdviceSerializer:
        return AdviceSerializer(self._advice(obj)).data

    def _advice(self, obj):
        advices = self.context.setdefault("advices", {})  # a list reads them all at once (IncidentViewSet.list)
        if obj.pk not in advices:
            advices[obj.pk] = selectors.incident_advice_get(incident=obj)
        return advices[obj.pk]

    def get_impact(self, obj) -> ImpactSerializer:
        return ImpactSerializer(self._impact(obj)).data

    def _impact(self, obj) -> selectors.Impact:
        impacts = self.context.setdefault("impacts", {})  # a list computes them all at once (IncidentViewSet.list)
        if obj.pk not in impacts:
            impacts[obj.pk] = selectors.incident_impact(incident=obj, now=timezone.now())
        return impacts[obj.pk]


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


class ThresholdsSerializer(serializers.Serializer):
    gpus = serializers.IntegerField(help_text="GPUs idled that reach this level.")
    usd_per_min = serializers.FloatField(help_text="Those GPUs' burn at GPU_HOUR_COST_USD, $/min.")
    runs = serializers.IntegerField(help_text="Runs affected that reach this level.")
    gpu_hours = serializers.FloatField(help_text="GPU-hours lost that reach this level.")
    own_usd_per_min = serializers.FloatField(
        allow_null=True, help_text="A dollar threshold of its own (INCIDENT_SEV<n>_USD_PER_MIN); null when unset."
    )
    words = serializers.CharField()


class SeverityGradeSerializer(serializers.Serializer):
    """What impact grades the incident now (docs/DOMAIN.md section 6). The incident's `severity` is never lowered by
    FleetOps and a person may have set it: it can be worse than this."""

    severity = serializers.CharField(help_text="SEV1..SEV4 as the figures grade it now.")
    because = serializers.CharField(help_text="The threshold that decided it, in words.")
    gpus_idled = serializers.IntegerField()
    usd_per_min = serializers.FloatField(help_text="The GPUs idled at GPU_HOUR_COST_USD, $/min.")
    runs_affected = serializers.IntegerField()
    gpu_hours_lost = serializers.FloatField()
    critical_alert = serializers.BooleanField(help_text="A critical alert fires (SEV3 at least).")
    sev1 = ThresholdsSerializer()
    sev2 = ThresholdsSerializer()


class IncidentDetailSerializer(IncidentSerializer):
    alert_list = AlertSerializer(source="alerts", many=True, read_only=True)
    timeline = serializers.SerializerMethodField()
    severity_grade = serializers.SerializerMethodField()

    class Meta(IncidentSerializer.Meta):
        fields = [*IncidentSerializer.Meta.fields, "severity_grade", "alert_list", "timeline"]

    def get_severity_grade(self, obj) -> SeverityGradeSerializer:
        alerts = list(obj.alerts.all())  # prefetched by the view
        graded = selectors.incident_grade_get(incident=obj, impact=self._impact(obj), alerts=alerts)
        price, figures = settings.GPU_HOUR_COST_USD, graded.figures
        words = graded.thresholds()

        def level(limits, name):
            return {
                "gpus": limits.gpus,
                "usd_per_min": limits.gpus * price / 60,
                "runs": limits.runs,
                "gpu_hours": limits.gpu_hours,
                "own_usd_per_min": limits.usd_per_min,
                "words": words[name],
            }

        return SeverityGradeSerializer(
            {
                "severity": graded.severity,
                "because": graded.grade.because,
                "gpus_idled": figures.gpus_idled,
                "usd_per_min": figures.usd_per_min,
                "runs_affected": figures.runs_affected,
                "gpu_hours_lost": figures.lost,
                "critical_alert": figures.critical_alert,
                "sev1": level(graded.sev1, "SEV1"),
                "sev2": level(graded.sev2, "SEV2"),
            }
        ).data

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
