"""The one way qprint sends to channel-layer groups from synchronous code: a bounded queue drained
by one daemon thread.

Wakeups to device sockets (:mod:`qprint.realtime.publisher`) and the after-commit notices of the
webhooks and of waiting requests (:mod:`qprint.webhooks.notify`) both leave through the process's
:func:`process_publisher`. The caller (often a request that just committed) never waits for Redis:
:meth:`GroupPublisher.send` only puts the message on a bounded queue
(``QPRINT["WAKE_QUEUE_SIZE"]``, shared by both kinds); one daemon thread with its own event loop
sends it with ``group_send``. A full queue or a layer error drops the message and tells the caller's
``on_drop``; what is sent is a hint whose loss costs latency, never correctness (the next heartbeat,
the sender's poll, the waiting request's re-read find it).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

from qprint.core.conf import DEFAULTS, qprint_settings

logger = logging.getLogger("qprint.publisher")

#: How long one group_send may take before the message is dropped.
SEND_TIMEOUT_SECONDS = 1.0
#: How long a process that exits waits for its queued messages.
EXIT_FLUSH_SECONDS = 2.0

#: ``on_drop(cause, error)``: cause ``queue_full`` (error None) or ``layer_error``.
OnDrop = Callable[[str, BaseException | None], None]


@dataclass
class PublisherCounters:
    """What one kind of message did (the wakeups' are on ``/metrics``)."""

    queued: int = 0
    published: int = 0
    delivered_locally: int = 0
    dropped_queue_full: int = 0
    dropped_layer_error: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


def cross_process_layer(layer: Any) -> bool:
    """True when ``layer`` reaches other processes (not absent, not the in-memory layer)."""
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


class GroupPublisher:
    """Messages to channel-layer groups from one bounded queue, on a thread of its own."""

    def __init__(self, queue_size: int, *, layer: Callable[[], Any] = get_channel_layer) -> None:
        self.queue: queue.Queue[tuple[str, dict, PublisherCounters | None, OnDrop | None]] = (
            queue.Queue(maxsize=queue_size)
        )
        self._layer = layer
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    def send(
        self,
        group: str,
        message: dict,
        *,
        counters: PublisherCounters | None = None,
        on_drop: OnDrop | None = None,
    ) -> bool:
        """Queue ``message`` for ``group``; False (counted, ``on_drop`` told) when the queue is
        full."""
        try:
            self.queue.put_nowait((group, message, counters, on_drop))
        except queue.Full:
            if counters is not None:
                counters.add("dropped_queue_full")
            if on_drop is not None:
                on_drop("queue_full", None)
            return False
        if counters is not None:
            counters.add("queued")
        self._ensure_thread()
        return True

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queued messages to be sent (or dropped).

        Called at interpreter exit, so a short-lived process (``qprint_submit``, a script using
        ``qprint.api``) does not leave its wakeups and notices behind in the queue.
        """
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks:
            if time.monotonic() >= deadline or not (self._thread and self._thread.is_alive()):
                return False
            time.sleep(0.01)
        return True

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._thread_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="qprint-publisher", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        # A daemon thread blocking on the queue itself (not an executor thread: the interpreter
        # joins those at exit, and a blocked one would keep a stopping node alive).
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        while True:
            group, message, counters, on_drop = self.queue.get()
            try:
                layer = self._layer()  # as configured now (tests change it)
                loop.run_until_complete(
                    asyncio.wait_for(layer.group_send(group, message), SEND_TIMEOUT_SECONDS)
                )
            except Exception as exc:
                if counters is not None:
                    counters.add("dropped_layer_error")
                if on_drop is not None:
                    on_drop("layer_error", exc)
            else:
                if counters is not None:
                    counters.add("published")
            finally:
                self.queue.task_done()


def configured_queue_size() -> int:
    """``QPRINT["WAKE_QUEUE_SIZE"]``; a bad value falls back to the default here, and
    ``manage.py check`` names it (qprint's settings checks) instead of a crash at start-up."""
    try:
        return max(1, int(qprint_settings.WAKE_QUEUE_SIZE))
    except (TypeError, ValueError):
        return DEFAULTS["WAKE_QUEUE_SIZE"]


_process: GroupPublisher | None = None
_process_lock = threading.Lock()


def process_publisher() -> GroupPublisher:
    """This process's publisher (made on first use; flushed at interpreter exit)."""
    global _process
    if _process is None:
        with _process_lock:
            if _process is None:
                _process = GroupPublisher(configured_queue_size())
                atexit.register(_process.flush, EXIT_FLUSH_SECONDS)
    return _process
