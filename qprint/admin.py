"""The Django admin of qprint: devices, jobs, commands, application keys and events.

Every action goes through :mod:`qprint.api`, the same code path as the HTTP API and host code, so
the admin holds no business rule. Columns that carry state (job status, claim, revisions, the
connection record) are read-only here: they change only through the domain's guarded writes.
"Online", the queue depth and the claim gate are the domain's own predicates
(``Device.objects.with_liveness()``, ``with_queue_depth()``, :func:`qprint.domain.gate.refusal`).
Secrets (a new device token, a new application key) are shown once, on the response page itself,
and never stored in clear: not in the database, the session or a message cookie.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext, ngettext_lazy

from qprint import api
from qprint.conf import qprint_settings
from qprint.domain import gate, reconcile
from qprint.errors import QPrintError
from qprint.models import (
    ApplicationKey,
    Device,
    DeviceCommand,
    DevicePrinter,
    PrintJob,
    PrintJobEvent,
)

TEST_PAGE_CONTENT_TYPE = "text/plain"


def actor(request: HttpRequest) -> str:
    """Who did it, as recorded on jobs and events."""
    return f"admin:{request.user.get_username()}"


def show_secrets_once(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    secrets: list[tuple[object, str]],
    *,
    title: str,
    secret_label: str,
) -> TemplateResponse:
    """A page listing freshly made secrets. It is the only place they ever appear."""
    context = {
        **modeladmin.admin_site.each_context(request),
        "opts": modeladmin.model._meta,
        "title": title,
        "secret_label": secret_label,
        "secrets": secrets,
        "warning": _(
            "Copy each secret now: it is shown only on this page and cannot be retrieved later "
            "(only its hash is stored)."
        ),
    }
    response = TemplateResponse(request, "admin/qprint/secrets_once.html", context)
    response["Cache-Control"] = "no-store"
    return response


def report(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    done: int,
    failures: list[str],
    done_message: str,
) -> None:
    """One message for the rows done (``done_message``, an ``ngettext_lazy`` keyed on
    ``count``), one warning naming the rows refused and why."""
    if done:
        modeladmin.message_user(request, done_message % {"count": done})
    if failures:
        modeladmin.message_user(
            request,
            ngettext(
                "Refused for %(count)d row: %(list)s",
                "Refused for %(count)d rows: %(list)s",
                len(failures),
            )
            % {"count": len(failures), "list": "; ".join(failures)},
            messages.WARNING,
        )


def apply_to_all(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet,
    act: Callable[[Any], object],
    done_message: str,
) -> None:
    """Run ``act`` on every selected row (none may be refused) and say how many were done."""
    for row in queryset:
        act(row)
    count = len(queryset)
    modeladmin.message_user(request, done_message % {"count": count})


def apply_to_each(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    rows: Iterable[Any],
    act: Callable[[Any], object],
    name: Callable[[Any], str],
    done_message: str,
) -> None:
    """Run ``act`` on each row; one the API refuses is named (``name``) in the warning of
    :func:`report`, and the others go on."""
    done, failures = 0, []
    for row in rows:
        try:
            act(row)
            done += 1
        except QPrintError as exc:
            failures.append(f"{name(row)}: {exc.message}")
    report(modeladmin, request, done, failures, done_message)


def short_job_id(job: PrintJob) -> str:
    """The first eight characters of a job's id, as the job list shows it."""
    return str(job.id)[:8]


# --- Devices -----------------------------------------------------------------------------------


