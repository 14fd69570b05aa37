"""The device socket's driver: Channels in, :class:`~qprint.realtime.session.DeviceSession` out.

The consumer authenticates the upgrade, reads frames and messages, runs the statements the session
asks for and writes what it answers; every decision of the protocol (what to send, when, which
close code) is the session's. Each socket handles one message at a time from two sources
(:mod:`qprint.realtime.mailbox`): the client (``websocket.*``) and its own, from this process's
:mod:`qprint.realtime.bus` (``qprint.wake``, ``qprint.replaced``, ``qprint.reconcile``), the
drain (``qprint.drain``), its heartbeat timer (``qprint.heartbeat_check``) and the answer to its
ping, renewed with the node's other pings (``qprint.pinged``, :mod:`qprint.realtime.pings`).
The upgrade and a ``state`` frame are each run with the other sockets' that arrive while a
statement is on its way (:mod:`qprint.realtime.gathered`). A message of any other type is an
error, as in Channels' own dispatch. A handler may take the client's frames that have already
arrived behind its own (the event frames the operation driver records together); any it does not
handle run next, before the client's later frames (:attr:`DeviceConsumer.held`).

The operation frames (claim, event, command result) and pushed assignments are driven by its
mixin :class:`~qprint.realtime.operation_driver.OperationDriver`; this module holds the connection's
life: the upgrade, the frames of state, the bus, the drain, the timer and the close.

Database work runs on the socket path's own threads (:mod:`qprint.realtime.socket_db`); the
consumer never touches Channels' shared sync thread (it does not call ``aclose_old_connections``
per message).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from channels.consumer import AsyncConsumer
from channels.exceptions import StopConsumer
from django.db import DatabaseError, DataError

from qprint.core import cluster, database, inputs, wire
from qprint.core.conf import qprint_settings
from qprint.core.errors import Disabled, Invalid, QPrintError, Unauthorized
from qprint.domain import (
    commands,
    connection,
    credentials,
    devices,
    throttle,
)
from qprint.domain.connection import DeviceState
from qprint.metrics import instruments
from qprint.realtime import bus, drain, gathered, pings, socket_db
from qprint.realtime.frames import (
    Close,
    OperationRequest,
    Ping,
    Plan,
    PrintersReported,
    ProtocolError,
    StateReported,
    encode,
)
from qprint.realtime.mailbox import Mailbox
from qprint.realtime.operation_driver import NOT_FETCHED, OperationDriver
from qprint.realtime.session import DeviceSession

logger = logging.getLogger("qprint.socket")


class UpgradeFailed(Exception):
    """Raised before accept: the server (Daphne) then fails the handshake with 500, never 403."""


def _header(scope: dict[str, Any], wanted: bytes) -> str | None:
    """A header of the upgrade request, its values joined with commas (None when absent)."""
    values = [v.decode("latin-1") for n, v in scope.get("headers", ()) if n.lower() == wanted]
    return ", ".join(values) if values else None


def _client_address(scope: dict[str, Any]) -> str:
    peer = (scope.get("client") or (None,))[0]
    return throttle.client_address(peer, _header(scope, b"x-forwarded-for"))


class DeviceConsumer(OperationDriver, AsyncConsumer):
    """One device socket. Lives from the upgrade to the close; the row outlives it."""

    async def __call__(self, scope, receive, send):
        self.scope = scope
        self.base_send = send
        self.device_id: int = 0
        self.label = "-"  # tenant/name in the logs, once the token names the device
        self.connection_id = uuid.uuid4()
        self.heartbeat = float(qprint_settings.HEARTBEAT_SECONDS)
        self.node = cluster.node_id()
        self.session: DeviceSession | None = None
        self.accepted = False
        self.attached = False
        self.holds_row = False
        self.closing = False
        self._timer: asyncio.TimerHandle | None = None
        self._bus: bus.DeviceBus | None = None
        #: When the last read of the row began (monotonic): a reconcile asked for an earlier
        #: moment has nothing to catch up.
        self._row_read_at = float("-inf")
        #: A ping of this socket is on its way (:mod:`qprint.realtime.pings`).
        self._ping_pending = False
        #: What the operation driver took out of turn and did not handle: run next, in order.
        self.held: collections.deque[Callable[[], Awaitable[None]]] = collections.deque()
        self.mailbox = Mailbox(receive)
        try:
            await self._dispatch_loop()
        except StopConsumer:
            pass
        finally:
            await self._release()

    async def _dispatch_loop(self) -> None:
        """One message at a time from the mailbox, with one addition to Channels' dispatch: a
        handler may take the client's messages that have already arrived (:meth:`arrived`); what
        it does not handle waits in :attr:`held` and runs before the client's next message."""
        try:
            while True:
                if self.held:
                    await self.held.popleft()()
                else:
                    await self.dispatch(await self.mailbox.next())
        finally:
            await self.mailbox.close()

    async def arrived(self) -> dict[str, Any] | None:
        """The client's next message when it has already arrived, taken out of turn (None when
        none has, or when earlier ones are held): the caller handles it or holds it."""
        return None if self.held else await self.mailbox.arrived()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Unlike AsyncConsumer.dispatch: a table, not getattr, and no aclose_old_connections()
        # on the shared sync thread.
        handler = _MESSAGE_HANDLERS.get(message["type"])
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']!r}")
        if self.closing and message["type"].startswith("qprint."):
            return  # the socket is closing: nothing more to tell the device
        await handler(self, message)

    def deliver(self, message: dict[str, Any]) -> None:
        """Queue a message from the bus, the drain or the timer (called on the socket's loop)."""
        self.mailbox.deliver(message)

    # -- upgrade ------------------------------------------------------------------------------

    async def websocket_connect(self, message: dict[str, Any]) -> None:
        if wire.SUBPROTOCOL not in self.scope.get("subprotocols", ()):
            await self._refuse(
                401, "subprotocol_required", f"Subprotocol {wire.SUBPROTOCOL} required."
            )
        token = credentials.bearer_secret(_header(self.scope, b"authorization"))
        if not token:
            await self._refuse(401, "unauthorized", "A device token is required.")
        if await drain.current().is_draining():
            await self._refuse(503, "draining", "This node is draining; connect to another.")
        presented = credentials.PresentedToken(token, _client_address(self.scope))
        try:
            device, taken = await gathered.open_socket(
                presented,
                self.connection_id,
                self.node,
                self.heartbeat,
            )
        except QPrintError as exc:  # 401 unknown, 429 a throttled wrong token, 403 disabled
            await self._refuse(exc.status, exc.code, exc.message)
        except connection.Replaced:  # deleted between the token's check and the take
            await self._refuse(401, "unauthorized", "Unknown device.")
        except Exception as exc:
            await socket_db.run(database.log_cause, exc)  # what the pool's timeout hides
            await self._refuse(503, "unavailable", f"The database did not answer: {exc!r}")
        self.device_id = device.pk
        self.tenant = device.tenant
        self.label = f"{device.tenant}/{device.name}"
        self.holds_row = True
        self.session = DeviceSession(
            device_id=device.pk,
            token_hash=device.token_hash,
            connection_id=self.connection_id,
            node=self.node,
            heartbeat_seconds=self.heartbeat,
            max_frame_bytes=int(qprint_settings.MAX_FRAME_BYTES),
            max_frames_per_second=int(qprint_settings.MAX_FRAMES_PER_SECOND),
            inline_cap=int(qprint_settings.INLINE_DOCUMENT_MAX_BYTES),
            decode=_decode,
        )
        await self.send({"type": "websocket.accept", "subprotocol": wire.SUBPROTOCOL})
        self.accepted = True
        await self._send_frame(self.session.hello(taken, time.monotonic()))
        self._bus = bus.current()
        self._bus.attach(self)
        self.attached = True
        self._arm_timer(self.session.silence_limit)
        logger.info(
            "socket_open device=%s connection=%s node=%s",
            self.label,
            self.connection_id,
            self.node,
        )
        if taken.displaced:
            # Newest wins: tell the older socket of this device, on any node, to close (best
            # effort; without the bus it learns it on its next frame). A row that named no
            # connection has no older socket to tell: nothing goes through Redis.
            replaced = {
                "type": "qprint.replaced",
                "device_id": self.device_id,
                "connection_id": str(self.connection_id),
            }
            self._publishing = asyncio.ensure_future(self._bus.publish(self.device_id, replaced))
        # The device's frames wait for its group's subscription (bounded): its `state` then reads
        # the row after any wakeup the subscription could have missed, and the subscription's
        # reconcile has nothing left to read.
        await self._bus.subscription(self.device_id)

    async def _refuse(self, status: int, code: str, text: str) -> None:
        """Refuse the upgrade. 5xx never becomes 403: agents take 403 as "ask a person"."""
        client = (self.scope.get("client") or ("unknown",))[0] or "unknown"
        logger.info(
            "socket_refused status=%s code=%s client=%s path=%s",
            status,
            code,
            client,
            self.scope.get("path", ""),
        )
        if "websocket.http.response" in self.scope.get("extensions", {}):
            body = json.dumps({"error": code, "message": text}).encode()
            await self.send(
                {
                    "type": "websocket.http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await self.send({"type": "websocket.http.response.body", "body": body})
            raise StopConsumer
        if status >= 500:  # "retry later" must not read as 403
            raise UpgradeFailed(f"{code}: {text}")
        # Daphne answers 403. A 429 is a wrong token (a right one is never throttled), refused
        # like any other wrong token: never a 500, which would tell the agent to retry.
        await self.send({"type": "websocket.close"})
        raise StopConsumer

    # -- frames from the device ------------------------------------------------------------------

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        try:
            event = self.session.receive(message.get("text"), time.monotonic())
        except ProtocolError as exc:
            await self.protocol_error(exc)
            return
        await self.handle(event)

    async def handle(self, event: Any) -> None:
        """A frame of the device, as the session read it."""
        try:
            await _EVENT_HANDLERS[type(event)](self, event)
        except ProtocolError as exc:
            await self.protocol_error(exc)
        except connection.Replaced:
            await self._close(self.session.row_taken())

    async def protocol_error(self, error: ProtocolError) -> None:
        frame, close = self.session.protocol_error(error)
        await self._send_frame(frame)
        await self._close(close)

    async def on_state(self, event: StateReported) -> None:
        first = not self.session.ready
        self._row_read_at = time.monotonic()
        try:
            state = await gathered.mark_ready(
                (
                    self.device_id,
                    self.connection_id,
                    event.control_revision,
                    event.settings_revision,
                    self.heartbeat,
                )
            )
        except connection.Replaced:
            raise
        except Exception as exc:  # not recorded: the device reconnects and reports again
            logger.warning("socket_state_failed device=%s error=%r", self.label, exc)
            await self._close(Close(wire.CLOSE_SERVER_ERROR, "database_error"))
        if first:
            logger.info("socket_ready device=%s connection=%s", self.label, self.connection_id)
        await self._carry_out(self.session.marked_ready(state, event))

    async def on_ping(self, event: Ping) -> None:
        """Renew the lease with the node's other pings (``qprint.realtime.pings``) without
        waiting: the answer comes back as ``qprint.pinged``. A ping while one is on its way adds
        nothing (that one renews the lease)."""
        if not self._ping_pending:
            self._ping_pending = True
            pings.renew(self.device_id, self.connection_id, self.heartbeat, self._pinged)

    def _pinged(self, state: DeviceState | Exception | None, read_at: float) -> None:
        self.deliver({"type": "qprint.pinged", "state": state, "read_at": read_at})

    async def on_printers(self, event: PrintersReported) -> None:
        try:
            await socket_db.run(
                devices.replace_printers,
                self.device_id,
                event.printers,
                token_hash=self.session.token_hash,  # as the HTTP API would answer it now
            )
        except (Unauthorized, Disabled):
            await self._close(self.session.revoked())
        except Invalid as exc:
            raise ProtocolError(exc.message) from exc
        except DataError as exc:  # the database refused a value the device sent
            raise ProtocolError("the database refused a value of the frame") from exc
        except DatabaseError as exc:  # an outage: the device reconnects and reports them again
            logger.warning("printers_not_recorded device=%s error=%r", self.label, exc)
            await self._close(Close(wire.CLOSE_SERVER_ERROR, "database_error"))

    # -- messages from the bus, the drain and the timer ------------------------------------------

    @property
    def reads_row_on_wakeup(self) -> bool:
        """Every wakeup makes this socket read its row (the bus's ``Socket``)."""
        return not self.closing and self.session is not None and self.session.reads_row_on_wakeup

    async def qprint_wake(self, message: dict[str, Any]) -> None:
        read = None
        try:
            queued = message.get(bus.QUEUED)
            plan = self.session.woken(queued if isinstance(queued, bool) else None)
            if plan is None:
                read = await self._reconcile()
                instruments.wakeup_handled(message, read)
            else:
                instruments.wakeup_handled(message, await self._carry_out(plan))
        finally:
            # The row was read (in push mode, in the claim's lock) and the connection held it,
            # unless the read did not happen, failed, or found it taken (which closes the socket).
            if self._bus is not None:
                self._bus.settle(message, held=read is not None)

    async def qprint_reconcile(self, message: dict[str, Any]) -> None:
        since = message.get("subscribed_at")
        if isinstance(since, float) and self._row_read_at >= since:
            return  # the row was read after the subscription: nothing was missed
        await self._reconcile()

    async def qprint_replaced(self, message: dict[str, Any]) -> None:
        close = self.session.replaced(message)
        if close is not None:
            await self._close(close)

    async def qprint_drain(self, message: dict[str, Any]) -> None:
        await self._close(self.session.draining())

    async def qprint_pinged(self, message: dict[str, Any]) -> None:
        """The answer to this socket's ping: tell the device only what changed, unless a read of
        the row that began later has planned from a newer state already."""
        self._ping_pending = False
        state, read_at = message["state"], message["read_at"]
        if state is None:
            await self._close(self.session.row_taken())
        elif isinstance(state, Exception):  # the lease runs on; the next ping tries again
            logger.warning("socket_ping_failed device=%s error=%r", self.label, state)
        elif read_at >= self._row_read_at:
            self._row_read_at = read_at
            instruments.heartbeat_reconciled(await self._carry_out(self.session.pinged(state)))

    async def qprint_heartbeat_check(self, message: dict[str, Any]) -> None:
        answer = self.session.heartbeat_check(time.monotonic())
        if isinstance(answer, Close):
            await self._close(answer)
        else:
            self._arm_timer(answer)

    async def _reconcile(self) -> bool | None:
        if not self.session.ready:
            # The device has not reported its `state` yet; the statement that records it reads
            # the row after this moment and plans from it: control, settings, commands, a wake.
            return None
        self._row_read_at = time.monotonic()
        try:
            plan, pushed = await socket_db.run(self._read_then_push)
        except connection.Replaced:
            await self._close(self.session.row_taken())
            return
        except Exception as exc:  # the heartbeat will try again
            logger.warning("socket_reconcile_failed device=%s error=%r", self.label, exc)
            return None
        return await self._carry_out(plan, pushed)

    def _read_then_push(self) -> tuple[Plan, Any]:
        """On a socket thread (the socket's task waits for it: the session is not touched
        meanwhile): read the row; a ready session in push mode reads it in the claim's own
        lock and claims in the same transaction when its plan says push
        (:meth:`OperationDriver._read_in_claim`), so a wakeup of a device in push mode costs
        one hand-off and one transaction."""
        if self.session.ready and self.session.push_inline_max is not None:
            return self._read_in_claim()
        return self.session.reconciled(connection.read(self.device_id, self.connection_id)), (
            NOT_FETCHED
        )

    # -- carrying out the session's answers -------------------------------------------------------

    async def _carry_out(self, plan: Plan, pushed: Any = NOT_FETCHED) -> bool:
        """Carry out ``plan`` (``pushed``: the push's claim, made already; ``NOT_FETCHED``: not
        yet); True when it sent a ``wake`` or pushed a job (for the metrics)."""
        if plan.close is not None:
            await self._close(plan.close)
        for frame in plan.frames:
            await self._send_frame(frame)
        if plan.read_settings:
            revision, values = await socket_db.run(
                connection.read_settings, self.device_id, self.connection_id
            )
            await self._send_frame(self.session.settings_frame(revision, values))
        if plan.deliver_commands:
            deliveries = await socket_db.run(
                commands.deliver,
                self.device_id,
                self.connection_id,
                redeliver=plan.redeliver_commands,
            )
            for frame in self.session.command_frames(deliveries):
                await self._send_frame(frame)
        for frame in plan.then:
            await self._send_frame(frame)
        if plan.push:
            if pushed is NOT_FETCHED:
                pushed = await socket_db.run(self._claim_for_push)
            return await self._send_pushed(pushed)
        return any(frame.get("type") == wire.WAKE for frame in plan.then)

    async def _send_frame(self, frame: dict[str, Any]) -> None:
        if self.accepted and not self.closing:
            await self.send({"type": "websocket.send", "text": encode(frame)})

    def _arm_timer(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self.deliver, {"type": "qprint.heartbeat_check"})

    async def _close(self, close: Close) -> None:
        if self.closing:
            return
        logger.info(
            "socket_close device=%s connection=%s code=%s reason=%s",
            self.label,
            self.connection_id,
            close.code,
            close.reason,
        )
        if not close.clear_row:
            self.holds_row = False
        await self._clear_row()  # before the close: a reconnect finds the row already free
        await self.send({"type": "websocket.close", "code": close.code})
        self.closing = True
        raise StopConsumer

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self.accepted and not self.closing:
            logger.info(
                "socket_closed_by_peer device=%s connection=%s code=%s",
                self.label,
                self.connection_id,
                message.get("code"),
            )
        raise StopConsumer

    async def _release(self) -> None:
        """Forget the socket here and, if the row still names it, on the row."""
        if self._timer is not None:
            self._timer.cancel()
        if self.attached and self._bus is not None:
            self._bus.detach(self)
            self.attached = False
        await self._clear_row()

    async def _clear_row(self) -> None:
        if self.holds_row:
            self.holds_row = False
            try:
                await socket_db.run(connection.clear, self.device_id, self.connection_id)
            except Exception as exc:  # the lease expires on its own
                logger.warning(
                    "socket_clear_failed device=%s connection=%s error=%r",
                    self.label,
                    self.connection_id,
                    exc,
                )


def _decode(text: str) -> Any:
    """A frame's JSON, within the input limits (docs/SECURITY.md, "Limits")."""
    try:
        return inputs.parse_json("frame", text)
    except Invalid as exc:
        raise ValueError(exc.message) from None


#: Channels messages -> the consumer's handler (the socket's events and its own queue's).
_MESSAGE_HANDLERS = {
    "websocket.connect": DeviceConsumer.websocket_connect,
    "websocket.receive": DeviceConsumer.websocket_receive,
    "websocket.disconnect": DeviceConsumer.websocket_disconnect,
    "qprint.wake": DeviceConsumer.qprint_wake,
    "qprint.reconcile": DeviceConsumer.qprint_reconcile,
    "qprint.replaced": DeviceConsumer.qprint_replaced,
    "qprint.drain": DeviceConsumer.qprint_drain,
    "qprint.heartbeat_check": DeviceConsumer.qprint_heartbeat_check,
    "qprint.pinged": DeviceConsumer.qprint_pinged,
}
#: The session's events (frames from the device) -> the consumer's handler.
_EVENT_HANDLERS = {
    StateReported: DeviceConsumer.on_state,
    Ping: DeviceConsumer.on_ping,
    PrintersReported: DeviceConsumer.on_printers,
    OperationRequest: DeviceConsumer.on_operation,
}
