from datetime import timedelta

from django.contrib import admin, messages
from django.utils import timezone

from runs.management.commands import create_api_token
from runs.models import GPU, ApiToken, Attempt, Checkpoint, Cluster, Event, Interruption, Node, Run
from runs.services import quarantined_replay


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "scheduler", "api_url", "max_out_share"]


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ["index", "uuid", "serial", "xid_count", "last_xid", "ecc_uncorrected", "recovery_action"]
    readonly_fields = ["xid_count", "last_xid", "ecc_uncorrected", "recovery_action"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "cluster", "state", "state_reason", "last_heartbeat_at", "rack", "switch"]
    list_filter = ["state", "cluster"]
    search_fields = ["hostname", "rack", "switch"]
    inlines = [GPUInline]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "state", "gpu_count", "last_step", "last_step_at", "started_at"]
    list_filter = ["state", "cluster"]
    search_fields = ["name"]


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    list_display = ["run", "number", "job_id", "started_at", "ended_at", "end_reason"]
    list_filter = ["end_reason"]
    raw_id_fields = ["run"]
    # Derived from the attempt's run.started event, and kept while that event stays the attempt's start
    # (runs.services._sync_attempts): an edit here would outlive every later rebuild of the run.
    readonly_fields = ["nodes"]


@admin.register(Interruption)
class InterruptionAdmin(admin.ModelAdmin):
    list_display = ["run", "number", "fault_at", "cause", "planned", "node", "xid"]
    list_filter = ["cause", "planned"]
    raw_id_fields = ["run", "attempt", "node", "gpu"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "status", "tier", "blocking_s", "bytes", "durable_at"]
    list_filter = ["status", "tier"]
    raw_id_fields = ["run"]


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    """The event log is append-only: readable here, never edited."""

    list_display = ["time", "type", "source", "event_id", "run_name", "node_name", "applied_at", "quarantined_at"]
    list_filter = ["type", ("quarantined_at", admin.EmptyFieldListFilter)]
    search_fields = ["event_id", "run_name", "node_name", "error"]
    actions = ["replay"]

    @admin.action(description="Replay the selected quarantined events (after a fix)")
    def replay(self, request, queryset):
        applied = quarantined_replay(event_ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{applied} applied; the others are still quarantined (see their error).")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "hint", "scopes", "role", "clusters", "node", "created_at", "last_used_at", "expires_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), ("expires_at", admin.EmptyFieldListFilter)]
    readonly_fields = ["hint", "created_at", "last_used_at", "revoked_at"]
    fields = ["name", "scopes", "role", "clusters", "node", "sources", "hint", "created_at", "last_used_at"]
    fields += ["expires_at", "revoked_at", "quota_bytes"]
    actions = ["revoke"]

    def get_changeform_initial_data(self, request):
        # The same default lifetime as `manage.py create_api_token`; clearing the field is the explicit "never".
        days = create_api_token.DEFAULT_EXPIRES_IN_DAYS
        return {**super().get_changeform_initial_data(request), "expires_at": timezone.now() + timedelta(days=days)}

    def save_model(self, request, obj, form, change):
        if not change:
            token = obj.set_new_token()
            messages.warning(request, f"API token for {obj.name} (shown once, copy it now): {token}")
        super().save_model(request, obj, form, change)

    def has_delete_permission(self, request, obj=None):
        # Revoked, never deleted: the event log names the token of every event it sent (who said what), and deleting
        # one would make PostgreSQL look for its events through the whole log (token_id has no index, on purpose).
        return False

    @admin.action(description="Revoke the selected tokens (refused from now on)")
    def revoke(self, request, queryset):
        # Only tokens still live: an earlier revocation keeps its time.
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"{count} token{'s' if count != 1 else ''} revoked.", messages.SUCCESS)
