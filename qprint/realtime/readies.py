"""The ``state`` frames of a node's sockets, recorded together while a statement is on its way.

A socket's ``state`` frame (the first after its ``hello``, and one after each change the device
applied) records the revisions the device applied, marks the connection ready and renews its lease
(:func:`qprint.domain.connection.mark_ready`), and the socket waits for the row's answer before it
goes on: what it tells the device next depends on it. A connect burst brings thousands of them, and
one statement and one hand-off to a socket thread each was a node's largest database cost of a
connect after the upgrade's own statement.

The first ``state`` runs at once, alone. Those that arrive while a statement is on its way wait
for it, then run together in one (:func:`qprint.domain.connection.mark_ready_many`, at most
:data:`MAX_AT_ONCE`) on one hand-off. A lone ``state`` waits for nothing, and no ``state`` waits
longer than the statement before its own; each socket gets its own row, as if it had been recorded
alone: its state, :class:`~qprint.domain.connection.Replaced` when another connection took the
device, or the database's error.
"""

from __future__ import annotations

import asyncio
import weakref

from qprint.domain import connection
from qprint.domain.connection import DeviceState, Ready
from qprint.realtime import socket_db

#: The most ``state`` frames recorded in one statement.
MAX_AT_ONCE = 500


class Readies:
    """The ``state`` frames of one event loop (a node's process has one)."""

    def __init__(self) -> None:
        self.pending: list[tuple[Ready, asyncio.Future[DeviceState]]] = []
        self.running: asyncio.Task[None] | None = None

    async def mark(self, ready: Ready) -> DeviceState:
        future: asyncio.Future[DeviceState] = asyncio.get_running_loop().create_future()
        self.pending.append((ready, future))
        if self.running is None:
            self.running = asyncio.ensure_future(self._run())
        return await future

    async def _run(self) -> None:
        batch: list[tuple[Ready, asyncio.Future[DeviceState]]] = []
        try:
            while self.pending:
                batch = self.pending[:MAX_AT_ONCE]
                del self.pending[:MAX_AT_ONCE]
                try:
                    states = await socket_db.run(
                        connection.mark_ready_many, [ready for ready, _ in batch]
                    )
                except Exception as exc:  # each socket logs it and closes
                    _answer(batch, [exc] * len(batch))
                else:
                    _answer(batch, states)
        except BaseException:  # cancelled with the loop: nobody records the rest
            for _, future in [*batch, *self.pending]:
                future.cancel()
            self.pending.clear()
            raise
        finally:
            self.running = None


def _answer(
    batch: list[tuple[Ready, asyncio.Future[DeviceState]]],
    states: list[DeviceState | Exception | None],
) -> None:
    """Each socket's own row: its state, :class:`~qprint.domain.connection.Replaced` when the
    row names another connection, or the database's error."""
    for (ready, future), state in zip(batch, states, strict=True):
        if future.done():  # its socket closed meanwhile
            continue
        if state is None:
            state = connection.Replaced.connection(ready[0], ready[1])
        if isinstance(state, Exception):
            future.set_exception(state)
        else:
            future.set_result(state)


_of_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Readies] = (
    weakref.WeakKeyDictionary()
)


async def mark(ready: Ready) -> DeviceState:
    """:func:`qprint.domain.connection.mark_ready` with the other ``state`` frames of this
    process that arrive while a statement is on its way (called on its event loop)."""
    loop = asyncio.get_running_loop()
    readies = _of_loop.get(loop)
    if readies is None:
        readies = _of_loop[loop] = Readies()
    return await readies.mark(ready)
