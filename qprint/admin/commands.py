"""The admin of device commands: read-only, written by qprint only."""

from __future__ import annotations

from django.contrib import admin

from qprint.admin.common import ReadOnlyAdminMixin
from qprint.models import DeviceCommand


@admin.register(DeviceCommand)
class DeviceCommandAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("type", "device", "status", "created_at", "delivered_at", "finished_at")
    list_filter = ("status", "type")
    list_select_related = ("device",)
    search_fields = ("=id", "type", "device__name")
    date_hierarchy = "created_at"
    readonly_fields = (
        "id",
        "device",
        "type",
        "payload",
        "status",
        "created_at",
        "delivered_at",
        "finished_at",
        "result",
    )
    fields = readonly_fields
