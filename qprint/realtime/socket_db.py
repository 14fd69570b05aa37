"""The threads the device-socket path runs its database statements on.

Channels' ``database_sync_to_async`` runs on ONE thread per process by default (thread
sensitive), the same thread Django's ASGI handler uses for every synchronous view. Pings,
connects and wakeups of all the node's sockets would then queue behind each other and behind
HTTP requests. The socket path therefore runs on threads of its own
(``QPRINT["SOCKET_DB_THREADS"]`` threads, a :class:`qprint.core.executor.DatabaseThreads`), and
never calls Channels' per-message ``close_old_connections`` on the shared thread.

Connections: with Django's psycopg pool each statement takes a connection from the process's
pool and gives it back (the same pool as the HTTP requests); without one each thread keeps its
own connection for the life of the process. See :mod:`qprint.core.executor`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from qprint.core.executor import DatabaseThreads

T = TypeVar("T")

#: Called around each statement of the socket path (tests count statements with it).
statement_observer: Callable[..., Any] | None = None


class _SocketThreads(DatabaseThreads):
    @property
    def statement_observer(self) -> Callable[..., Any] | None:  # the module's, patched by tests
        return statement_observer


threads = _SocketThreads("socket", "SOCKET_DB_THREADS")


def executor() -> ThreadPoolExecutor:
    return threads.executor()


async def run(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``func`` (a synchronous database function) on the socket path's own threads."""
    return await threads.run(func, *args, **kwargs)


def close_connections(timeout: float = 5) -> None:
    """Close the database connection of every socket thread (shutdown, tests' teardown)."""
    threads.close_connections(timeout)
