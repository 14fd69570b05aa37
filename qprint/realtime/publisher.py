"""The wakeup publisher (installed by ``QPrintConfig.ready()``).

``qprint.domain.wakeups.wake_after_commit`` hands each wakeup here after the transaction commits.
The committing request never waits for Redis: :meth:`ChannelLayerPublisher.publish` puts the
wakeup for ``qprint.device.<pk>`` on the process's bounded publisher queue
(:mod:`qprint.core.publisher`, ``QPRINT["WAKE_QUEUE_SIZE"]``), whose thread sends it with
``group_send`` (in a node whose device bus runs, the node's event loop sends it). A full queue
or a layer error drops the wakeup, counts it (``/metrics``) and logs it: the device's next
heartbeat finds what the wakeup would have said (docs/REALTIME.md).

With the in-memory layer (one node) the wakeup is handed straight to this process's sockets. With
a cross-process layer, a socket of the device in this process is handed it at once as well, ahead
of its copy through the layer, which the socket's bus drops
(:func:`qprint.realtime.bus.deliver_ahead`): a device connected to the node that took its job is
woken without a round trip through Redis. The copy is for a newer socket of the device on another
node; a socket here in push mode reads its row on the wakeup, and when the read finds that its
connection still holds the row, the copy is not sent at all (``DeviceBus.settle`` in
:mod:`qprint.realtime.bus`).

Messages carry the tenant, the device id and the time they were published (for the wake
latency), and what the wakeup's reason says of the device's queue (``queued``: a job was
queued, or a job left CLAIMED with nothing else queued): a socket that is not in push mode
answers those without reading its row (:meth:`qprint.realtime.session.DeviceSession.woken`).
"""

from __future__ import annotations

import logging
import time

from channels.layers import get_channel_layer

from qprint.core.publisher import (
    GroupPublisher,
    PublisherCounters,
    cross_process_layer,
    process_publisher,
)
from qprint.domain import wakeups
from qprint.realtime import bus

logger = logging.getLogger("qprint.publisher")


#: What a wakeup of each of these reasons says of its device's queue (:data:`bus.QUEUED`).
_QUEUED = {wakeups.JOB_QUEUED: True, wakeups.JOB_RELEASED_NOTHING_QUEUED: False}


class ChannelLayerPublisher:
    """Wakeups to the channel layer through a :class:`~qprint.core.publisher.GroupPublisher`
    (the process's own unless one is given), counted in :attr:`counters`."""

    def __init__(self, groups: GroupPublisher | None = None) -> None:
        self.groups = groups if groups is not None else process_publisher()
        self.counters = PublisherCounters()

    def publish(self, tenant: str, device_id: int, reason: str) -> None:
        message = {
            "type": "qprint.wake",
            "tenant": tenant,
            "device_id": device_id,
            "sent_at": time.time(),  # the start of qprint_wake_latency_seconds
        }
        queued = _QUEUED.get(reason)
        if queued is not None:
            message[bus.QUEUED] = queued
        if not cross_process_layer(get_channel_layer()):
            bus.deliver_locally(message)
            self.counters.add("delivered_locally")
            return

        def dropped(cause: str, error: BaseException | None) -> None:
            if cause == "queue_full":
                logger.warning(
                    "wake_dropped tenant=%s device=%s reason=%s cause=queue_full size=%d",
                    tenant,
                    device_id,
                    reason,
                    self.groups.queue.maxsize,
                )
            else:
                logger.warning(
                    "wake_dropped tenant=%s device=%s cause=layer_error error=%r",
                    tenant,
                    device_id,
                    error,
                )

        def send_copy() -> None:
            self.groups.send(
                bus.device_group(device_id), message, counters=self.counters, on_drop=dropped
            )

        # A socket of the device in this process is woken now. The layer's copy is for a newer
        # socket of the device on another node (dropped here when it comes back); while a socket
        # here reads its row on wakeups, the bus sends it only if that read says one may exist.
        if bus.deliver_ahead(message, send_copy):
            self.counters.add("delivered_locally")
        else:
            send_copy()


_installed: ChannelLayerPublisher | None = None


def install() -> ChannelLayerPublisher:
    """Install the channel-layer publisher as qprint's wakeup publisher (idempotent)."""
    global _installed
    if _installed is None:
        _installed = ChannelLayerPublisher()
    wakeups.set_publisher(_installed)
    return _installed


def installed() -> ChannelLayerPublisher | None:
    return _installed
