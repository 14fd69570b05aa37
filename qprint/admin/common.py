"""What the admin pages of qprint share: who acted, the once-only secrets page, the reports of
bulk actions, and the read-only mixin of rows written only by qprint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from qprint.core.errors import QPrintError
from qprint.models import PrintJob

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


class ReadOnlyAdminMixin:
    """Rows written only by qprint itself: viewable, never added or edited by hand."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
