from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from incidents import services
from incidents.models import (
    ActionItem,
    Alert,
    Delivery,
    Incident,
    PlaybookExecution,
    Postmortem,
    PostmortemVersion,
    RunDiscard,
    StepExecution,
    TimelineEntry,
    WebhookEndpoint,
)
from runs import admin as runs_admin
from runs.models import Run


class ReadOnly:
    """Viewable in the admin, never written there: no add, change or delete (nor the delete action)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _changelist_link(model, text: str, **filters) -> str:
    """A link to `model`'s admin list narrowed by `filters` (`incident__id__exact=42`)."""
    url = reverse(f"admin:incidents_{model._meta.model_name}_changelist")
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return format_html('<a href="{}?{}">{}</a>', url, query, text)


@admin.register(Incident)
class IncidentAdmin(ReadOnly, admin.ModelAdmin):
    """Read-only: every change of an incident (acknowledge, assign, severity, mitigate, resolve, close, discard) goes
    through incidents.services, which writes its TimelineEntry, the audit log. An edit here would change the incident
    with no entry saying who or why, and skip its notifications: act on the incident's page or the API instead.

    Discarded incidents (a test run's, incidents.services.run_discard) are listed too, filtered by `discarded_at`:
    the admin is where the audit is read."""

    list_display = ["id", "title", "severity", "status", "run", "commander", "started_at", "detected_at", "resolved_at"]
    list_display_links = ["id", "title"]
    list_filter = ["status", "severity", ("discarded_at", admin.EmptyFieldListFilter)]
    search_fields = ["title", "group_key", "run__name"]
    list_select_related = ["run", "commander"]
    readonly_fields = ["records"]

    def get_queryset(self, request):
        return Incident.every.all()

    @admin.display(description="Its record")
    def records(self, incident):
        links = [
            _changelist_link(model, text, incident__id__exact=incident.pk)
            for model, text in (
                (TimelineEntry, "timeline"),
                (Alert, "alerts"),
                (PlaybookExecution, "playbook executions"),
                (ActionItem, "action items"),
                (Delivery, "deliveries"),
            )
        ]
        page = format_html('<a href="{}">incident page</a>', incident.get_absolute_url())
        return format_html("{} · {}", page, format_html(" · ".join(["{}"] * len(links)), *links))


@admin.register(TimelineEntry)
class TimelineEntryAdmin(ReadOnly, admin.ModelAdmin):
    """The audit log: append-only (TimelineEntry.save and delete refuse, a trigger on PostgreSQL too)."""

    list_display = ["at", "incident", "kind", "actor_name", "text"]
    list_filter = ["kind"]
    search_fields = ["text", "actor_name", "incident__title"]
    list_select_related = ["incident"]
    date_hierarchy = "at"


@admin.register(Alert)
class AlertAdmin(ReadOnly, admin.ModelAdmin):
    """Written by detection and intake, folded and resolved by them: read here, never edited."""

    list_display = ["last_seen_at", "kind", "severity", "status", "summary", "count", "node", "gpu", "run", "incident"]
    list_filter = ["status", "severity", "kind"]
    search_fields = ["fingerprint", "summary", "node__hostname", "run__name"]
    list_select_related = ["incident", "node", "gpu__node", "run"]


class StepExecutionInline(ReadOnly, admin.TabularInline):
    model = StepExecution
    extra = 0
    fields = ["index", "name", "status", "attempts", "approver_role", "approved_by", "started_at", "finished_at"]
    fields += ["output", "error"]


@admin.register(PlaybookExecution)
class PlaybookExecutionAdmin(ReadOnly, admin.ModelAdmin):
    """The audit trail of automated remediation, written by the playbook engine only (started, approved, aborted on
    the incident page): an edit here would rewrite what was done to a node."""

    list_display = ["id", "playbook", "status", "dry_run", "incident", "run", "node", "started_by", "started_at"]
    list_display += ["finished_at"]
    list_filter = ["status", "playbook", "dry_run"]
    search_fields = ["playbook", "started_by", "node__hostname", "run__name", "error"]
    list_select_related = ["incident", "run", "node"]
    inlines = [StepExecutionInline]


@admin.register(StepExecution)
class StepExecutionAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["execution", "index", "name", "status", "attempts", "approved_by", "started_at", "finished_at"]
    list_filter = ["status", "name"]
    search_fields = ["name", "error", "approved_by"]
    list_select_related = ["execution"]


class PostmortemVersionInline(ReadOnly, admin.TabularInline):
    model = PostmortemVersion
    extra = 0
    fields = ["number", "author_name", "note", "created_at", "markdown"]


@admin.register(Postmortem)
class PostmortemAdmin(ReadOnly, admin.ModelAdmin):
    """Read-only: each save is a new PostmortemVersion (append-only) and a timeline entry, written by
    incidents.postmortems.services from the postmortem page; an edit here would leave the text without its version."""

    list_display = ["incident", "drafted_at", "updated_at", "reviewed_at", "reviewed_by_name"]
    list_filter = [("reviewed_at", admin.EmptyFieldListFilter)]
    search_fields = ["incident__title", "markdown"]
    list_select_related = ["incident"]
    exclude = ["reviewed_by"]  # reviewed_by_name says who, and stays when the account goes
    inlines = [PostmortemVersionInline]


@admin.register(ActionItem)
class ActionItemAdmin(ReadOnly, admin.ModelAdmin):
    """Added and completed on the postmortem page, each with its timeline entry: read here."""

    list_display = ["text", "incident", "owner", "due_on", "created_by_name", "created_at", "done_at"]
    list_filter = [("done_at", admin.EmptyFieldListFilter), "due_on"]
    search_fields = ["text", "owner__username", "incident__title"]
    list_select_related = ["incident", "owner"]


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["name", "format", "url", "enabled"]
    list_filter = ["format", "enabled"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly, admin.ModelAdmin):
    """Created with their timeline entry, sent and retried by the notification task: read here (an admin retries a
    failed one from the console's delivery log, /incidents/deliveries)."""

    list_display = ["created_at", "event", "incident", "endpoint", "status", "attempts", "last_status_code"]
    list_filter = ["status", "event", "endpoint"]
    search_fields = ["incident__title", "last_error"]
    list_select_related = ["incident", "endpoint"]


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
