"""The threads the device-socket path runs its database statements on.

Channels' ``database_sync_to_async`` runs on ONE thread per process by default (thread
sensitive), the same thread Django's ASGI handler uses for every synchronous view. Pings,
connects and wakeups of all the node's sockets would then queue behind each other and behind
HTTP claims. The socket path therefore runs on a pool of its own
(``QPRINT["SOCKET_DB_THREADS"]`` threads, ``thread_sensitive=False``), each thread with its own
database connection, and never calls Channels' per-message ``close_old_connections`` on the
shared thread.

Connections follow Django's rules (``CONN_MAX_AGE``, ``CONN_HEALTH_CHECKS`` or the psycopg pool
option): with ``CONN_MAX_AGE = 0`` every call opens and closes one; production nodes set a
positive ``CONN_MAX_AGE`` or ``"pool"`` (see docs/REALTIME.md).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from channels.db import database_sync_to_async

from qprint.conf import qprint_settings

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
#: Called around each statement of the socket path (tests count statements with it).
statement_observer: Callable[..., Any] | None = None


def executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=int(qprint_settings.SOCKET_DB_THREADS),
                thread_name_prefix="qprint-socket-db",
            )
        return _executor


def _observed(func: Callable[..., T]) -> Callable[..., T]:
    def call(*args: Any, **kwargs: Any) -> T:
        observer = statement_observer
        if observer is None:
            return func(*args, **kwargs)
        from django.db import connection

        with connection.execute_wrapper(observer):
            return func(*args, **kwargs)

    return call


async def run(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``func`` (a synchronous database function) on the socket path's own threads."""
    return await database_sync_to_async(
        _observed(func), thread_sensitive=False, executor=executor()
    )(*args, **kwargs)


def close_connections(timeout: float = 5) -> None:
    """Close the database connection of every socket thread (shutdown, tests' teardown).

    One task per thread, held at a barrier so that each thread runs exactly one of them.
    """
    from django.db import connections

    pool = executor()
    workers = len(pool._threads)  # the threads started so far (each may hold a connection)
    if not workers:
        return
    barrier = threading.Barrier(workers)

    def close_here() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout)
        connections.close_all()

    for future in [pool.submit(close_here) for _ in range(workers)]:
        future.result(timeout + 5)
