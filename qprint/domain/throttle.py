"""The throttle of failed authentications: per real client address and per credential prefix,
shared by every node through the database (``qprint_auth_failure``), so Redis is not needed for it.

Invariant: a right secret is never refused here, whatever others did from its address or with
its prefix (no stranger can lock a device or a key out). Once a scope (a client address, or the
first characters of a presented secret) has failed ``AUTH_FAILURE_LIMIT`` times within
``AUTH_FAILURE_WINDOW_SECONDS`` (database clock), every further wrong secret in that scope is
refused with :class:`qprint.core.errors.RateLimited` (HTTP 429 with ``Retry-After``) instead of
being counted, until the window ends. Only failures are counted; a working credential costs nothing
here (not even a statement).

The address is the real client's (:func:`client_address`): the peer the server saw, or, when that
peer is a configured trusted proxy (``TRUSTED_PROXIES``), the rightmost ``X-Forwarded-For`` entry
that is not one; never the leftmost, which the client writes itself.

How it holds: :func:`record_failure` counts in one ``INSERT ... ON CONFLICT DO UPDATE`` per scope
(atomic on any node; a window that ended starts again at 1); :func:`refusal` reads the counters of
both scopes once a secret was found unknown. The scopes hold no secret: the prefix is stored and
logged as a hash. Nothing else writes ``qprint_auth_failure``.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import math
from datetime import timedelta

from django.db import connection as db
from django.db.models import F
from django.db.models.functions import Now

from qprint.core import sql
from qprint.core.conf import qprint_settings
from qprint.core.errors import RateLimited
from qprint.models import AuthFailureCount

logger = logging.getLogger("qprint.auth")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Characters of a presented secret that name its prefix scope (hashed before it is stored).
PREFIX_CHARACTERS = 8


def _networks(entries: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries)


_trusted_networks = functools.lru_cache(maxsize=8)(_networks)


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False  # not an address: text a client wrote, never a proxy of ours
    proxies = _trusted_networks(tuple(qprint_settings.TRUSTED_PROXIES))
    return any(ip in network for network in proxies)


def client_address(peer: str | None, forwarded_for: str | None) -> str:
    """The real client address of a request or a socket upgrade.

    ``peer`` is the address the server saw (``REMOTE_ADDR``, the ASGI scope's ``client``);
    ``forwarded_for`` the ``X-Forwarded-For`` header (its values joined with commas). Walking
    from the right, from the peer over the addresses each proxy appended, the first address that
    is not a trusted proxy (``TRUSTED_PROXIES``) is the client; a peer that is not a trusted proxy
    is the client itself, whatever the header says.
    """
    chain = [entry.strip() for entry in (forwarded_for or "").split(",") if entry.strip()]
    chain.append((peer or "").strip() or "unknown")
    for address in reversed(chain):
        if not _trusted(address):
            return address
    return chain[0]  # every hop is a trusted proxy: the first one is the client


def scopes(source: str, secret: str) -> tuple[str, str]:
    """The address scope and the credential-prefix scope of an attempt."""
    prefix = hashlib.sha256(secret[:PREFIX_CHARACTERS].encode("utf-8", "replace")).hexdigest()
    return f"addr:{source[:80]}", f"prefix:{prefix[:32]}"


def prefix_hash(secret: str) -> str:
    """What the log says of a presented secret: the hash naming its prefix scope."""
    return scopes("", secret)[1].removeprefix("prefix:")


def _over_limit_now(source: str, secret: str):
    """Counters of the attempt's two scopes that reached the limit within the window."""
    window = timedelta(seconds=qprint_settings.AUTH_FAILURE_WINDOW_SECONDS)
    return AuthFailureCount.objects.filter(
        scope__in=scopes(source, secret),
        failures__gte=qprint_settings.AUTH_FAILURE_LIMIT,
        window_started_at__gt=Now() - window,
    )


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
