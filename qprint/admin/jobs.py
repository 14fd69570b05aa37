"""The admin of print jobs (list, console, document, preview, cancel, reprint, the overview JSON)
and of their events (read-only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import content_disposition_header
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from qprint import api
from qprint.admin.common import (
    ReadOnlyAdminMixin,
    actor,
    apply_to_each,
    post_only,
    refused_on_page,
    short_job_id,
)
from qprint.core.conf import qprint_settings
from qprint.core.errors import NotFound, QPrintError
from qprint.core.states import JobStatus
from qprint.documents import render, storage
from qprint.domain import console, overview, previews, reconcile
from qprint.models import (
    PrintJob,
    PrintJobEvent,
    serializers,
)


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
            view("preview", self.preview_view),
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
        """The domain's read model of the job (timeline, claim, reprints) and the buttons that
        apply now for this user."""
        read = console.job_console(job)
        may_act = self.may_act(request)
        return {
            **read,
            "may_download": request.user.has_perm("qprint.view_printjob"),
            # Why there is no preview (a raw printer language), or None: the page shows one.
            "no_preview": render.no_preview_reason(job.content_type),
            "may_cancel": may_act and read["cancellable"],
            "may_reprint": may_act,
            "may_force_reprint": may_act and bool(read["reprints"]),
        }

    def viewable_job(self, request, object_id) -> PrintJob:
        """The job, for staff with ``qprint.view_printjob`` (403 otherwise; 404 no such job)."""
        if not request.user.has_perm("qprint.view_printjob"):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404("No such job.")
        return job

    def document_view(self, request, object_id):
        """The job's document as an attachment, never cached (``qprint.view_printjob``)."""
        job = self.viewable_job(request, object_id)
        try:
            content = storage.open_document(job)
        except NotFound as exc:
            raise Http404(exc.message) from None
        response = HttpResponse(content, content_type=job.content_type)
        response["Content-Disposition"] = content_disposition_header(
            True, f"qprint-{job.pk}{self.document_suffix(job)}"
        )
        response["Cache-Control"] = "no-store"
        response["X-Content-Type-Options"] = "nosniff"
        return response

    def preview_view(self, request, object_id):
        """A page of the job as a PNG (``?page=``, ``?width=`` up to 1600), or the reason there is
        none as text with its status (``qprint.view_printjob``)."""
        job = self.viewable_job(request, object_id)
        try:
            page = int(request.GET.get("page") or 1)
            width = int(request.GET.get("width") or previews.DEFAULT_WIDTH)
            png = previews.job_preview(job, page=page, width=width)
        except ValueError:
            return HttpResponse("page and width are numbers", status=400, content_type="text/plain")
        except QPrintError as exc:
            response = HttpResponse(exc.message, status=exc.status, content_type="text/plain")
            response["X-Qprint-Error"] = exc.code
            return response
        response = HttpResponse(png, content_type="image/png")
        response["Cache-Control"] = "private, max-age=3600"
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
