"""Who may send events: API tokens, the sources they own and their quota windows (runs.domain.trust)."""

import hashlib
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models, transaction

from runs.domain import trust


class ApiToken(models.Model):
    """A bearer token for the REST API. Only its SHA-256 is kept; the token is shown once, at creation."""

    class Scope(models.TextChoices):
        EVENTS_WRITE = "events:write"
        READ = "read"
        INCIDENTS_WRITE = "incidents:write"
        METRICS_READ = "metrics:read"  # GET /metrics only: what a Prometheus server is given

    PREFIX = "fo_"

    name = models.CharField(max_length=200, unique=True)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(
        max_length=12, editable=False, help_text="The token's first characters, to tell tokens apart."
    )
    scopes = models.JSONField(default=list)
    # What the token may speak for (runs.domain.trust): a role, and optionally the clusters, the node (an agent's
    # own) and the CloudEvents sources it is bound to. Events outside them are refused with 403.
    role = models.CharField(
        max_length=20,
        choices=[(role, role) for role in trust.ROLES],
        default=trust.TRAINER,
        help_text="scheduler: runs and nodes of its clusters; agent: its own node and GPUs; trainer: its runs.",
    )
    clusters = models.JSONField(default=list, blank=True, help_text="Cluster names; empty: every cluster.")
    node = models.CharField(max_length=200, blank=True, help_text="A node agent's own node; empty: any node.")
    sources = models.JSONField(
        default=list, blank=True, help_text="CloudEvents sources, each with what lies under it; empty: any."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on; empty: never.")
    quota_bytes = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Bytes of requests it may send per quota window (runs/quotas.py); empty: "
        "EVENTS_QUOTA_BYTES_PER_WINDOW; 0: no limit.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def save(self, *args, **kwargs):
        """Kept with the sources it is bound to (TokenSource), which an unbound token may not send from."""
        with transaction.atomic():
            super().save(*args, **kwargs)
            if "sources" not in (kwargs.get("update_fields") or ["sources"]):
                return
            keys = {trust.source_key(source) for source in self.sources or []}
            owned = self.owned_sources.all()
            if set(owned.values_list("key", flat=True)) != keys:
                owned.delete()
                TokenSource.objects.bulk_create(TokenSource(token=self, key=key) for key in sorted(keys))

    @staticmethod
    def digest_of(token: str) -> str:
        # Tokens are 256 random bits: a fast hash is enough, no key stretching needed.
        return hashlib.sha256(token.encode()).hexdigest()

    def set_new_token(self) -> str:
        """Give this row a fresh token and return it; the caller shows it once and never stores it."""
        token = self.PREFIX + secrets.token_urlsafe(32)
        self.digest = self.digest_of(token)
        self.hint = token[:10]
        return token

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def clean(self):
        for name in ("clusters", "sources"):
            value = getattr(self, name) or []  # the admin's empty field
            setattr(self, name, value)
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ValidationError({name: 'must be a list of names, e.g. ["a", "b"]'})
        if any(len(source.encode()) > 1000 for source in self.sources):
            raise ValidationError({"sources": "each must be at most 1,000 bytes, as an event's source is"})
        if self.role == trust.AGENT and not self.node:
            raise ValidationError({"node": "a node agent's token is bound to its node: name it"})
        if self.node and self.role != trust.AGENT:
            raise ValidationError({"node": "only a node agent's token is bound to a node"})
        if self.quota_bytes and self.quota_bytes < settings.QUOTA_BYTES_MIN:
            # Below the largest body, that body would be refused in every window, Retry-After or not.
            raise ValidationError(
                {"quota_bytes": f"must be 0 (no limit) or at least {settings.QUOTA_BYTES_MIN:,}, the largest body"}
            )

    def bounds(self) -> trust.Bounds:
        return trust.Bounds(
            role=self.role, clusters=frozenset(self.clusters), node=self.node, sources=tuple(self.sources)
        )


class TokenSource(models.Model):
    """A CloudEvents source a token is bound to (ApiToken.sources), by runs.domain.trust.source_key, indexed: the
    intake finds in one lookup whether another token owns the source an unbound token sends from, since (source, id)
    is the dedupe key and ids are predictable (docs/EVENTS.md, "Token bounds")."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="owned_sources")
    key = models.CharField(max_length=1000, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token", "key"], name="token_source_unique")]

    def __str__(self):
        return f"{self.token}: {self.key}"


class TokenQuota(models.Model):
    """How many events, and how many bytes of requests, a token has sent in its current quota window
    (settings.EVENTS_QUOTA_*): one row a token, reset when a new window begins. Counted in the database, so every web
    process shares the count."""

    token = models.OneToOneField(ApiToken, on_delete=models.CASCADE, related_name="quota")
    window_start = models.DateTimeField()
    used = models.PositiveBigIntegerField(default=0)
    used_bytes = models.PositiveBigIntegerField(default=0)

    def __str__(self):
        return f"{self.token}: {self.used} events, {self.used_bytes} bytes since {self.window_start:%H:%M:%S}"
