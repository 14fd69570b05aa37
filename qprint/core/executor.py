"""Node-owned threads for the synchronous database work of qprint's async transports.

An async view or the device socket hands its database work to a :class:`DatabaseThreads`: a
fixed set of threads made once per process, so a request pays neither a new thread (Django runs a
synchronous view on a thread of its own per request under ASGI) nor a new database connection.

Connections: with Django's psycopg pool (``OPTIONS["pool"]``, on by default in the example
project on PostgreSQL) a thread takes a connection from the pool for its first call and gives it
back (``connection.close()`` returns it to the pool) once it has had no call for
:data:`LINGER_SECONDS`, or after :data:`HOLD_CALLS` calls in a row. So these threads share the
process's pool with every other thread of the process, a thread with nothing to do holds no
connection for long, and a busy node makes no round trip through the pool per statement
(docs/PERFORMANCE.md, "A connection kept while busy"). Without a pool (SQLite, or
``DATABASE_POOL=off`` behind PgBouncer in transaction mode) each thread keeps its own connection
for the life of the process, whatever ``CONN_MAX_AGE`` says (that setting is about request
threads). A call that fails with a database error drops its thread's connection, so the next call
reconnects.

Two sets per process: the device sockets' (``QPRINT["SOCKET_DB_THREADS"]``, in
:mod:`qprint.realtime.socket_db`) and the HTTP views' (``QPRINT["HTTP_DB_THREADS"]``), so that a
burst of HTTP requests never delays the sockets' pings and wakeups. Neither uses Channels' single
shared sync thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from qprint.core.conf import qprint_settings
from qprint.core.handoff import Workers

T = TypeVar("T")

logger = logging.getLogger("qprint.database")


#: A pooled connection goes back to the pool after its thread has had no call for this long.
LINGER_SECONDS = 0.05
#: ... or after this many calls in a row, so that other threads waiting on the pool get a turn.
HOLD_CALLS = 32


def pooled(alias: str = "default") -> bool:
    """True when the database ``alias`` hands out connections from Django's psycopg pool."""
    from django.db import connections

    return bool(connections[alias].settings_dict.get("OPTIONS", {}).get("pool"))


class DatabaseThreads:
    """A named set of threads (``QPRINT[setting]`` of them, or ``threads``) that run database
    functions."""

    #: Called around each statement run here (tests count statements with it).
    statement_observer: Callable[..., Any] | None = None
    #: Run on the caller's own sync thread instead (tests whose data sits in the test thread's
    #: open transaction, invisible to other connections, set it).
    inline: bool = False

    def __init__(
        self, name: str, setting: str | None = None, *, threads: int | None = None
    ) -> None:
        if (setting is None) == (threads is None):
            raise ValueError("give the setting naming the number of threads, or the number")
        self.name = name
        self.setting = setting
        self.threads = threads
        self._lock = threading.Lock()
        self._workers: Workers | None = None

    def workers(self) -> Workers:
        with self._lock:
            if self._workers is None:
                count = self.threads or int(getattr(qprint_settings, self.setting or ""))
                self._workers = Workers(
                    count, f"qprint-{self.name}-db", idle=_give_back, linger=LINGER_SECONDS
                )
            return self._workers

    def shutdown(self) -> None:
        """Close every thread's connection and stop the threads (a worker that ends); the next
        call starts new ones."""
        self.close_connections()
        with self._lock:
            pool, self._workers = self._workers, None
        if pool is not None:
            pool.shutdown()

    def _on_thread(self, func: Callable[..., T]) -> Callable[..., T]:
        def call(*args: Any, **kwargs: Any) -> T:
            from django.db import DatabaseError, connection

            try:
                observer = self.statement_observer
                if observer is None:
                    return func(*args, **kwargs)
                with connection.execute_wrapper(observer):
                    return func(*args, **kwargs)
            except DatabaseError:
                connection.close()  # the next call on this thread reconnects
                raise
            finally:
                _held.calls = getattr(_held, "calls", 0) + 1
                if _held.calls >= HOLD_CALLS:
                    _give_back()

        return call

    async def run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``func`` (a synchronous database function) on these threads, in a copy of the
        caller's context (``contextvars``), as ``sync_to_async`` would, without its per-call
        set-up (nothing run here calls back into the event loop)."""
        if self.inline:
            return await sync_to_async(func, thread_sensitive=True)(*args, **kwargs)
        call = functools.partial(
            contextvars.copy_context().run, self._on_thread(func), *args, **kwargs
        )
        return await self.workers().run(call)

    def close_connections(self, timeout: float = 5) -> None:
        """Close the database connection of every thread (shutdown, tests' teardown).

        One task per thread, held at a barrier so that each thread runs exactly one of them.
        """
        from django.db import connections

        pool = self.workers()
        workers = len(pool.threads)  # the threads started so far (each may hold a connection)
        if not workers:
            return
        barrier = threading.Barrier(workers)

        def close_here() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout)
            connections.close_all()

        for future in [pool.submit(close_here) for _ in range(workers)]:
            future.result(timeout + 5)


#: Per database thread: the calls made since it took its pooled connection.
_held = threading.local()


def _give_back() -> None:
    """On a database thread: its pooled connection back to the pool (a connection of its own,
    without a pool, stays)."""
    from django.db import connection

    _held.calls = 0
    if connection.connection is not None and pooled():
        try:
            connection.close()
        except Exception:  # a broken connection: the pool drops it; the next call reconnects
            logger.debug("pool_give_back_failed", exc_info=True)


#: The HTTP views' threads (:func:`qprint.views.http.device_endpoint` and friends).
http = DatabaseThreads("http", "HTTP_DB_THREADS")