class DevicePrinterInline(admin.TabularInline):
    model = DevicePrinter
    extra = 0
    can_delete = False
    fields = ("name", "is_default", "status", "capabilities", "updated_at")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "tenant",
        "online",
        "node",
        "ready",
        "paused",
        "enabled",
        "queue_depth",
        "claim_gate",
        "last_seen_at",
    )
    list_filter = ("tenant", "enabled", "paused")
    search_fields = ("name", "tenant", "description")
    ordering = ("tenant", "name")
    inlines = (DevicePrinterInline,)
    actions = (
        "pause_devices",
        "resume_devices",
        "issue_new_tokens",
        "send_test_page",
        "disable_devices",
        "enable_devices",
    )
    add_fields = ("tenant", "name", "description")
    editable_fields = ("description",)
    state_fields = (
        "enabled",
        "paused",
        "control_revision",
        "control_applied_revision",
        "settings",
        "settings_revision",
        "settings_applied_revision",
        "connection_id",
        "connection_node",
        "connection_ready",
        "connection_lease_expires_at",
        "last_seen_at",
        "agent_info",
        "created_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).with_liveness().with_queue_depth()

    def get_fields(self, request, obj=None):
        if obj is None:
            return self.add_fields
        return ("tenant", "name", "description", *self.state_fields)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("tenant", "name", *self.state_fields)

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else ()

    @admin.display(boolean=True, description=_("online"), ordering="connection_live")
    def online(self, device: Device) -> bool:
        return bool(device.connection_live)

    @admin.display(description=_("node"), ordering="connection_node")
    def node(self, device: Device) -> str:
        return device.connection_node if device.connection_live else ""

    @admin.display(boolean=True, description=_("ready"))
    def ready(self, device: Device) -> bool:
        return bool(device.connection_live and device.connection_ready)

    @admin.display(description=_("queue depth"), ordering="queue_depth")
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
        device, token = api.create_device(obj.tenant, obj.name, description=obj.description)
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


# --- Jobs --------------------------------------------------------------------------------------


class ReadOnlyAdminMixin:
    """Rows written only by qprint itself: viewable, never added or edited by hand."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class PrintJobEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = PrintJobEvent
    extra = 0
    can_delete = False
    ordering = ("recorded_at", "id")
    fields = ("recorded_at", "source", "type", "message", "detail", "occurred_at", "event_id")
    readonly_fields = fields


class StuckJobFilter(admin.SimpleListFilter):
    """Jobs a device holds (RECEIVED/SPOOLED) since longer than ``QPRINT["STUCK_JOB_SECONDS"]``."""

    title = _("held by the device")
    parameter_name = "stuck"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        seconds = qprint_settings.STUCK_JOB_SECONDS
        return [("yes", _("longer than %(minutes)s min") % {"minutes": round(seconds / 60, 1)})]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return reconcile.stuck(queryset, qprint_settings.STUCK_JOB_SECONDS)
        return queryset


@admin.register(PrintJob)
class PrintJobAdmin(admin.ModelAdmin):
    list_display = (
        "short_id",
        "title",
        "device",
        "tenant",
        "status",
        "priority",
        "attempts",
        "created_at",
        "finished_at",
    )
    list_filter = (
        "status",
        StuckJobFilter,
        ("device", admin.RelatedOnlyFieldListFilter),
        "tenant",
    )
    list_select_related = ("device",)
    date_hierarchy = "created_at"
    search_fields = ("=id", "title", "idempotency_key", "device__name")
    ordering = ("-created_at",)
    inlines = (PrintJobEventInline,)
    actions = ("cancel_jobs", "reprint_jobs")
    fields = (
        "id",
        "tenant",
        "device",
        "printer",
        "title",
        "content_type",
        "size",
        "sha256",
        "options",
        "priority",
        "status",
        "status_reason",
        "cancel_requested",
        "idempotency_key",
        "claim_id",
        "claim_node",
        "attempts",
        "reprint_of",
        "submitted_by",
        "created_at",
        "claimed_at",
        "received_at",
        "finished_at",
        "expires_at",
    )
    readonly_fields = fields

    @admin.display(description=_("id"), ordering="id")
    def short_id(self, job: PrintJob) -> str:
        return short_job_id(job)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        # The list keeps "change" for its actions; a job itself is never edited by hand.
        return obj is None and super().has_change_permission(request)

    @admin.action(description=_("Cancel selected jobs"), permissions=["change"])
    def cancel_jobs(self, request, queryset):
        apply_to_each(
            self,
            request,
            queryset,
            lambda job: api.cancel_job(job, by=actor(request)),
            short_job_id,
            ngettext_lazy(
                "Cancelled %(count)d job (or asked its device to).",
                "Cancelled %(count)d jobs (or asked their devices to).",
                "count",
            ),
        )

    @admin.action(description=_("Reprint selected jobs"), permissions=["change"])
    def reprint_jobs(self, request, queryset):
        apply_to_each(
            self,
            request,
            queryset,
            lambda job: api.reprint_job(job, by=actor(request)),
            short_job_id,
            ngettext_lazy(
                "Queued a reprint of %(count)d job.",
                "Queued reprints of %(count)d jobs.",
                "count",
            ),
        )


# --- Commands, events, keys --------------------------------------------------------------------


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


@admin.register(PrintJobEvent)
class PrintJobEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("type", "source", "job", "device", "occurred_at", "recorded_at")
    list_filter = ("source", "type")
    list_select_related = ("job", "device")
    search_fields = ("=event_id", "=job__id")
    date_hierarchy = "recorded_at"
    readonly_fields = (
        "event_id",
        "job",
        "device",
        "source",
        "type",
        "message",
        "detail",
        "occurred_at",
        "recorded_at",
        "fingerprint",
    )
    fields = readonly_fields

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ApplicationKey)
class ApplicationKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "created_at", "last_used_at", "revoked")
    list_filter = ("tenant", "revoked")
    search_fields = ("name", "tenant")
    actions = ("revoke_keys",)
    # The hash is never shown: it would only help an attacker to test guesses offline.
    exclude = ("key_hash",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("tenant", "name")
        return ("tenant", "name", "created_at", "last_used_at", "revoked")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("tenant", "name", "created_at", "last_used_at", "revoked")

    def save_model(self, request, obj: ApplicationKey, form, change: bool) -> None:
        if change:
            return  # nothing of a key is edited by hand; revoke it with the action
        key, secret = api.create_application_key(obj.tenant, obj.name)
        obj.pk = key.pk
        obj.key_hash = key.key_hash
        request._qprint_new_secret = secret

    def response_add(self, request, obj, post_url_continue=None) -> HttpResponse:
        secret = getattr(request, "_qprint_new_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        return show_secrets_once(
            self, request, [(obj, secret)], title=_("Application key"), secret_label=_("key")
        )

    @admin.action(description=_("Revoke selected keys"), permissions=["change"])
    def revoke_keys(self, request, queryset):
        apply_to_each(
            self,
            request,
            queryset.filter(revoked=False),
            lambda key: api.revoke_application_key(key.tenant, key.name),
            str,
            ngettext_lazy("Revoked %(count)d key.", "Revoked %(count)d keys.", "count"),
        )


from qprint import admin_webhooks  # noqa: E402,F401  (registers the webhook admins)
