"""What the admin pages of qprint share: who acted, the once-only secrets page, the reports of
bulk actions, the read-only mixin of rows written only by qprint, and the mixin of models that
keep a secret (no lookup on it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.utils import dateformat, timezone
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


def to_the_second(moment) -> str:
    """A time as the lists show it: local, to the second (``2026-12-01 09:30:05``); "-" for none."""
    if moment is None:
        return "-"
    return dateformat.format(timezone.localtime(moment), "Y-m-d H:i:s")


def time_column(field: str, description: str) -> Callable[[Any, Any], str]:
    """A list column (a ModelAdmin method) showing the datetime ``field`` to the second, sortable
    by it: ``created = time_column("created_at", _("created"))``."""

    @admin.display(description=description, ordering=field)
    def column(modeladmin: admin.ModelAdmin, obj: Any) -> str:
        return to_the_second(getattr(obj, field))

    return column


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


class SecretColumnsMixin:
    """A model admin whose rows keep a secret or its hash (``secret_columns``): its changelist
    takes no lookup on those columns from the query string. Django allows a lookup on any column
    of the model there, and ``?secret__startswith=whsec_a`` would list the row only when the guess
    is a prefix of the secret: it would give the secret away a character at a time to anyone who
    may see the list. Such a request is refused (400), as Django refuses a lookup it does not
    allow."""

    secret_columns: tuple[str, ...] = ()

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if lookup.split(LOOKUP_SEP, 1)[0] in self.secret_columns:
            return False
        return super().lookup_allowed(lookup, value, request)  # type: ignore[misc]
