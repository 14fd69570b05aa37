"""The one way qprint sends to channel-layer groups from synchronous code: a bounded queue drained
by one daemon thread, or the event loop of a node that runs one.

Wakeups to device sockets (:mod:`qprint.realtime.publisher`) and the after-commit notices of the
webhooks and of waiting requests (:mod:`qprint.webhooks.notify`) both leave through the process's
:func:`process_publisher`. The caller (often a request that just committed) never waits for Redis:
:meth:`GroupPublisher.send` only puts the message on a bounded queue
(``QPRINT["WAKE_QUEUE_SIZE"]``, shared by both kinds); one daemon thread with its own event loop
sends it with ``group_send``. A full queue or a layer error drops the message and tells the caller's
``on_drop``; what is sent is a hint whose loss costs latency, never correctness (the next heartbeat,
the sender's poll, the waiting request's re-read find it).

In a Daphne node whose device bus runs (:mod:`qprint.realtime.bus`), the bus hands this publisher
its event loop and its publishing layer (:meth:`GroupPublisher.send_on`): a message sent from
another thread is then scheduled on that loop instead, as many at a time as the queue would hold.
The thread and the loop wait for the interpreter's lock while the committing thread
finishes; the thread then raced the loop's answer to that request, and lost about half the time.
On the loop, the message's send runs first: a pushed job's wakeup left for Redis 0.8-1.3 ms after
its commit (p50; p90 1.4-2.3) instead of 1.3-2.1 (p90 2.6-4.0) in alternated runs
(docs/PERFORMANCE.md, "The thirty-fourth step"). When that loop stops, messages go to the
thread again.
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
        #: ``(loop, layer)`` while a node's event loop sends (:meth:`send_on`).
        self._route: tuple[asyncio.AbstractEventLoop, Any] | None = None
        #: Messages handed to that loop and not yet sent or dropped.
        self.on_loop = 0
        self._on_loop_lock = threading.Lock()
        self._loop_tasks: set[asyncio.Task] = set()  # held while they run (the loop's thread)

    def send(
        self,
        group: str,
        message: dict,
        *,
        counters: PublisherCounters | None = None,
        on_drop: OnDrop | None = None,
    ) -> bool:
        """Queue ``message`` for ``group``, on the node's loop while one sends (:meth:`send_on`),
        else for this publisher's thread; False (counted, ``on_drop`` told) when the queue, or
        what the loop has yet to send, is full."""
        item = (group, message, counters, on_drop)
        route = self._route
        handed = self._hand_to_loop(route, item) if route is not None else None
        if handed is None:
            try:
                self.queue.put_nowait(item)
            except queue.Full:
                handed = False
            else:
                self._ensure_thread()
                handed = True
        if counters is not None:
            counters.add("queued" if handed else "dropped_queue_full")
        if not handed and on_drop is not None:
            on_drop("queue_full", None)
        return handed

    def depth(self) -> int:
        """Messages waiting to be sent: in the queue and handed to the loop (``/metrics``)."""
        return self.queue.qsize() + self.on_loop

    def send_on(self, loop: asyncio.AbstractEventLoop, layer: Any) -> None:
        """Send through ``layer`` on ``loop`` (a running loop of this process) from now on, until
        it stops; a message sent from the loop's own thread is sent there too."""
        self._route = (loop, layer)

    def stop_sending_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Back to the thread, if ``loop`` is the one that sends."""
        route = self._route
        if route is not None and route[0] is loop:
            self._route = None

    def _hand_to_loop(
        self, route: tuple[asyncio.AbstractEventLoop, Any], item: tuple
    ) -> bool | None:
        """Schedule ``item``'s send on the route's loop: True when scheduled, False when the loop
        has :attr:`queue`'s size of messages yet to send, None when that loop no longer runs
        (the route is then given up)."""
        loop, layer = route
        with self._on_loop_lock:
            if self.on_loop >= self.queue.maxsize:
                return False
            self.on_loop += 1
        try:
            if loop.is_running():
                loop.call_soon_threadsafe(self._start_on_loop, loop, layer, item)
                return True
        except RuntimeError:  # closed meanwhile
            pass
        self._left_loop()
        self.stop_sending_on(loop)
        return None

    def _start_on_loop(self, loop: asyncio.AbstractEventLoop, layer: Any, item: tuple) -> None:
        # The task is the layer's own send: its first step, the write to Redis, runs before the
        # callbacks queued after this one, such as the answer to the request that committed.
        group, message, counters, on_drop = item
        try:
            task = loop.create_task(layer.group_send(group, message))
        except Exception as exc:  # a layer that cannot even start a send
            self._left_loop()
            _sent(counters, on_drop, exc)
            return
        timer = loop.call_later(SEND_TIMEOUT_SECONDS, task.cancel)
        self._loop_tasks.add(task)

        def done(task: asyncio.Task) -> None:
            self._loop_tasks.discard(task)
            timer.cancel()
            self._left_loop()
            if task.cancelled():
                _sent(counters, on_drop, TimeoutError())
            else:
                _sent(counters, on_drop, task.exception())

        task.add_done_callback(done)

    def _left_loop(self) -> None:
        with self._on_loop_lock:
            self.on_loop -= 1

    def _loop_sending(self) -> bool:
        """Messages handed to a loop that still runs are yet to be sent."""
        route = self._route
        return self.on_loop > 0 and route is not None and route[0].is_running()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queued messages to be sent (or dropped).

        Called at interpreter exit, so a short-lived process (``qprint_submit``, a script using
        ``qprint.api``) does not leave its wakeups and notices behind in the queue.
        """
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks or self._loop_sending():
            thread_stuck = self.queue.unfinished_tasks and not (
                self._thread and self._thread.is_alive()
            )
            if time.monotonic() >= deadline or thread_stuck:
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
                _sent(counters, on_drop, exc)
            else:
                _sent(counters, on_drop, None)
            finally:
                self.queue.task_done()


def _sent(
    counters: PublisherCounters | None, on_drop: OnDrop | None, error: BaseException | None
) -> None:
    """Count a message that left (``error`` None) or that the layer refused, and tell
    ``on_drop`` of a refusal."""
    if counters is not None:
        counters.add("published" if error is None else "dropped_layer_error")
    if error is not None and on_drop is not None:
        on_drop("layer_error", error)


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
