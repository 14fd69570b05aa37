"""The admin of devices: the device list and its actions, and the device console page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from qprint import api
from qprint.admin.common import (
    TEST_PAGE_CONTENT_TYPE,
    SecretColumnsMixin,
    actor,
    apply_to_all,
    apply_to_each,
    post_only,
    show_secrets_once,
    time_column,
)
from qprint.core import gate
from qprint.domain import console
from qprint.models import (
    Device,
)


class OnlineFilter(admin.SimpleListFilter):
    """Devices with a live connection (its lease running on the database clock), or without."""

    title = _("connection")
    parameter_name = "online"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", _("online")), ("no", _("offline"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in ("yes", "no"):
            return queryset.filter(connection_live=self.value() == "yes")
        return queryset


@admin.register(Device)
class DeviceAdmin(SecretColumnsMixin, admin.ModelAdmin):
    secret_columns = ("token_hash",)

    class Media:
        css = {"all": ("qprint/admin_lists.css",)}

    #: Narrow enough for an operator's 1400 px with the side bar and the filters: the tenant is
    #: in the device's name, the node in "online", readiness in the claim gate (``not_ready``).
    list_display = (
        "device",
        "kind",
        "online",
        "printer_state",
        "pause",
        "enabled",
        "queue_depth",
        "claim_gate",
        "last_seen",
    )
    list_filter = (OnlineFilter, "tenant", "kind", "enabled", "paused")
    search_fields = ("name", "tenant", "description")
    ordering = ("tenant", "name")
    change_form_template = "admin/qprint/device/change_form.html"
    actions = (
        "pause_devices",
        "resume_devices",
        "issue_new_tokens",
        "send_test_page",
        "disable_devices",
        "enable_devices",
        "forget_printers",
    )
    add_fields = ("tenant", "name", "kind", "description")
    editable_fields = ("description",)
    #: The stored values the page's console does not already show (connection, node, lease,
    #: last seen, pause, enabled are there, in words), under one collapsed heading.
    state_fields = (
        "kind",
        "printer_mac",
        "settings",
        "agent_info",
        "control_revision",
        "control_applied_revision",
        "settings_revision",
        "settings_applied_revision",
        "connection_id",
        "created_at",
    )

    #: The buttons of a device's page: (action method, label, shown when, confirmation asked).
    console_actions = (
        ("pause_devices", _("Pause"), lambda d: not d.paused, ""),
        ("resume_devices", _("Resume"), lambda d: d.paused, ""),
        ("send_test_page", _("Send a test page"), lambda d: True, ""),
        (
            "issue_new_tokens",
            _("Issue a new token"),
            lambda d: True,
            _("The device's current token stops working at once. Issue a new one?"),
        ),
        (
            "disable_devices",
            _("Disable"),
            lambda d: d.enabled,
            _("The device is disconnected and may not claim until enabled. Disable it?"),
        ),
        ("enable_devices", _("Enable"), lambda d: not d.enabled, ""),
        (
            "forget_printers",
            _("Forget the printer"),
            lambda d: bool(d.printer_mac),
            _("The next printer to poll with this device's token is bound to it. Forget it?"),
        ),
    )
    #: How many queued and recent jobs a device's page lists.
    console_rows = 10

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return console.devices(super().get_queryset(request))

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return ((None, {"fields": self.add_fields}),)
        return (
            (None, {"fields": ("tenant", "name", "description")}),
            (_("Stored values"), {"classes": ("collapse",), "fields": self.state_fields}),
        )

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # "Save and add another" would leave a new device's page before its token is shown
        # (and on a device's page there is nothing to add another of).
        context["show_save_and_add_another"] = False
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("tenant", "name", *self.state_fields)

    # --- a device's page: the console ----------------------------------------------------------

    def get_urls(self):
        act = path(
            "<path:object_id>/act/<str:action>/",
            self.admin_site.admin_view(self.console_action_view),
            name="qprint_device_act",
        )
        return [act, *super().get_urls()]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        device = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if device is not None:
            context["console"] = self.console(request, device)
        return super().change_view(request, object_id, form_url, context)

    def console(self, request: HttpRequest, device: Device) -> dict[str, Any]:
        """What the device's page shows above its fields (read on each render): the domain's
        read model and the buttons this user may press."""
        may_change = self.has_change_permission(request, device)
        return {
            **console.device_console(device, rows=self.console_rows),
            "actions": [
                (name, label, confirm)
                for name, label, shown, confirm in self.console_actions
                if may_change and shown(device)
            ],
        }

    def console_action_view(self, request, object_id, action):
        """One of the page's buttons: the list action of that name, on this device alone."""
        if (refused := post_only(request)) is not None:
            return refused
        if action not in {row[0] for row in self.console_actions}:
            raise Http404("No such action.")
        device = self.get_object(request, unquote(object_id))
        if device is None:
            raise Http404("No such device.")
        if not self.has_change_permission(request, device):
            raise PermissionDenied
        response = getattr(self, action)(request, self.get_queryset(request).filter(pk=device.pk))
        return response or redirect(reverse("admin:qprint_device_change", args=[device.pk]))

    @admin.display(description=_("device"), ordering="tenant")
    def device(self, device: Device) -> str:
        return f"{device.tenant}/{device.name}"

    @admin.display(description=_("online"), ordering="connection_live")
    def online(self, device: Device) -> str:
        """Online on which node (the lease judged on the database clock), or offline."""
        if device.connection_live:
            return format_html('<b class="online">{}</b>', device.connection_node or _("yes"))
        return format_html('<span class="offline">{}</span>', _("offline"))

    @admin.display(description=_("paused"), ordering="paused")
    def pause(self, device: Device) -> str:
        """Paused in words: "no" is the normal case, not an error icon."""
        return _("paused") if device.paused else _("no")

    last_seen = time_column("last_seen_at", _("last seen"))

    @admin.display(description=_("printer"))
    def printer_state(self, device: Device) -> str:
        """The state the device's (default) printer last reported (a CloudPRNT printer's poll)."""
        return getattr(device, "printer_status", None) or ""

    @admin.display(description=_("queue"), ordering="queue_depth")
    def queue_depth(self, device: Device) -> int:
        return device.queue_depth

    @admin.display(description=_("claim gate"))
    def claim_gate(self, device: Device) -> str:
        """What a claim would answer now: "open", or the refusal's code."""
        refusal = gate.refusal(device)
        return _("open") if refusal is None else refusal.code

    def save_model(self, request, obj: Device, form, change: bool) -> None:
        if change:
            # Only the editable columns: a full save would write back the state columns as the
            # form read them, over what the connection record or the API changed meanwhile.
            changed = [name for name in form.changed_data if name in self.editable_fields]
            if changed:
                obj.save(update_fields=changed)
            return
        device, token = api.create_device(
            obj.tenant, obj.name, description=obj.description, kind=obj.kind
        )
        obj.pk = device.pk
        obj.token_hash = device.token_hash
        request._qprint_new_secret = token

    def response_add(self, request, obj, post_url_continue=None) -> HttpResponse:
        token = getattr(request, "_qprint_new_secret", None)
        if token is None:
            return super().response_add(request, obj, post_url_continue)
        return show_secrets_once(
            self, request, [(obj, token)], title=_("Device token"), secret_label=_("token")
        )

    @admin.action(description=_("Pause selected devices"), permissions=["change"])
    def pause_devices(self, request, queryset):
        apply_to_all(
            self,
            request,
            queryset,
            api.pause_device,
            ngettext_lazy("Paused %(count)d device.", "Paused %(count)d devices.", "count"),
        )

    @admin.action(description=_("Resume selected devices"), permissions=["change"])
    def resume_devices(self, request, queryset):
        apply_to_all(
            self,
            request,
            queryset,
            api.resume_device,
            ngettext_lazy("Resumed %(count)d device.", "Resumed %(count)d devices.", "count"),
        )

    @admin.action(
        description=_("Issue a new token (the old one stops working)"), permissions=["change"]
    )
    def issue_new_tokens(self, request, queryset):
        secrets = [(device, api.rotate_device_token(device)) for device in queryset]
        return show_secrets_once(
            self, request, secrets, title=_("New device tokens"), secret_label=_("token")
        )

    @admin.action(
        description=_("Forget the printer (a CloudPRNT device binds the next one)"),
        permissions=["change"],
    )
    def forget_printers(self, request, queryset):
        apply_to_all(
            self,
            request,
            queryset.exclude(printer_mac=""),
            api.forget_printer,
            ngettext_lazy(
                "Forgot the printer of %(count)d device.",
                "Forgot the printers of %(count)d devices.",
                "count",
            ),
        )

    @admin.action(description=_("Send a test page"), permissions=["change"])
    def send_test_page(self, request, queryset):

        def send(device: Device) -> None:
            content = (
                f"qprint test page\n\nDevice: {device.tenant}/{device.name}\n"
                f"Sent by: {request.user.get_username()}\nAt: {timezone.now().isoformat()}\n"
            ).encode()
            api.submit_job(
                device.tenant,
                device,
                content,
                TEST_PAGE_CONTENT_TYPE,
                title="Test page",
                submitted_by=actor(request),
            )

        apply_to_each(
            self,
            request,
            queryset,
            send,
            str,
            ngettext_lazy(
                "Queued a test page for %(count)d device.",
                "Queued a test page for %(count)d devices.",
                "count",
            ),
        )

    @admin.action(description=_("Disable selected devices"), permissions=["change"])
    def disable_devices(self, request, queryset):
        apply_to_all(
            self,
            request,
            queryset,
            api.disable_device,
            ngettext_lazy("Disabled %(count)d device.", "Disabled %(count)d devices.", "count"),
        )

    @admin.action(description=_("Enable selected devices"), permissions=["change"])
    def enable_devices(self, request, queryset):
        apply_to_all(
            self,
            request,
            queryset,
            api.enable_device,
            ngettext_lazy("Enabled %(count)d device.", "Enabled %(count)d devices.", "count"),
        )
