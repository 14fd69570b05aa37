"""After-commit notices: "a webhook delivery is due" and "job X changed status".

Both are hints, never the truth: the sender polls the outbox and a waiting request re-reads the
job, so a lost notice costs latency, not correctness. A notice is published only after the
transaction commits (``transaction.on_commit``), so whoever wakes sees the row.

- In this process: callbacks registered with :func:`subscribe` run at once (a thread-safe wake
  of an event loop; they must not block).
- Across processes: with a channel layer other than the in-memory one, the notice is sent to a
  group (``qprint.webhooks`` for deliveries, ``qprint.job.<id>`` for a job) through the
  process's bounded publisher (:mod:`qprint.core.publisher`), so the committing request never
  waits for Redis. A full queue or a layer error drops the notice (logged at debug level: a
  dropped notice costs latency only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable

from channels.layers import get_channel_layer
from django.db import transaction

from qprint.core.publisher import SEND_TIMEOUT_SECONDS, cross_process_layer, process_publisher

logger = logging.getLogger("qprint.webhooks.notify")

DELIVERIES_GROUP = "qprint.webhooks"
DELIVERIES_KEY = "deliveries"

_lock = threading.Lock()
_callbacks: dict[str, set[Callable[[], None]]] = {}


def job_group(job_id) -> str:
    return f"qprint.job.{job_id}"


def job_key(job_id) -> str:
    return f"job:{job_id}"


def subscribe(key: str, callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` on every notice for ``key`` in this process; returns the unsubscribe."""
    with _lock:
        _callbacks.setdefault(key, set()).add(callback)

    def unsubscribe() -> None:
        with _lock:
            callbacks = _callbacks.get(key)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del _callbacks[key]

    return unsubscribe


def _local(key: str) -> None:
    with _lock:
        callbacks = list(_callbacks.get(key, ()))
    for callback in callbacks:
        try:
            callback()
        except Exception:
            logger.exception("notice_callback_failed key=%s", key)


def _dropped(group: str) -> Callable[[str, BaseException | None], None]:
    def dropped(cause: str, error: BaseException | None) -> None:
        logger.debug("notice_dropped group=%s cause=%s error=%r", group, cause, error)

    return dropped


def _remote(group: str, message: dict) -> None:
    if cross_process_layer(get_channel_layer()):
        process_publisher().send(group, message, on_drop=_dropped(group))


def publish_deliveries() -> None:
    """A delivery is due now (called after the commit that wrote it)."""
    _local(DELIVERIES_KEY)
    _remote(DELIVERIES_GROUP, {"type": "qprint.webhooks_due"})


def publish_job(job_id) -> None:
    """Job ``job_id`` changed status (called after the commit)."""
    _local(job_key(job_id))
    _remote(job_group(job_id), {"type": "qprint.job_changed", "job_id": str(job_id)})


def deliveries_after_commit() -> None:
    transaction.on_commit(publish_deliveries)


def job_after_commit(job_id) -> None:
    transaction.on_commit(lambda: publish_job(job_id))


@contextlib.asynccontextmanager
async def listening(key: str, group: str | None) -> AsyncIterator[asyncio.Event]:
    """An :class:`asyncio.Event` set by every notice for ``key`` (this process) and, with a
    cross-process layer, for ``group``, while the block runs. A layer that does not answer is
    ignored (the caller re-checks the database anyway)."""
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    unsubscribe = subscribe(key, lambda: loop.call_soon_threadsafe(event.set))
    layer = get_channel_layer()
    receiver: asyncio.Task | None = None
    channel = None
    if group is not None and cross_process_layer(layer):
        try:
            channel = await asyncio.wait_for(layer.new_channel(), SEND_TIMEOUT_SECONDS)
            await asyncio.wait_for(layer.group_add(group, channel), SEND_TIMEOUT_SECONDS)
            receiver = asyncio.create_task(_receive(layer, channel, event))
        except Exception as exc:
            logger.debug("notice_listen_failed group=%s error=%r", group, exc)
            channel = None
    try:
        yield event
    finally:
        unsubscribe()
        if receiver is not None:
            receiver.cancel()
            with contextlib.suppress(BaseException):
                await receiver
        if channel is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(layer.group_discard(group, channel), SEND_TIMEOUT_SECONDS)


async def _receive(layer, channel: str, event: asyncio.Event) -> None:
    while True:
        try:
            await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception:
            await asyncio.sleep(1.0)  # the layer is down: the caller's re-check covers us
            continue
        event.set()
