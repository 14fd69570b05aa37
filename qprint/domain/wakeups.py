"""The one way to wake a device: ``wake_after_commit(tenant, device_id)``.

Every change a device must learn about (a job, a pause, new settings, a command) calls it inside
the transaction that made the change; the wakeup leaves only after that transaction commits, so a
device never claims before the job is visible. Delivery is best effort by design: a lost wakeup is
caught by the device's next heartbeat (see docs/REALTIME.md).

The publisher is pluggable so the realtime layer can route wakeups over the channel layer; the
default only records what was asked for (useful to tests and to a node without sockets).
"""

import collections
import logging
from typing import Protocol

from django.db import transaction

logger = logging.getLogger("qprint.wakeups")

#: A job of the device was queued (a submission, a reprint): claimable once its transaction
#: commits. A socket that only tells its device when to claim wakes it without reading the row
#: when the claim gate was open for the last row it read (docs/REALTIME.md, "Wakeups").
JOB_QUEUED = "job_queued"
#: A job left CLAIMED (its device may claim the next one).
JOB_RELEASED = "job_released"
#: A job left CLAIMED, and the statement that moved it found no other job of the device to
#: claim. A socket that only tells its device when to claim (not in push mode) has nothing to
#: read the device's row for: a job committed after that statement publishes its own wakeup.
#: A socket in push mode reads it all the same (docs/REALTIME.md, "Wakeups").
JOB_RELEASED_NOTHING_QUEUED = "job_released_nothing_queued"


class WakePublisher(Protocol):
    def publish(self, tenant: str, device_id: int, reason: str) -> None:
        """Hand one wakeup over for delivery. Must not block on the network."""


class RecordingPublisher:
    """Keeps the last wakeups asked for, in memory; delivers nothing."""

    def __init__(self, maxlen: int = 1000) -> None:
        self.recorded: collections.deque[tuple[str, int, str]] = collections.deque(maxlen=maxlen)

    def publish(self, tenant: str, device_id: int, reason: str) -> None:
        self.recorded.append((tenant, device_id, reason))


_publisher: WakePublisher = RecordingPublisher()


def get_publisher() -> WakePublisher:
    return _publisher


def set_publisher(publisher: WakePublisher) -> WakePublisher:
    """Install ``publisher``; returns the previous one (so tests can put it back)."""
    global _publisher
    previous, _publisher = _publisher, publisher
    return previous


def wake_after_commit(tenant: str, device_id: int, reason: str = "wake") -> None:
    """Wake the device once the current transaction commits (at once outside a transaction)."""
    transaction.on_commit(lambda: _publish(tenant, device_id, reason))


def _publish(tenant: str, device_id: int, reason: str) -> None:
    try:
        _publisher.publish(tenant, device_id, reason)
    except Exception:  # a wakeup is best effort; the heartbeat catches what is lost
        logger.exception(
            "wake_publish_failed tenant=%s device=%s reason=%s", tenant, device_id, reason
        )
