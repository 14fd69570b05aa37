"""Keyset pagination of the application API's lists: ``?limit=&cursor=``.

A page is ``{"results": [...], "next_cursor": "<opaque>" | null}``. The cursor names the last row
served, so a page is stable while rows are added (no skipped or repeated rows, as an ``OFFSET``
would give) and costs one index range scan however deep the client pages.

Tenancy: a cursor is signed (``SECRET_KEY``, a salt per list), so a client cannot forge one, and it
names its row by a key that is not a serial number (a UUID, a device's name, a delivery's
``event_id``), so it tells nothing of other tenants' rows. Its row is looked up in ``scope``, the
rows the caller may see (the tenant's), never in the whole table. A cursor not of the shape this
API gives out is 422; one that does not verify (forged, edited, another list's), or whose row is
not in ``scope`` (gone, or another tenant's), answers the same empty page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from django.core import signing
from django.db.models import Q, QuerySet, Subquery
from django.http import HttpRequest

from qprint.views.http import invalid

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: Longer than any cursor this API gives out (a signed 255-character device name).
MAX_CURSOR_LENGTH = 1024
#: What every cursor looks like (``docs/openapi.yaml`` gives it as the parameter's pattern).
CURSOR_SHAPE = re.compile(r"[A-Za-z0-9_-]+:[A-Za-z0-9_-]+")


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


def _signer(scope: QuerySet, key: str) -> signing.Signer:
    return signing.Signer(salt=f"qprint.cursor:{scope.model._meta.label_lower}:{key}")


def encode_cursor(scope: QuerySet, key: str, value: Any) -> str:
    """The cursor after the row whose ``key`` is ``value``: opaque and signed."""
    return _signer(scope, key).sign_object(str(value), compress=False)


def decode_cursor(scope: QuerySet, key: str, cursor: str) -> str | None:
    """The key a cursor names; 422 when it is not of the shape this API gives out, None when it
    has that shape but does not verify (forged, edited, another list's): it names no row."""
    if len(cursor) > MAX_CURSOR_LENGTH or not CURSOR_SHAPE.fullmatch(cursor):
        raise invalid("cursor", "is not a cursor this API gave out")
    try:
        value = _signer(scope, key).unsign_object(cursor)
    except (signing.BadSignature, ValueError, TypeError, UnicodeError):
        return None
    return value if isinstance(value, str) else None


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
    *,
    scope: QuerySet,
    key: str = "pk",
    descending: bool = False,
) -> dict[str, Any]:
    """One page of ``queryset`` ordered by ``fields``, whose last one is the primary key.

    ``scope``: every row the caller may see (the tenant's, unfiltered, so a row that left a
    ``?status=`` filter still anchors the next page); ``key``: a column unique within ``scope``
    that is not a serial number, which the cursor carries. The sort values are read back from the
    anchor row in SQL, so they are compared in the database's own representation (a timestamp
    written by ``Now()`` on SQLite is text of another precision than Python's).
    """
    limit = page_limit(request)
    order = [f"-{f}" if descending else f for f in fields]
    queryset = queryset.order_by(*order)
    cursor = request.GET.get("cursor")
    if cursor is not None:
        named = decode_cursor(scope, key, cursor)
        if named is None:
            return {"results": [], "next_cursor": None}
        anchor = scope.order_by().filter(**{key: named})
        values = [Subquery(anchor.values(f)[:1]) for f in fields]
        queryset = queryset.filter(after(fields, values, descending))
    rows = list(queryset[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(scope, key, getattr(rows[-1], key)) if more else None
    return {"results": [serialize(r) for r in rows], "next_cursor": next_cursor}
