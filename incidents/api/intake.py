"""Intake from other alerting systems: an Alertmanager webhook receiver and a PagerDuty Events API v2 endpoint."""

from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, parsers, status
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    parser_classes,
    permission_classes,
)
from rest_framework.response import Response

from runs.api.auth import EventsWriteScope
from runs.api.base import InvalidEvents
from runs.models import ApiToken

from .. import intake, services


class InvalidPayload(InvalidEvents):
    def __init__(self, problems):
        self.problems = problems
        exceptions.APIException.__init__(self, "The body is not an Alertmanager webhook payload (version 4).")


@extend_schema(
    request=dict,
    responses={200: dict, 400: OpenApiResponse(description="{detail, errors: [{index, field, reason}]}")},
    summary="Prometheus Alertmanager webhook receiver (payload version 4)",
    description=(
        "Point an Alertmanager webhook_config here with `http_config.authorization.credentials` set to a token "
        "with events:write. Firing alerts become FleetOps alerts (fingerprint am:<fingerprint>); resolved ones "
        "(or an endsAt in the past) resolve that alert only."
    ),
)
@api_view(["POST"])
@permission_classes([EventsWriteScope])
@parser_classes([parsers.JSONParser])
def alertmanager_webhook(request):
    alerts, problems = intake.alertmanager_parse(request.data)
    if problems:
        raise InvalidPayload(problems)
    with transaction.atomic():
        result = intake.alertmanager_apply(alerts)
    return Response({"firing": len(result.firing), "resolved": len(result.resolved)}, status=status.HTTP_200_OK)


class _AnyJson(parsers.JSONParser):
    media_type = "*/*"  # PagerDuty clients do not always send application/json


def _pd_error(code: int, message: str, errors: list[str], state: str = "invalid event") -> Response:
    return Response({"status": state, "message": message, "errors": errors}, status=code)


@extend_schema(
    request=dict,
    responses={202: dict, 400: dict, 401: dict, 403: dict},
    summary="PagerDuty Events API v2 compatible enqueue",
    description=(
        "routing_key is a FleetOps API token with events:write, so an emitter written for PagerDuty only needs "
        "this URL. trigger opens or counts the alert pd:<dedup_key>, acknowledge acknowledges its incident, "
        "resolve resolves that alert."
    ),
)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([])
@parser_classes([_AnyJson])
def pagerduty_enqueue(request):
    try:
        body = request.data
    except exceptions.ParseError as error:
        return _pd_error(400, "Event object is invalid", [f"The body is not JSON: {error.detail}"])
    event, errors = intake.pagerduty_parse(body)
    if event is None:
        return _pd_error(400, "Event object is invalid", errors)
    token = ApiToken.objects.filter(digest=ApiToken.digest_of(event.routing_key), revoked_at__isnull=True).first()
    if token is None:
        return _pd_error(401, "Invalid routing key", ["routing_key is not a FleetOps API token"], "unauthorized")
    if not token.has_scope(ApiToken.Scope.EVENTS_WRITE):
        return _pd_error(403, "Forbidden", ["this token lacks the 'events:write' scope"], "forbidden")
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    with transaction.atomic():
        intake.pagerduty_apply(event, actor=services.Actor.of_token(token))
    return Response(
        {"status": "success", "message": "Event processed", "dedup_key": event.dedup_key},
        status=status.HTTP_202_ACCEPTED,
    )
