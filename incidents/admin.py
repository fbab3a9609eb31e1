from django.contrib import admin, messages

from incidents import services
from incidents.models import Delivery, RunDiscard, WebhookEndpoint
from runs import admin as runs_admin
from runs.models import Run


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["name", "format", "url", "enabled"]
    list_filter = ["format", "enabled"]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "event", "incident", "endpoint", "status", "attempts", "last_status_code"]
    list_filter = ["status", "event", "endpoint"]
    readonly_fields = [f.name for f in Delivery._meta.fields]

    def has_add_permission(self, request):
        return False  # deliveries come from incident events only


# Runs' admin with the discard action: it lives here, above runs, as the action reaches the run's incidents.
admin.site.unregister(Run)


@admin.register(Run)
class RunAdmin(runs_admin.RunAdmin):
    actions = ["discard"]

    @admin.action(description="Discard the selected test runs and what they made (on the audit log)")
    def discard(self, request, queryset):
        actor = services.Actor.of_user(request.user)
        for run in queryset:
            discard = services.run_discard(run=run, actor=actor, reason=f"discarded in the admin by {actor.name}")
            removed = ", ".join(f"{n:,} {what}" for what, n in discard.removed.items())
            self.message_user(request, f"Discarded {discard.run_name}: {removed}.", messages.SUCCESS)


@admin.register(RunDiscard)
class RunDiscardAdmin(admin.ModelAdmin):
    list_display = ["at", "run_name", "actor_name", "reason"]
    readonly_fields = [f.name for f in RunDiscard._meta.fields]

    def has_add_permission(self, request):
        return False  # written by run_discard only

    def has_delete_permission(self, request, obj=None):
        return False  # the audit log
