"""Why the database does not answer: the cause that a connection pool hides; and what a
transport answers when it did not (:func:`answer_of`).

With Django's psycopg pool (``OPTIONS["pool"]``, docs/INSTALL.md), a request that finds no
connection fails with ``couldn't get a connection after 1.50 sec``: the pool's workers met the real
error ("database ... does not exist", "password authentication failed", "connection refused")
and said so only in their own earlier log lines. :func:`cause` opens one connection without the
pool, with the same parameters, and returns the error it meets. The system check
``qprint.W014`` (``manage.py check``) and the HTTP API's ``api_database_unavailable`` log line
show it; a node's health report stays terse.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DataError, connections

from qprint.core import errors

logger = logging.getLogger("qprint.database")

#: Seconds between two diagnoses logged by one process (a database that is down fails every
#: request; one line says why).
LOG_EVERY_SECONDS = 30.0
_CONNECT_TIMEOUT = 3
_last_logged = 0.0
_lock = threading.Lock()


def pooled_aliases() -> list[str]:
    """The PostgreSQL databases that run through Django's pool."""
    return [
        alias
        for alias in connections
        if connections[alias].vendor == "postgresql"
        and connections.settings[alias].get("OPTIONS", {}).get("pool")
    ]


def cause(alias: str = "default") -> str | None:
    """The error of one connection opened without the pool; None when it connects."""
    import psycopg

    params = dict(connections[alias].get_connection_params())
    params.setdefault("connect_timeout", _CONNECT_TIMEOUT)
    try:
        with psycopg.connect(**params) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def is_pool_timeout(exc: BaseException) -> bool:
    """Whether a database error is the pool's "couldn't get a connection" (its cause hidden)."""
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # no pool installed: nothing hides the cause
        return False
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, PoolTimeout):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def log_cause(exc: BaseException, alias: str = "default") -> None:
    """After a pool timeout, log the database's real error (at most every LOG_EVERY_SECONDS)."""
    global _last_logged
    if not is_pool_timeout(exc):
        return
    with _lock:
        now = time.monotonic()
        if _last_logged and now - _last_logged < LOG_EVERY_SECONDS:
            return
        _last_logged = now
    found = cause(alias)
    if found is None:
        logger.warning(
            "database_pool_exhausted alias=%s: the database answers, but every connection of "
            "the pool was busy (raise OPTIONS['pool']['max_size'] or the database's "
            "max_connections)",
            alias,
        )
    else:
        logger.error("database_unreachable alias=%s error=%s", alias, found)


def answer_of(exc: Exception) -> tuple[int, str, str]:
    """The status, error code and message a transport answers for what an operation raised: a
    refusal's own; a value the database would not store, :data:`errors.DATA_REFUSED` (the
    client's error); any other database error, :data:`errors.UNAVAILABLE`."""
    if isinstance(exc, errors.QPrintError):
        return exc.status, exc.code, exc.message
    if isinstance(exc, DataError):
        return errors.DATA_REFUSED
    return errors.UNAVAILABLE
