"""The throttle of failed authentications: per source address and per credential prefix, shared
by every node through the database (``qprint_auth_failure``), so Redis is not needed for it.

Invariant: once a scope (an address, or the first characters of a presented secret) has failed
``AUTH_FAILURE_LIMIT`` times within ``AUTH_FAILURE_WINDOW_SECONDS`` (database clock), every
authentication in that scope is refused with :class:`qprint.core.errors.RateLimited` (HTTP 429 with
``Retry-After``) until the window ends, even one presenting a valid secret: a guesser never learns
that a guess was right. Only failures are counted; a working credential costs nothing here.

How it holds: :func:`record_failure` counts in one ``INSERT ... ON CONFLICT DO UPDATE`` per scope
(atomic on any node; a window that ended starts again at 1). The check rides on the credential's
own lookup (:func:`throttled`, an ``EXISTS`` in the same SELECT), so a working credential costs no
extra statement; :func:`refusal` reads the counters of both scopes when that says so, or when the
secret is unknown. The scopes hold no secret: the prefix is stored and logged as a hash.
Nothing else writes ``qprint_auth_failure``.
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import timedelta

from django.db import connection as db
from django.db.models import CharField, DurationField, Exists, F, IntegerField
from django.db.models.functions import Now

from qprint.core import sql
from qprint.core.conf import qprint_settings
from qprint.core.errors import RateLimited
from qprint.core.prepared import Param
from qprint.models import AuthFailureCount

logger = logging.getLogger("qprint.auth")

#: Characters of a presented secret that name its prefix scope (hashed before it is stored).
PREFIX_CHARACTERS = 8


def scopes(source: str, secret: str) -> tuple[str, str]:
    """The address scope and the credential-prefix scope of an attempt."""
    prefix = hashlib.sha256(secret[:PREFIX_CHARACTERS].encode("utf-8", "replace")).hexdigest()
    return f"addr:{source[:80]}", f"prefix:{prefix[:32]}"


def prefix_hash(secret: str) -> str:
    """What the log says of a presented secret: the hash naming its prefix scope."""
    return scopes("", secret)[1].removeprefix("prefix:")


def _over_limit(address_scope, prefix_scope, limit, window):
    """Counters of the two scopes that reached ``limit`` within ``window`` (values or
    :class:`~qprint.core.prepared.Param` placeholders)."""
    return AuthFailureCount.objects.filter(
        scope__in=(address_scope, prefix_scope),
        failures__gte=limit,
        window_started_at__gt=Now() - window,
    )


def _over_limit_now(source: str, secret: str):
    window = timedelta(seconds=qprint_settings.AUTH_FAILURE_WINDOW_SECONDS)
    return _over_limit(*scopes(source, secret), qprint_settings.AUTH_FAILURE_LIMIT, window)


def throttled() -> Exists:
    """An ``EXISTS`` to annotate the credential's own (prepared) lookup with, so a request whose
    secret is right pays no statement of its own for the throttle (then call :func:`refusal`).
    Its values are :func:`throttle_values`."""
    return Exists(
        _over_limit(
            Param("address_scope", CharField()),
            Param("prefix_scope", CharField()),
            Param("failure_limit", IntegerField()),
            Param("failure_window", DurationField()),
        )
    )


def throttle_values(source: str, secret: str) -> dict:
    """The values of :func:`throttled`'s placeholders for an attempt."""
    address_scope, prefix_scope = scopes(source, secret)
    return {
        "address_scope": address_scope,
        "prefix_scope": prefix_scope,
        "failure_limit": qprint_settings.AUTH_FAILURE_LIMIT,
        "failure_window": timedelta(seconds=qprint_settings.AUTH_FAILURE_WINDOW_SECONDS),
    }


def refusal(source: str, secret: str) -> RateLimited | None:
    """The refusal of an attempt from ``source`` with ``secret``, or None when it may proceed."""
    window = qprint_settings.AUTH_FAILURE_WINDOW_SECONDS
    rows = (
        _over_limit_now(source, secret)
        .annotate(age=Now() - F("window_started_at"))
        .values_list("age", flat=True)
    )
    ages = list(rows)
    if not ages:
        return None
    youngest = min(_seconds(age) for age in ages)
    retry_after = max(1, math.ceil(window - youngest))
    return RateLimited(
        retry_after,
        f"Too many failed authentications; retry in {retry_after} seconds.",
    )


def _seconds(age) -> float:
    if isinstance(age, timedelta):
        return age.total_seconds()
    return float(age or 0)  # SQLite hands back microseconds or text for a datetime difference


def record_failure(source: str, secret: str, kind: str) -> None:
    """Count a failed authentication in both scopes and log it (without the secret)."""
    window = qprint_settings.AUTH_FAILURE_WINDOW_SECONDS
    table = AuthFailureCount._meta.db_table
    expired = f"{table}.window_started_at <= {sql.seconds_ago()}"
    statement = f"""
        INSERT INTO {table} (scope, window_started_at, failures) VALUES (%s, {sql.now()}, 1)
        ON CONFLICT (scope) DO UPDATE SET
            failures = CASE WHEN {expired} THEN 1 ELSE {table}.failures + 1 END,
            window_started_at = CASE WHEN {expired} THEN {sql.now()}
                                     ELSE {table}.window_started_at END
        """
    with db.cursor() as cursor:
        for scope in scopes(source, secret):
            cursor.execute(statement, [scope, window, window])
    logger.warning(
        "auth_failed kind=%s source=%s prefix_hash=%s", kind, source, prefix_hash(secret)[:12]
    )


def purge() -> int:
    """Delete counters whose window ended (run with the retention task); returns how many."""
    window = qprint_settings.AUTH_FAILURE_WINDOW_SECONDS
    count, _ = AuthFailureCount.objects.filter(
        window_started_at__lte=Now() - timedelta(seconds=window)
    ).delete()
    return count
