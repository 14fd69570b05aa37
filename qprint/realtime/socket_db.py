"""The threads the device-socket path runs its database statements on.

Channels' ``database_sync_to_async`` runs on ONE thread per process by default (thread
sensitive), the same thread Django's ASGI handler uses for every synchronous view. Pings,
connects and wakeups of all the node's sockets would then queue behind each other and behind
HTTP claims. The socket path therefore runs on a pool of its own
(``QPRINT["SOCKET_DB_THREADS"]`` threads, ``thread_sensitive=False``), each thread with its own
database connection, and never calls Channels' per-message ``close_old_connections`` on the
shared thread.

Each of these threads keeps its connection for the life of the process, whatever
``CONN_MAX_AGE`` says: that setting is about request threads, and Django's advice under ASGI is
to leave it at 0 (each request runs in a thread of its own, so a kept connection would be left
behind per request). A statement that fails with a database error drops its thread's connection,
so the next statement reconnects (a restarted PostgreSQL costs one failed statement per thread).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

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


def _on_socket_thread(func: Callable[..., T]) -> Callable[..., T]:
    def call(*args: Any, **kwargs: Any) -> T:
        from django.db import DatabaseError, connection

        try:
            observer = statement_observer
            if observer is None:
                return func(*args, **kwargs)
            with connection.execute_wrapper(observer):
                return func(*args, **kwargs)
        except DatabaseError:
            connection.close()  # the next statement on this thread reconnects
            raise

    return call


async def run(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``func`` (a synchronous database function) on the socket path's own threads."""
    return await sync_to_async(
        _on_socket_thread(func), thread_sensitive=False, executor=executor()
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
