"""Keyset pagination of the application API's lists: ``?limit=&cursor=``.

A page is ``{"results": [...], "next_cursor": "<opaque>" | null}``. The cursor names the last row
served (its primary key; its other sort values are read back from that row), so a page is stable
while rows are added (no skipped or repeated rows, as an ``OFFSET`` would give) and costs one
index range scan however deep the client pages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet, Subquery
from django.http import HttpRequest

from qprint.views.http import invalid

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def page_limit(request: HttpRequest) -> int:
    raw = request.GET.get("limit")
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise invalid("limit", "must be an integer") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise invalid("limit", f"must be between 1 and {MAX_LIMIT}")
    return limit


def encode_cursor(pk: Any) -> str:
    """The cursor after the row ``pk``: its primary key as text (a UUID for jobs, digits for
    devices; ``docs/openapi.yaml`` gives each list's cursor that shape)."""
    return str(pk)


def decode_cursor(queryset: QuerySet, cursor: str) -> Any:
    """The primary key a cursor names; 422 when it is not one this list could have given."""
    field = queryset.model._meta.pk
    if len(cursor) > 64:
        raise invalid("cursor", "is not a cursor this API gave out")
    try:
        return field.to_python(cursor)
    except ValidationError:
        raise invalid("cursor", "is not a cursor this API gave out") from None


def after(fields: Sequence[str], values: Sequence[Any], descending: bool) -> Q:
    """Rows strictly after ``values`` in the order of ``fields`` (a row-value comparison)."""
    op = "lt" if descending else "gt"
    condition = Q()
    for i, name in enumerate(fields):
        equal = dict(zip(fields[:i], values[:i], strict=True))
        condition |= Q(**equal, **{f"{name}__{op}": values[i]})
    return condition


def paginate(
    request: HttpRequest,
    queryset: QuerySet,
    fields: Sequence[str],
    serialize: Callable[[Any], dict[str, Any]],
    descending: bool = False,
) -> dict[str, Any]:
    """One page of ``queryset`` ordered by ``fields``, whose last one is the primary key.

    The cursor carries only the last row's primary key; the other sort values are read back from
    that row in SQL, so they are compared in the database's own representation (a timestamp
    written by ``Now()`` on SQLite is text of another precision than Python's).
    """
    limit = page_limit(request)
    order = [f"-{f}" if descending else f for f in fields]
    queryset = queryset.order_by(*order)
    cursor = request.GET.get("cursor")
    if cursor is not None:
        last_pk = decode_cursor(queryset, cursor)
        anchor = queryset.model._default_manager.filter(pk=last_pk)
        values = [Subquery(anchor.values(f)[:1]) for f in fields[:-1]] + [last_pk]
        queryset = queryset.filter(after(fields, values, descending))
    rows = list(queryset[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(rows[-1].pk) if more else None
    return {"results": [serialize(r) for r in rows], "next_cursor": next_cursor}
