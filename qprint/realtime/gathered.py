"""The statements of a connect burst, gathered while one is on its way: the upgrades and the
``state`` frames of a node's sockets.

A socket's upgrade takes its device's connection record, its token matched in the same statement
(:func:`qprint.domain.device_operations.open_sockets`), and its first ``state`` frame (one after
each change the device applied too) records the revisions the device applied, marks the
connection ready and renews its lease (:func:`qprint.domain.connection.mark_ready`). Each socket
waits for its row's answer before it goes on: what it tells the device next depends on it. A
connect burst brings thousands of both, and one statement and one hand-off to a socket thread
each were a node's largest database cost of a connect.

For each of the two, the first call runs at once, alone. Those that arrive while its statement is
on its way wait for it, then run together in one (at most :data:`MAX_AT_ONCE`) on one hand-off.
A lone call waits for nothing, and none waits longer than the statement before its own; each
socket gets its own answer, as if its statement had run alone: its row, or the exception that
answers it (:class:`~qprint.domain.connection.Replaced` when another connection took the device,
a refused token, the database's error). Two upgrades presenting one token (one device connecting
twice) never share a statement: the later one waits for the next, so the newest still wins.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from qprint.domain import connection, credentials, device_operations
from qprint.domain.connection import DeviceState, Ready, Taken
from qprint.models import Device
from qprint.realtime import socket_db

#: The most calls run in one statement.
MAX_AT_ONCE = 500

C = TypeVar("C")
R = TypeVar("R")


class Gathered(Generic[C, R]):
    """The calls of one kind of one event loop (a node's process has one): ``many`` answers a
    list of calls, each with its result or the exception that answers it, on a socket thread;
    ``key``: calls with one key never share a statement."""

    def __init__(
        self,
        many: Callable[[list[C]], list[R | Exception]],
        key: Callable[[C], Hashable] | None = None,
    ) -> None:
        self.many = many
        self.key = key
        self.pending: list[tuple[C, asyncio.Future[R]]] = []
        self.running: asyncio.Task[None] | None = None

    async def call(self, call: C) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.pending.append((call, future))
        if self.running is None:
            self.running = asyncio.ensure_future(self._run())
        return await future

    def _next_batch(self) -> list[tuple[C, asyncio.Future[R]]]:
        """The oldest waiting calls, at most :data:`MAX_AT_ONCE`, no two of one key."""
        if self.key is None:
            batch = self.pending[:MAX_AT_ONCE]
            del self.pending[:MAX_AT_ONCE]
            return batch
        batch, rest, keys = [], [], set()
        for waiting in self.pending:
            key = self.key(waiting[0])
            if key in keys or len(batch) == MAX_AT_ONCE:
                rest.append(waiting)
            else:
                keys.add(key)
                batch.append(waiting)
        self.pending = rest
        return batch

    async def _run(self) -> None:
        batch: list[tuple[C, asyncio.Future[R]]] = []
        try:
            while self.pending:
                batch = self._next_batch()
                try:
                    answers = await socket_db.run(self.many, [call for call, _ in batch])
                except Exception as exc:  # each socket logs it and closes
                    answers = [exc] * len(batch)
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future.done():  # its socket closed meanwhile
                        continue
                    if isinstance(answer, Exception):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        except BaseException:  # cancelled with the loop: nobody runs the rest
            for _, future in [*batch, *self.pending]:
                future.cancel()
            self.pending.clear()
            raise
        finally:
            self.running = None


def _mark_ready_many(readies: list[Ready]) -> list[DeviceState | Exception]:
    """:func:`connection.mark_ready_many`, a replaced connection answered
    :class:`~qprint.domain.connection.Replaced`."""
    return [
        connection.Replaced.connection(ready[0], ready[1]) if state is None else state
        for ready, state in zip(readies, connection.mark_ready_many(readies), strict=True)
    ]


_of_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Gathered]] = (
    weakref.WeakKeyDictionary()
)


def _gathered(kind: str) -> Gathered:
    """This event loop's :class:`Gathered` of ``kind`` (``readies`` or ``upgrades``)."""
    loop = asyncio.get_running_loop()
    of_loop = _of_loop.get(loop)
    if of_loop is None:
        of_loop = _of_loop[loop] = {
            "readies": Gathered(_mark_ready_many),
            "upgrades": Gathered(
                device_operations.open_sockets, key=lambda upgrade: upgrade[0].token_hash
            ),
        }
    return of_loop[kind]


async def mark_ready(ready: Ready) -> DeviceState:
    """:func:`qprint.domain.connection.mark_ready` with the other ``state`` frames of this
    process that arrive while a statement is on its way (called on its event loop)."""
    return await _gathered("readies").call(ready)


async def open_socket(
    presented: credentials.PresentedToken,
    connection_id: uuid.UUID,
    node: str,
    heartbeat_seconds: float,
) -> tuple[Device, Taken]:
    """:func:`qprint.domain.device_operations.open_socket` with the other upgrades of this
    process that arrive while a statement is on its way (called on its event loop)."""
    return await _gathered("upgrades").call((presented, connection_id, node, heartbeat_seconds))
