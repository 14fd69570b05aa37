"""The pings of a node's sockets, renewed together.

Every ``ping`` frame renews its connection's lease and learns, in the same statement, what the
connection has not been told (``qprint.domain.connection``). One statement and one hand-off to a
socket thread per ping was most of an idle node's cost: 2,000 devices at the 20 s heartbeat ping
100 times a second. The pings that arrive within :data:`WINDOW_SECONDS` of the first one are
renewed in one statement (:func:`qprint.domain.connection.ping_many`) on one hand-off, and each
socket is answered with its own row, as if it had pinged alone: its state, None when another
connection took the device, or the database's error.

A socket does not wait for the answer: it goes on with its next frames and takes the answer as a
message of its own when it comes (``qprint.pinged``, at most :data:`WINDOW_SECONDS` plus the
statement later), so a ping never delays an event or a claim behind it. Nothing waits on a
ping's answer either: the lease it renews runs for three heartbeats, and what it learns (a wakeup
the bus lost) is the fallback that docs/REALTIME.md allows a heartbeat of delay.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Callable

from qprint.domain import connection
from qprint.domain.connection import DeviceState
from qprint.realtime import socket_db

#: How long the first ping of a batch waits for others.
WINDOW_SECONDS = 0.05
#: A batch this large is renewed at once, without waiting for the window to end.
MAX_PINGS_AT_ONCE = 500


#: What a ping is answered with: the row's state, None (replaced) or the database's error, and
#: when the statement that read it began (``time.monotonic()``).
Answer = Callable[[DeviceState | Exception | None, float], None]


class Pings:
    """The batch of pings of one event loop (a node's process has one)."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, uuid.UUID, float, Answer]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.running: set[asyncio.Task] = set()

    def renew(
        self, device_id: int, connection_id: uuid.UUID, heartbeat: float, answer: Answer
    ) -> None:
        """:func:`qprint.domain.connection.ping` with the other pings of the window; ``answer``
        is called on the loop when the statement has run."""
        self.pending.append((device_id, connection_id, heartbeat, answer))
        if len(self.pending) >= MAX_PINGS_AT_ONCE:
            self._flush()
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(WINDOW_SECONDS, self._flush)

    def _flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        batch, self.pending = self.pending, []
        if batch:
            task = asyncio.ensure_future(self._renew(batch))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    @staticmethod
    async def _renew(batch: list[tuple[int, uuid.UUID, float, Answer]]) -> None:
        began = time.monotonic()
        try:
            states: list[DeviceState | Exception | None] = list(
                await socket_db.run(connection.ping_many, [p[:3] for p in batch])
            )
        except Exception as exc:  # each socket logs it; its lease runs on until the next ping
            states = [exc] * len(batch)
        for (*_, answer), state in zip(batch, states, strict=True):
            answer(state, began)


_of_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pings] = weakref.WeakKeyDictionary()


def renew(device_id: int, connection_id: uuid.UUID, heartbeat: float, answer: Answer) -> None:
    """Renew the connection's lease with the other pings of this process (called on its event
    loop); ``answer`` gets the row's state, None when another connection took the device, or
    the database's error."""
    loop = asyncio.get_running_loop()
    pings = _of_loop.get(loop)
    if pings is None:
        pings = _of_loop[loop] = Pings()
    pings.renew(device_id, connection_id, heartbeat, answer)
