from django.contrib import admin

from incidents.models import Delivery, WebhookEndpoint


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
