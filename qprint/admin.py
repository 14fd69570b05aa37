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
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import DurationField, ExpressionWrapper, F, QuerySet
from django.db.models.functions import Now
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import content_disposition_header
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext, ngettext_lazy

from qprint import api, documents, serializers
from qprint.conf import qprint_settings
from qprint.domain import gate, overview, reconcile
from qprint.domain import jobs as job_rules
from qprint.domain.states import JobStatus
from qprint.errors import NotFound, QPrintError
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


def revision_words(applied: int, current: int) -> str:
    """An applied revision against the current one, in plain words."""
    if applied == current:
        return _("up to date")
    return _("waiting for the device (it applied %(applied)d, current is %(current)d)") % {
        "applied": applied,
        "current": current,
    }


def milliseconds(delta) -> int | None:
    return None if delta is None else round(delta.total_seconds() * 1000)


def post_only(request: HttpRequest) -> HttpResponse | None:
    """The console's buttons post; anything else is 405 (a link or a prefetch changes nothing)."""
    return None if request.method == "POST" else HttpResponseNotAllowed(["POST"])


def refused_on_page(modeladmin, request, object_id, error: QPrintError) -> HttpResponse:
    """The object's page again, with the refusal as a message and its HTTP status (e.g. 409
    ``already_reprinted``): nothing was changed, so there is nothing to redirect to."""
    modeladmin.message_user(request, f"{error.message} ({error.code})", messages.ERROR)
    request.method = "GET"
    response = modeladmin.change_view(request, object_id)
    response.status_code = error.status
    return response


