"""Intake from other alerting systems: an Alertmanager webhook receiver and a PagerDuty Events API v2 endpoint."""

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    parser_classes,
    permission_classes,
)
from rest_framework.response import Response

from fleetops.jsonparse import PayloadTooLarge, StrictJSONParser
from incidents import services
from incidents.domain import intake as domain_intake
from incidents.intake import services as intake
from runs.api.auth import EventsWriteScope, token_authenticate
from runs.api.base import EventsOutOfBounds, InvalidEvents, over_quota, request_bytes
from runs.api.serializers import ErrorSerializer
from runs.domain.cloudevents import Problem
from runs.models import ApiToken
from runs.quotas import quota_return, quota_take


class IntakeJSONParser(StrictJSONParser):
    limit_setting = "INTAKE_MAX_BODY_BYTES"


class InvalidPayload(InvalidEvents):
    def __init__(self, problems):
        self.problems = problems
        exceptions.APIException.__init__(self, "The body is not an Alertmanager webhook payload (version 4).")


@extend_schema(
    request=dict,
    responses={
        200: dict,
        400: OpenApiResponse(ErrorSerializer, description="errors: [{index, field, reason}]"),
        429: OpenApiResponse(ErrorSerializer, description="the token's quota is spent: Retry-After"),
    },
    summary="Prometheus Alertmanager webhook receiver (payload version 4)",
    description=(
        "Point an Alertmanager webhook_config here with `http_config.authorization.credentials` set to a token "
        "with events:write. Firing alerts become FleetOps alerts (fingerprint am:<fingerprint>); resolved ones "
        "(or an endsAt in the past) resolve that alert only. An alert with a numeric `xid` label is an Xid "
        "occurrence (fingerprint am-xid:<node>:<gpu>:<xid>, graded from the Xid catalog): each firing episode "
        "(startsAt) counts once, and a resolved notice clears nothing. An `action` label naming a FleetOps action "
        "(reset_gpu, drain_rma, ...) is the action recommended."
    ),
)
@api_view(["POST"])
@permission_classes([EventsWriteScope])
@parser_classes([IntakeJSONParser])
def alertmanager_webhook(request):
    alerts, problems = domain_intake.alertmanager_parse(request.data, max_alerts=settings.INTAKE_MAX_ALERTS)
    if problems:
        raise InvalidPayload(problems)
    bounds = request.auth.bounds()
    subjects = [(finding.node, finding.run) for finding in (alert.finding() for alert in alerts)]
    outside = intake.out_of_bounds(bounds, subjects, [alert.fingerprint for alert in alerts])
    if outside:
        raise EventsOutOfBounds(
            [
                Problem(i, f"alerts[{i}].labels.{field}", f"{why} (this token: {bounds.describe()})")
                for i, field, why in outside
            ]
        )
    now, size = timezone.now(), request_bytes(request)
    refusal = quota_take(token=request.auth, count=len(alerts), size=size, now=now)
    if refusal is not None:
        return over_quota(refusal, what="webhook")  # Alertmanager retries a 429 with backoff
    try:
        with transaction.atomic():
            result = intake.alertmanager_apply(alerts)
    except BaseException:
        quota_return(token=request.auth, count=len(alerts), size=size, now=now)
        raise
    return Response({"firing": len(result.firing), "resolved": len(result.resolved)}, status=status.HTTP_200_OK)


class _AnyJson(IntakeJSONParser):
    media_type = "*/*"  # PagerDuty clients do not always send application/json


def _pd_error(code: int, message: str, errors: list[str], state: str = "invalid event") -> Response:
    return Response({"status": state, "message": message, "errors": errors}, status=code)


@extend_schema(
    request=dict,
    responses={202: dict, 400: dict, 401: dict, 403: dict, 429: dict},
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
    except PayloadTooLarge as error:
        return _pd_error(413, "Request too large", [str(error.detail)], "invalid request")
    event, errors = domain_intake.pagerduty_parse(body)
    if event is None:
        return _pd_error(400, "Event object is invalid", errors)
    token, refusal = token_authenticate(event.routing_key)
    if token is None:
        return _pd_error(401, "Invalid routing key", [f"routing_key: {refusal}"], "unauthorized")
    if not token.has_scope(ApiToken.Scope.EVENTS_WRITE):
        return _pd_error(403, "Forbidden", ["this token lacks the 'events:write' scope"], "forbidden")
    named = event.finding() if event.action == "trigger" else None
    outside = intake.out_of_bounds(token.bounds(), [(named.node, named.run) if named else None], [event.fingerprint])
    if outside:
        ((_, field, why),) = outside
        where = "payload.custom_details or payload.source" if named else f"dedup_key {event.dedup_key!r}"
        return _pd_error(403, "Forbidden", [f"{where} ({field}): {why}"], "forbidden")
    now, size = timezone.now(), request_bytes(request)
    refusal = quota_take(token=token, count=1, size=size, now=now)
    if refusal is not None:
        reason = f"{refusal.reason('this routing_key')}; retry later"
        response = _pd_error(429, "Too many events", [reason], "throttled")
        response["Retry-After"] = str(int(refusal.retry_after))
        return response
    try:
        with transaction.atomic():
            intake.pagerduty_apply(event, actor=services.Actor.of_token(token))
    except BaseException:
        quota_return(token=token, count=1, size=size, now=now)
        raise
    return Response(
        {"status": "success", "message": "Event processed", "dedup_key": event.dedup_key},
        status=status.HTTP_202_ACCEPTED,
    )
