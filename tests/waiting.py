"""The one way a test waits: for a condition, with a deadline (never sleep-and-hope).

- :func:`wait_until`: from synchronous code (a thread of the test, a fixture);
- :func:`eventually`: from a coroutine, without blocking the event loop. The predicate may be a
  coroutine function (an HTTP query), and ``database=True`` runs each call on a database thread
  (``database_sync_to_async``) for a predicate that reads the database.

Both poll until the predicate returns something truthy and return it; an exception raised by the
predicate counts as "not yet" (the condition may not be observable yet) and is named in the
failure. ``message`` names what was awaited; a callable is called at the failure for a message
that says how far it got.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

Message = str | Callable[[], str]


def _failure(timeout: float, message: Message, predicate: Any, error: Exception | None) -> str:
    text = message() if callable(message) else message
    detail = f" (last error: {error!r})" if error else ""
    return f"timed out after {timeout}s waiting for {text or predicate}{detail}"


def wait_until(
    predicate: Callable[[], T], timeout: float, interval: float = 0.05, message: Message = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(_failure(timeout, message, predicate, last_error))
        time.sleep(interval)


async def eventually(
    predicate: Callable[[], Any],
    timeout: float = 10,
    message: Message = "",
    *,
    interval: float = 0.02,
    database: bool = False,
) -> Any:
    """Await ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    if database:
        from channels.db import database_sync_to_async

        predicate = database_sync_to_async(predicate)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(_failure(timeout, message, predicate, last_error))
        await asyncio.sleep(interval)