# --- Devices -----------------------------------------------------------------------------------


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
    change_form_template = "admin/qprint/device/change_form.html"
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
        "connection_since",
        "last_seen_at",
        "agent_info",
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
    )
    #: How many queued and recent jobs a device's page lists.
    console_rows = 10

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        lease_left = ExpressionWrapper(
            F("connection_lease_expires_at") - Now(), output_field=DurationField()
        )
        seen_ago = ExpressionWrapper(Now() - F("last_seen_at"), output_field=DurationField())
        return (
            super()
            .get_queryset(request)
            .with_liveness()
            .with_queue_depth()
            .annotate(lease_left=lease_left, seen_ago=seen_ago)
        )

    def get_fields(self, request, obj=None):
        if obj is None:
            return self.add_fields
        return ("tenant", "name", "description", *self.state_fields)

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
        """What the device's page shows above its fields (read on each render)."""
        refusal = gate.refusal(device)
        live = bool(device.connection_live)
        jobs = PrintJob.objects.filter(device=device)
        may_change = self.has_change_permission(request, device)
        return {
            "live": live,
            "node": device.connection_node if live else "",
            "ready": live and device.connection_ready,
            "since": device.connection_since if live else None,
            "lease_left_seconds": (
                max(0, round(device.lease_left.total_seconds()))
                if live and device.lease_left is not None
                else None
            ),
            "last_seen_at": device.last_seen_at,
            "seen_seconds_ago": (
                max(0, round(device.seen_ago.total_seconds()))
                if device.seen_ago is not None
                else None
            ),
            "control": revision_words(device.control_applied_revision, device.control_revision),
            "settings": revision_words(device.settings_applied_revision, device.settings_revision),
            "control_up_to_date": device.control_applied_revision == device.control_revision,
            "gate_open": refusal is None,
            "gate_code": refusal.code if refusal else "open",
            "gate_message": refusal.message if refusal else _("The device may claim now."),
            "claimed": jobs.filter(status=JobStatus.CLAIMED).first(),
            "queue": list(jobs.claimable()[: self.console_rows]),
            "queue_depth": device.queue_depth,
            "printers": [
                {
                    "printer": printer,
                    "reasons": [
                        str(r) for r in (printer.capabilities or {}).get("state_reasons", [])
                    ],
                    "message": (printer.capabilities or {}).get("state_message", ""),
                }
                for printer in DevicePrinter.objects.filter(device=device).order_by("name")
            ],
            "recent": list(jobs.order_by("-created_at")[: self.console_rows]),
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
    actions = ("cancel_jobs", "reprint_jobs")
    change_form_template = "admin/qprint/printjob/change_form.html"
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

    # --- a job's page: timeline, document, cancel and reprint -----------------------------------

    def get_urls(self):
        def view(name: str, func):
            return path(
                f"<path:object_id>/{name}/",
                self.admin_site.admin_view(func),
                name=f"qprint_printjob_{name}",
            )

        overview_url = path(
            "overview/",
            self.admin_site.admin_view(self.overview_view),
            name="qprint_printjob_overview",
        )
        return [
            overview_url,
            view("document", self.document_view),
            view("cancel", self.cancel_view),
            view("reprint", self.reprint_view),
            *super().get_urls(),
        ]

    def may_act(self, request: HttpRequest) -> bool:
        """``qprint.change_printjob``: the permission of the list's actions and the buttons."""
        return super().has_change_permission(request)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if job is not None:
            context["console"] = self.console(request, job)
        return super().change_view(request, object_id, form_url, context)

    def console(self, request: HttpRequest, job: PrintJob) -> dict[str, Any]:
        """The timeline (each event, its node and the milliseconds since the previous one), the
        claim, the document link and the buttons that apply now."""
        timeline, previous = [], None
        for event in job_rules.events_of(job):
            detail = event.detail if isinstance(event.detail, dict) else {}
            node = detail.get("node") or (job.claim_node if event.type == "CLAIMED" else "")
            timeline.append(
                {
                    "event": event,
                    "node": node,
                    "by": detail.get("by") or detail.get("submitted_by") or "",
                    "since_previous_ms": milliseconds(
                        event.recorded_at - previous if previous else None
                    ),
                }
            )
            previous = event.recorded_at
        may_act = self.may_act(request)
        reprints = list(job_rules.reprints_of(job).only("id", "status", "created_at"))
        return {
            "timeline": timeline,
            "total_ms": milliseconds(previous - timeline[0]["event"].recorded_at)
            if timeline
            else None,
            "reprints": reprints,
            "may_download": request.user.has_perm("qprint.view_printjob"),
            "may_cancel": may_act and job_rules.may_cancel(job),
            "may_reprint": may_act,
            "may_force_reprint": may_act and bool(reprints),
        }

    def document_view(self, request, object_id):
        """The job's document as an attachment, never cached (``qprint.view_printjob``)."""
        if not request.user.has_perm("qprint.view_printjob"):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404("No such job.")
        try:
            content = documents.open_document(job)
        except NotFound as exc:
            raise Http404(exc.message) from None
        response = HttpResponse(content, content_type=job.content_type)
        response["Content-Disposition"] = content_disposition_header(
            True, f"qprint-{job.pk}{self.document_suffix(job)}"
        )
        response["Cache-Control"] = "no-store"
        response["X-Content-Type-Options"] = "nosniff"
        return response

    @staticmethod
    def document_suffix(job: PrintJob) -> str:
        base = job.content_type.split(";", 1)[0].strip().lower()
        return {"application/pdf": ".pdf", "text/plain": ".txt", "image/png": ".png"}.get(
            base, ".bin"
        )

    def job_action(self, request, object_id, act: Callable[[PrintJob], str]) -> HttpResponse:
        """Run ``act`` (a call of the API) from one of the page's buttons; back to the page with
        its message, or the page again with the API's refusal and status."""
        if (refused := post_only(request)) is not None:
            return refused
        if not self.may_act(request):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404("No such job.")
        try:
            done = act(job)
        except QPrintError as exc:
            return refused_on_page(self, request, object_id, exc)
        self.message_user(request, done, messages.SUCCESS)
        return redirect(reverse("admin:qprint_printjob_change", args=[job.pk]))

    def cancel_view(self, request, object_id):
        def cancel(job: PrintJob) -> str:
            after = api.cancel_job(job, by=actor(request))
            if after.status == JobStatus.CANCELLED:
                return _("The job is cancelled.")
            return _("Cancel asked of the device; it reports the outcome.")

        return self.job_action(request, object_id, cancel)

    def reprint_view(self, request, object_id):
        force = request.POST.get("force") == "1"

        def reprint(job: PrintJob) -> str:
            new = api.reprint_job(job, force=force, by=actor(request))
            url = reverse("admin:qprint_printjob_change", args=[new.pk])
            return format_html('Queued a reprint: <a href="{}">{}</a>.', url, short_job_id(new))

        return self.job_action(request, object_id, reprint)

    # --- the print overview's data -------------------------------------------------------------

    def overview_view(self, request: HttpRequest) -> JsonResponse:
        """The print overview as JSON for its refresh (``qprint.view_printjob``)."""
        if not request.user.has_perm("qprint.view_printjob"):
            return JsonResponse(
                {"error": "permission_denied", "message": "You may not view print jobs."},
                status=403,
            )
        data = serializers.print_overview_object(overview.print_overview())
        data["refresh_seconds"] = qprint_settings.OVERVIEW_REFRESH_SECONDS
        response = JsonResponse(data)
        response["Cache-Control"] = "no-store"
        return response

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


from qprint import admin_enrolment, admin_webhooks  # noqa: E402,F401  (registers their admins)
