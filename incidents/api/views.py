"""The incidents API: list and read incidents, act on them (tools, chat bots), response metrics."""

import django_filters
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.decorators import action, api_view
from rest_framework.response import Response

from incidents import selectors, services
from incidents.api.serializers import IncidentDetailSerializer, IncidentSerializer, ResponseMetricsSerializer
from incidents.models import Alert, Incident
from runs.api.auth import IncidentsWriteScope
from runs.api.serializers import ErrorSerializer
from runs.api.windows import WindowQuery, days_before, window_get
from runs.models import ApiToken


class IncidentFilter(django_filters.FilterSet):
    run = django_filters.CharFilter(field_name="run__name")
    node = django_filters.CharFilter(field_name="nodes__hostname", distinct=True)
    # What the board shows by default, in one request: `status` names one state, and open is three of them.
    open = django_filters.BooleanFilter(
        method="_open", label="true: triggered, acknowledged or mitigated; false: resolved or closed."
    )

    class Meta:
        model = Incident
        fields = ["status", "severity", "run", "node", "open"]

    def _open(self, queryset, name, value):
        return queryset.filter(status__in=Incident.OPEN) if value else queryset.exclude(status__in=Incident.OPEN)


def actor_of(request) -> services.Actor:
    if isinstance(request.auth, ApiToken):
        return services.Actor.of_token(request.auth)
    return services.Actor.of_user(request.user)


class NoteBody(serializers.Serializer):
    text = serializers.CharField(max_length=10_000)


class ResolveBody(serializers.Serializer):
    override_reason = serializers.CharField(required=False, allow_blank=True, default="")


class ReopenBody(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)


ACTED = {
    200: IncidentDetailSerializer,
    409: OpenApiResponse(ErrorSerializer, description="Refused in this state (e.g. resolving while an alert fires)."),
}


class IncidentViewSet(viewsets.ReadOnlyModelViewSet):
    """Incidents, most severe and newest first; acting needs the incidents:write scope or the oncall role."""

    filterset_class = IncidentFilter
    lookup_value_regex = "[0-9]+"  # anything else is a 404 from the router, not a ValueError in the lookup

    def get_queryset(self):
        alerts = Prefetch("alerts", queryset=Alert.objects.select_related("node", "gpu"))
        return selectors.incidents_list().prefetch_related("nodes", "assignees", alerts)

    def list(self, request, *args, **kwargs):
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = page if page is not None else list(queryset)
        context = {
            **self.get_serializer_context(),
            "impacts": selectors.incident_impacts_get(incidents=rows, now=timezone.now()),
        }
        data = self.get_serializer_class()(rows, many=True, context=context).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    def get_serializer_class(self):
        return IncidentDetailSerializer if self.action != "list" else IncidentSerializer

    def _act(self, request, pk, name, service, **kwargs):
        incident = get_object_or_404(Incident, pk=pk)
        if not IncidentsWriteScope().has_permission(request, self):
            services.action_refused(incident=incident, actor=actor_of(request), action=name)
            raise exceptions.PermissionDenied(
                f"You may not {name} incidents (needs incidents:write or the oncall role)."
            )
        try:
            service(incident=incident, actor=actor_of(request), **kwargs)
        except services.IncidentError as error:
            return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
        incident = self.get_queryset().get(pk=pk)
        return Response(IncidentDetailSerializer(incident, context={"request": request}).data)

    @extend_schema(request=None, responses=ACTED)
    @action(detail=True, methods=["post"], permission_classes=[], filterset_class=None)
    def acknowledge(self, request, pk=None):
        return self._act(request, pk, "acknowledge", services.incident_acknowledge)

    @extend_schema(request=ResolveBody, responses=ACTED)
    @action(detail=True, methods=["post"], permission_classes=[], filterset_class=None)
    def resolve(self, request, pk=None):
        body = ResolveBody(data=request.data)
        body.is_valid(raise_exception=True)
        return self._act(request, pk, "resolve", services.incident_resolve, **body.validated_data)

    @extend_schema(request=NoteBody, responses=ACTED)
    @action(detail=True, methods=["post"], permission_classes=[], filterset_class=None)
    def notes(self, request, pk=None):
        body = NoteBody(data=request.data)
        body.is_valid(raise_exception=True)
        return self._act(request, pk, "add notes to", services.incident_note_add, text=body.validated_data["text"])

    @extend_schema(request=ReopenBody, responses=ACTED)
    @action(detail=True, methods=["post"], permission_classes=[], filterset_class=None)
    def reopen(self, request, pk=None):
        body = ReopenBody(data=request.data)
        body.is_valid(raise_exception=True)
        return self._act(request, pk, "reopen", services.incident_reopen, reason=body.validated_data["reason"])

    def get_permissions(self):
        if self.action in ("acknowledge", "resolve", "notes", "reopen"):
            return [_Authenticated()]  # the scope check happens in _act, so a refusal can be audited
        return super().get_permissions()


class _Authenticated:
    def has_permission(self, request, view):
        if request.auth is None and not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated("An API token is required: 'Authorization: Bearer <token>'.")
        return True

    def has_object_permission(self, request, view, obj):
        return True


@extend_schema(
    parameters=[WindowQuery], responses=ResponseMetricsSerializer, summary="MTTD, MTTA, MTTM, MTTR over a window"
)
@api_view(["GET"])
def response_metrics(request):
    window = window_get(request.query_params, since_default=days_before(30), until_default=timezone.now())
    since, until = window.since, window.until
    return Response({"since": since, "until": until, **selectors.response_metrics_get(since=since, until=until)})
