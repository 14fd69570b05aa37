"""The admin of webhook endpoints and their deliveries (imported by ``qprint.admin``).

Endpoints are made through the API or ``manage.py qprint_webhook`` (the secret is shown once
there); the admin lists and deletes them and never shows a secret. Deliveries are read-only,
with their attempts and the receiver's last answer; the retry action calls the outbox
(``qprint.webhooks.outbox.retry``), the one writer of their delivery columns.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from qprint.admin.common import SecretColumnsMixin
from qprint.models import WebhookDelivery, WebhookEndpoint
from qprint.webhooks import endpoints, outbox


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(SecretColumnsMixin, admin.ModelAdmin):
    secret_columns = ("secret", "previous_secret")
    list_display = ("url", "tenant", "description", "events", "created_at")
    list_filter = ("tenant",)
    search_fields = ("url", "description", "tenant")
    fields = ("tenant", "url", "events", "description", "created_at", "previous_secret_expires_at")
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def delete_model(self, request, obj: WebhookEndpoint) -> None:
        endpoints.delete_endpoint(obj)

    def delete_queryset(self, request, queryset) -> None:
        for endpoint in queryset:
            endpoints.delete_endpoint(endpoint)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "type",
        "endpoint",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "type")
    search_fields = ("event_id", "endpoint__url")
    list_select_related = ("endpoint",)
    readonly_fields = (
        "endpoint",
        "event_id",
        "type",
        "status",
        "attempts",
        "next_attempt_at",
        "last_attempt_at",
        "last_status_code",
        "last_response",
        "last_error",
        "created_at",
        "delivered_at",
        "payload",
    )
    fields = readonly_fields
    actions = ["retry_deliveries"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_retry_permission(self, request) -> bool:
        """Sending again changes the rows (through the outbox): the model's change permission."""
        return request.user.has_perm("qprint.change_webhookdelivery")

    @admin.action(description=_("Send selected deliveries again now"), permissions=["retry"])
    def retry_deliveries(self, request, queryset):
        count = outbox.retry(list(queryset.values_list("pk", flat=True)))
        self.message_user(
            request,
            ngettext_lazy(
                "%(count)d delivery will be sent again.",
                "%(count)d deliveries will be sent again.",
                "count",
            )
            % {"count": count},
        )
