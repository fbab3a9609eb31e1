"""Bearer-token authentication and scope permissions for the REST API."""

from datetime import UTC, timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from fleetops.roles import can_act
from runs.models import ApiToken

# ApiToken.last_used_at is kept to this: a node agent posts every 30 s, and at 16,384 nodes a write of its token's
# row each minute would be 273 commits a second.
LAST_USED_RESOLUTION = timedelta(minutes=5)


def token_authenticate(token: str) -> tuple[ApiToken | None, str]:
    """The live ApiToken row of a presented token, or None and why it is refused (unknown, revoked, expired).

    Every place that accepts a token (the bearer header, PagerDuty's routing_key) goes through here, so a revoked
    or expired token is refused everywhere. Only an accepted token's last_used_at is written.
    """
    row = ApiToken.objects.filter(digest=ApiToken.digest_of(token)).first()
    if row is None:
        return None, "Unknown API token."
    now = timezone.now()
    if row.revoked_at is not None:
        return None, f"API token revoked at {row.revoked_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC."
    if row.expires_at is not None and row.expires_at <= now:
        return None, f"API token expired at {row.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC."
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        # Not on every request: an agent posting several batches a second would write the same row each time.
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row, ""


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer fo_...`; request.auth becomes the ApiToken row."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        keyword, _, token = header.partition(" ")
        if keyword != self.keyword or not token.strip():
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        row, refusal = token_authenticate(token.strip())
        if row is None:
            raise exceptions.AuthenticationFailed(refusal)
        return (None, row)

    def authenticate_header(self, request):
        return self.keyword


class _Scope(permissions.BasePermission):
    scope = ""

    def has_permission(self, request, view):
        if isinstance(request.auth, ApiToken):
            if not request.auth.has_scope(self.scope):
                self.message = f"This token lacks the '{self.scope}' scope."
                return False
            return True
        # People signed in to the web console: everyone reads, on-call engineers act on incidents.
        user = request.user
        if user is not None and user.is_authenticated:
            if self.scope == ApiToken.Scope.INCIDENTS_WRITE:
                return can_act(user)
            return self.scope == ApiToken.Scope.READ
        raise exceptions.NotAuthenticated("An API token is required: 'Authorization: Bearer <token>'.")


class ReadScope(_Scope):
    scope = ApiToken.Scope.READ


class EventsWriteScope(_Scope):
    scope = ApiToken.Scope.EVENTS_WRITE


class IncidentsWriteScope(_Scope):
    scope = ApiToken.Scope.INCIDENTS_WRITE


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Tells the OpenAPI schema how BearerTokenAuthentication works."""

    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token from `manage.py create_api_token` or the admin; scopes events:write, read.",
        }
