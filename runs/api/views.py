"""The REST API: event intake (CloudEvents 1.0) and the read API of the fleet record."""

import django_filters
from django.conf import settings
from django.db.models import Count
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status, viewsets
from rest_framework.decorators import action, api_view, parser_classes, permission_classes
from rest_framework.response import Response

from fleetops.jsonparse import StrictJSONParser
from runs import selectors, services
from runs.api import serializers as s
from runs.api.auth import EventsWriteScope
from runs.api.base import EventsOutOfBounds, InvalidEvents, over_quota, request_bytes
from runs.domain import trust
from runs.domain.cloudevents import binary_event, parse_events
from runs.models import Node, Run
from runs.quotas import quota_return, quota_take


class EventsJSONParser(StrictJSONParser):
    limit_setting = "EVENTS_MAX_BODY_BYTES"


class CloudEventsParser(EventsJSONParser):
    media_type = "application/cloudevents+json"


class CloudEventsBatchParser(EventsJSONParser):
    media_type = "application/cloudevents-batch+json"


_STRUCTURED = (CloudEventsParser.media_type, CloudEventsBatchParser.media_type)
_BINARY_JSON = ("", "application/json", "text/plain")


def _binary_mode_event(request) -> dict | None:
    """The event of a binary-mode request, in structured form; None for structured and batched mode.

    The HTTP binding (1.0.2, section 3.1) tells the modes apart by Content-Type: a CloudEvents media type is structured
    (or batched), anything else is binary. FleetOps has taken structured events as plain application/json from the
    start, so a request is binary only when it carries the `ce-specversion` header every binary message has. Its data
    must be JSON, as every FleetOps event's is: Content-Type application/json, a `+json` type, or none (the official
    SDK sends none for a dict). A missing Content-Type reaches us as text/plain from some WSGI servers (wsgiref, so
    `manage.py runserver`, fills in RFC 2045's default), so text/plain is read as JSON too: a body that is not JSON
    still gets 400 saying so."""
    media_type = request.content_type.split(";")[0].strip().lower()
    if "HTTP_CE_SPECVERSION" not in request.META or media_type in _STRUCTURED:
        return None
    if media_type not in _BINARY_JSON and not media_type.endswith("+json"):
        raise exceptions.UnsupportedMediaType(
            media_type, f'Unsupported media type "{media_type}": binary-mode data must be JSON (application/json).'
        )
    stream = request.stream
    data = EventsJSONParser().parse(stream) if stream is not None else None
    headers = [(key[5:].replace("_", "-"), value) for key, value in request.META.items() if key.startswith("HTTP_CE_")]
    event, problems = binary_event(headers, data, media_type)
    if problems:
        raise InvalidEvents(problems)
    return event


@extend_schema(
    request=s.CloudEventSerializer(many=True),
    responses={
        202: s.IngestResultSerializer,
        200: OpenApiResponse(s.IngestResultSerializer, description="Every event was a duplicate."),
        400: s.ErrorSerializer,
        401: s.ErrorSerializer,
        403: s.ErrorSerializer,
        413: s.ErrorSerializer,
    },
    summary="Post one CloudEvent or a batch",
    description=(
        "CloudEvents 1.0 over HTTP in any of its three modes: structured (one event as JSON, application/json or "
        "application/cloudevents+json), batched (a JSON array, application/cloudevents-batch+json or "
        "application/json) and binary (the attributes as ce-* headers, ce-specversion among them, the data as a JSON "
        "body). A batch is all-or-nothing; (source, id) repeats are duplicates."
    ),
)
@api_view(["POST"])
@permission_classes([EventsWriteScope])
@parser_classes([EventsJSONParser, CloudEventsParser, CloudEventsBatchParser])
def events_create(request):
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not length.isdigit():
        raise exceptions.ParseError("Content-Length must be a whole number of bytes.")
    binary = _binary_mode_event(request)
    body = request.data if binary is None else binary
    events, problems = parse_events(body, max_batch=settings.EVENTS_MAX_BATCH)
    if problems:
        raise InvalidEvents(problems)
    bounds = request.auth.bounds()
    # The clusters of what the events name, for a cluster-bound token and for a training job naming nodes.
    names_nodes = bounds.role == trust.TRAINER and any(trust.named_nodes(event) for event in events)
    node_clusters, run_clusters = selectors.event_clusters(events) if bounds.clusters or names_nodes else ({}, {})
    now = timezone.now()
    owned = set()
    if not bounds.sources:  # a bound token sends from its own sources only; an unbound one from nobody else's
        owned = selectors.sources_owned_elsewhere(sources={e.source for e in events}, token=request.auth, now=now)
    outside = trust.out_of_bounds(
        events, bounds, node_clusters=node_clusters, run_clusters=run_clusters, owned_sources=owned
    )
    if outside:
        raise EventsOutOfBounds(outside)
    size = request_bytes(request)
    refusal = quota_take(token=request.auth, count=len(events), size=size, now=now)
    if refusal is not None:
        return over_quota(refusal, what="batch")
    try:
        result = services.events_ingest(events=events, token=request.auth)
    except BaseException:
        quota_return(token=request.auth, count=len(events), size=size, now=now)
        raise
    items = [{"id": e.id, "source": e.source, "status": "accepted"} for e in result.accepted]
    items += [{"id": e.id, "source": e.source, "status": "duplicate"} for e in result.duplicates]
    body = {"accepted": len(result.accepted), "duplicates": len(result.duplicates), "events": items}
    return Response(body, status=status.HTTP_202_ACCEPTED if result.accepted else status.HTTP_200_OK)


class RunFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = Run
        fields = ["state", "cluster"]


class RunViewSet(viewsets.ReadOnlyModelViewSet):
    """Training runs, newest first, with their attempts, interruptions and checkpoints."""

    serializer_class = s.RunSerializer
    filterset_class = RunFilter
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    queryset = (
        Run.objects.select_related("cluster")
        .annotate(
            attempt_count=Count("attempts", distinct=True),
            interruption_count=Count("interruptions", distinct=True),
        )
        .order_by("-started_at", "name")
    )

    def _children(self, rows, serializer_class):
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(serializer_class(page, many=True).data)

    @extend_schema(responses=s.AttemptSerializer(many=True), filters=False)
    @action(detail=True, filterset_class=None)
    def attempts(self, request, name=None):
        run = get_object_or_404(Run, name=name)
        return self._children(run.attempts.prefetch_related("nodes").order_by("number"), s.AttemptSerializer)

    @extend_schema(responses=s.InterruptionSerializer(many=True), filters=False)
    @action(detail=True, filterset_class=None)
    def interruptions(self, request, name=None):
        run = get_object_or_404(Run, name=name)
        rows = run.interruptions.select_related("attempt", "node", "gpu").order_by("number")
        return self._children(rows, s.InterruptionSerializer)

    @extend_schema(responses=s.CheckpointSerializer(many=True), filters=False)
    @action(detail=True, filterset_class=None)
    def checkpoints(self, request, name=None):
        run = get_object_or_404(Run, name=name)
        return self._children(run.checkpoints.order_by("step"), s.CheckpointSerializer)


class NodeFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = Node
        fields = ["state", "cluster"]


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes by hostname; one node comes with its GPUs and its 50 most recent events."""

    filterset_class = NodeFilter
    lookup_field = "hostname"
    lookup_value_regex = "[^/]+"
    queryset = Node.objects.select_related("cluster").order_by("hostname")

    def get_serializer_class(self):
        return s.NodeDetailSerializer if self.action == "retrieve" else s.NodeSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        return queryset.prefetch_related("gpus") if self.action == "retrieve" else queryset
