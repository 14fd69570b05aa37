"""A device socket's two sources of messages, read one at a time.

A socket handles the client's messages (``websocket.*``, from the server's ``receive``) and its
own (the bus's, the drain's, its timer's, delivered on the socket's loop), one at a time. Channels'
``await_many_dispatch`` waits on both with ``asyncio.wait`` and a new task for every message.
Here one task, living as long as the socket, moves the client's messages into a queue,
:meth:`Mailbox.deliver` appends the socket's own to another, and the reader waits on one future
only when both are empty: a message costs about 60 % of the CPU it did, and a socket holds 3 KiB
less (docs/PERFORMANCE.md, "The thirteenth step").

The order it keeps:

- each source's messages come out in the order they arrived;
- when both sources have messages waiting, they take turns, so neither starves the other;
- the client's messages that have already arrived can be taken out of turn (:meth:`arrived`);
- a failed ``receive`` is raised to the reader after the messages that arrived before it, and the
  client's messages stop after ``websocket.disconnect`` (nothing follows it).

It holds at most :data:`CLIENT_MESSAGES_HELD` of the client's messages. Past that it stops taking
them from the server, so the ones behind wait in the server's queue, where the web server stops
reading the socket once too many wait (``qprint.views.web_server``): a device that sends while its
socket is busy (a statement waiting on a lock) fills its own buffers and the kernel's, not the
node's memory.

No I/O of its own and nothing of Django: the server's ``receive`` is the only thing it awaits.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

Message = dict[str, Any]

#: The client's messages a mailbox holds, taken from the server and not handled yet. Each may be
#: a frame of up to 1 MiB (Daphne's message cap), and holding more makes the socket no faster: it
#: handles one at a time. A handler that takes the frames already arrived (up to the 20 events
#: recorded together) still finds all of them: the mailbox takes more from the server as they go.
CLIENT_MESSAGES_HELD = 8


class Mailbox:
    """The client's messages and the socket's own, for one reader."""

    def __init__(self, receive: Callable[[], Awaitable[Message]]) -> None:
        self._receive = receive
        self._client: collections.deque[Message] = collections.deque()
        self._own: collections.deque[Message] = collections.deque()
        self._failure: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        #: The client's reader waits on it while :data:`CLIENT_MESSAGES_HELD` are held.
        self._room: asyncio.Future[None] | None = None
        #: Whose message comes first when both have some waiting.
        self._client_first = True
        self._pump = asyncio.ensure_future(self._read_client())

    async def _read_client(self) -> None:
        try:
            while True:
                if len(self._client) >= CLIENT_MESSAGES_HELD:
                    self._room = asyncio.get_running_loop().create_future()
                    try:
                        await self._room
                    finally:
                        self._room = None
                message = await self._receive()
                self._client.append(message)
                self._wake()
                if message.get("type") == "websocket.disconnect":
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the reader raises it, after what arrived before
            self._failure = exc
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take_client(self) -> Message:
        """The client's first message; the reader takes more once half of those held are gone
        (not one at a time: the hand-off then costs a wakeup per message)."""
        message = self._client.popleft()
        room = self._room
        if room is not None and not room.done() and len(self._client) <= CLIENT_MESSAGES_HELD // 2:
            room.set_result(None)
        return message

    def deliver(self, message: Message) -> None:
        """Queue one of the socket's own messages (called on the socket's loop)."""
        self._own.append(message)
        self._wake()

    async def next(self) -> Message:
        """The next message, waiting for one when none is queued."""
        while True:
            if self._client and (self._client_first or not self._own):
                self._client_first = False
                return self._take_client()
            if self._own:
                self._client_first = True
                return self._own.popleft()
            if self._failure is not None:
                raise self._failure
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def arrived(self) -> Message | None:
        """The client's next message when it has already arrived, out of turn; None when not."""
        await asyncio.sleep(0)  # a message already in the server's queue reaches ours
        return self._take_client() if self._client else None

    async def close(self) -> None:
        """Stop reading the client (the socket is done)."""
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
