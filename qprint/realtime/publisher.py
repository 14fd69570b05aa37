"""The bounded background wakeup publisher (installed by ``QPrintConfig.ready()``).

``qprint.domain.wakeups.wake_after_commit`` hands each wakeup here after the transaction commits.
The committing request never waits for Redis: :meth:`ChannelLayerPublisher.publish` only puts the
wakeup on a bounded queue (``QPRINT["WAKE_QUEUE_SIZE"]``); one daemon thread with its own event
loop sends it with ``group_send`` to ``qprint.device.<pk>``. A full queue or a layer error drops
the wakeup, counts it and logs it: the device's next heartbeat finds what the wakeup would have
said (docs/REALTIME.md).

With the in-memory layer (one node) the wakeup is handed straight to this process's sockets.
Messages carry the tenant, the device id and the time they were published (for the wake
latency); the socket reads the row.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from channels.layers import InMemoryChannelLayer, get_channel_layer

from qprint.core.conf import DEFAULTS, qprint_settings
from qprint.realtime import bus

logger = logging.getLogger("qprint.publisher")

#: How long one group_send may take before the wakeup is dropped.
SEND_TIMEOUT_SECONDS = 1.0
#: How long a process that exits waits for its queued wakeups.
EXIT_FLUSH_SECONDS = 2.0


@dataclass
class PublisherCounters:
    queued: int = 0
    published: int = 0
    delivered_locally: int = 0
    dropped_queue_full: int = 0
    dropped_layer_error: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


class ChannelLayerPublisher:
    """Wakeups to the channel layer from a bounded queue, on a thread of its own."""

    def __init__(self, queue_size: int | None = None) -> None:
        self.queue: queue.Queue[dict] = queue.Queue(maxsize=queue_size or _configured_queue_size())
        self.counters = PublisherCounters()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    def publish(self, tenant: str, device_id: int, reason: str) -> None:
        message = {
            "type": "qprint.wake",
            "tenant": tenant,
            "device_id": device_id,
            "sent_at": time.time(),  # the start of qprint_wake_latency_seconds
        }
        layer = get_channel_layer()
        if layer is None or isinstance(layer, InMemoryChannelLayer):
            bus.deliver_locally(message)
            self.counters.add("delivered_locally")
            return
        try:
            self.queue.put_nowait(message)
        except queue.Full:
            self.counters.add("dropped_queue_full")
            logger.warning(
                "wake_dropped tenant=%s device=%s reason=%s cause=queue_full size=%d",
                tenant,
                device_id,
                reason,
                self.queue.maxsize,
            )
            return
        self.counters.add("queued")
        self._ensure_thread()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queued wakeups to be sent (or dropped).

        Called at interpreter exit, so a short-lived process (``qprint_submit``, a script using
        ``qprint.api``) does not leave its wakeups behind in the queue.
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
                    target=self._run, name="qprint-wake-publisher", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        # A daemon thread blocking on the queue itself (not an executor thread: the interpreter
        # joins those at exit, and a blocked one would keep a stopping node alive).
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        layer = get_channel_layer()
        while True:
            message = self.queue.get()
            try:
                loop.run_until_complete(
                    asyncio.wait_for(
                        layer.group_send(bus.device_group(message["device_id"]), message),
                        SEND_TIMEOUT_SECONDS,
                    )
                )
            except Exception as exc:
                self.counters.add("dropped_layer_error")
                logger.warning(
                    "wake_dropped tenant=%s device=%s cause=layer_error error=%r",
                    message["tenant"],
                    message["device_id"],
                    exc,
                )
            else:
                self.counters.add("published")
            finally:
                self.queue.task_done()


def _configured_queue_size() -> int:
    """``QPRINT["WAKE_QUEUE_SIZE"]``; a bad value falls back to the default here, and
    ``manage.py check`` names it (qprint's settings checks) instead of a crash at start-up."""
    try:
        return max(1, int(qprint_settings.WAKE_QUEUE_SIZE))
    except (TypeError, ValueError):
        return DEFAULTS["WAKE_QUEUE_SIZE"]


_installed: ChannelLayerPublisher | None = None


def install() -> ChannelLayerPublisher:
    """Install the channel-layer publisher as qprint's wakeup publisher (idempotent)."""
    from qprint.domain import wakeups

    global _installed
    if _installed is None:
        _installed = ChannelLayerPublisher()
        atexit.register(_installed.flush, EXIT_FLUSH_SECONDS)
    wakeups.set_publisher(_installed)
    return _installed


def installed() -> ChannelLayerPublisher | None:
    return _installed
