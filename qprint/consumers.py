"""The device socket, wire v1 (SPEC 3.6): a thin transport over the connection record.

It parses frames, authenticates the upgrade, and maps the answers of ``qprint.connection`` (the
row) to frames and close codes; it holds no business rule. Each socket handles one message at a
time from two sources: the client (``websocket.*``) and its own queue, fed by this process's
:mod:`qprint.bus` (``qprint.wake``, ``qprint.replaced``, ``qprint.reconcile``), the drain
(``qprint.drain``) and its heartbeat timer (``qprint.heartbeat_check``).

Database work runs on the socket path's own threads (:mod:`qprint.socket_db`); the consumer never
touches Channels' shared sync thread (it does not call ``aclose_old_connections`` per message).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer
from channels.utils import await_many_dispatch

from qcluster import identity
from qprint import api, bus, command_delivery, connection, credentials, drain, metrics, socket_db
from qprint.conf import qprint_settings
from qprint.errors import Invalid

logger = logging.getLogger("qprint.socket")

SUBPROTOCOL = "qprint.v1"

CLOSE_REPLACED = 4000
CLOSE_DISABLED = 4001
CLOSE_DRAINING = 4003
CLOSE_PROTOCOL_ERROR = 4400
CLOSE_HEARTBEAT_MISSED = 4408
CLOSE_SERVER_ERROR = 1011

CLIENT_FRAMES = frozenset({"state", "ping", "printers"})


class UpgradeFailed(Exception):
    """Raised before accept: the server (Daphne) then fails the handshake with 500, never 403."""


class ProtocolError(Exception):
    """A frame the device must not send: close 4400, change nothing."""


def _bearer(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            text = value.decode("latin-1").strip()
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""


def _revision(frame: dict[str, Any], name: str) -> int:
    value = frame.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{name} must be a non-negative integer")
    return value


class DeviceConsumer(AsyncConsumer):
    """One device socket. Lives from the upgrade to the close; the row outlives it."""

    async def __call__(self, scope, receive, send):
        self.scope = scope
        self.base_send = send
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.device_id: int = 0
        self.connection_id = uuid.uuid4()
        self.heartbeat = float(qprint_settings.HEARTBEAT_SECONDS)
        self.node = identity.node_id()
        self.accepted = False
        self.attached = False
        self.holds_row = False
        self.closing = False
        self.ready = False
        self.sent_control: tuple[int, bool] = (0, False)
        self.sent_settings_revision = 0
        self.woken_claim: str | None = None
        self.last_frame_at = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._bus: bus.DeviceBus | None = None
        try:
            await await_many_dispatch([receive, self.inbox.get], self.dispatch)
        except StopConsumer:
            pass
        finally:
            await self._release()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Unlike AsyncConsumer.dispatch: no aclose_old_connections() on the shared sync thread.
        handler = getattr(self, get_handler_name(message), None)
        if handler is not None and not (self.closing and message["type"].startswith("qprint.")):
            await handler(message)

    def deliver(self, message: dict[str, Any]) -> None:
        """Queue a message from the bus, the drain or the timer (called on the socket's loop)."""
        self.inbox.put_nowait(message)

    # -- upgrade ------------------------------------------------------------------------------

    async def websocket_connect(self, message: dict[str, Any]) -> None:
        if SUBPROTOCOL not in self.scope.get("subprotocols", ()):
            await self._refuse(401, "subprotocol_required", f"Subprotocol {SUBPROTOCOL} required.")
        token = _bearer(self.scope)
        if not token:
            await self._refuse(401, "unauthorized", "A device token is required.")
        if await drain.current().is_draining():
            await self._refuse(503, "draining", "This node is draining; connect to another.")
        try:
            device = await socket_db.run(credentials.device_for_token, token)
        except Exception as exc:
            await self._refuse(503, "unavailable", f"The database did not answer: {exc!r}")
        if device is None:
            await self._refuse(401, "unauthorized", "Unknown device token.")
        if not device.enabled:
            await self._refuse(403, "disabled", "The device is disabled.")
        self.device_id = device.pk
        self.tenant = device.tenant
        self.token_hash = device.token_hash
        try:
            taken = await socket_db.run(
                connection.take, device.pk, self.connection_id, self.node, self.heartbeat
            )
        except connection.Replaced:
            await self._refuse(401, "unauthorized", "Unknown device.")
        except Exception as exc:
            await self._refuse(503, "unavailable", f"The database did not answer: {exc!r}")
        self.holds_row = True
        await self.send({"type": "websocket.accept", "subprotocol": SUBPROTOCOL})
        self.accepted = True
        self.sent_control = (taken.control_revision, taken.paused)
        self.sent_settings_revision = taken.settings_revision
        await self._send_frame(
            {
                "type": "hello",
                "connection_id": str(self.connection_id),
                "node": self.node,
                "heartbeat_seconds": int(self.heartbeat)
                if self.heartbeat == int(self.heartbeat)
                else self.heartbeat,
                "control": {"revision": taken.control_revision, "paused": taken.paused},
                "settings": {"revision": taken.settings_revision, "values": taken.settings},
            }
        )
        self._bus = bus.current()
        self._bus.attach(self)
        self.attached = True
        self._arm_timer(self.heartbeat * connection.LEASE_HEARTBEATS)
        logger.info(
            "socket_open device=%s tenant=%s connection=%s node=%s",
            self.device_id,
            self.tenant,
            self.connection_id,
            self.node,
        )
        # Newest wins: tell an older socket of this device, on any node, to close (best effort;
        # without the bus the old socket learns it on its next frame).
        replaced = {
            "type": "qprint.replaced",
            "device_id": self.device_id,
            "connection_id": str(self.connection_id),
        }
        self._publishing = asyncio.ensure_future(self._bus.publish(self.device_id, replaced))

    async def _refuse(self, status: int, code: str, text: str) -> None:
        """Refuse the upgrade. 5xx never becomes 403: agents take 403 as "ask a person"."""
        logger.info("socket_refused status=%s code=%s", status, code)
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
        if status >= 500:
            raise UpgradeFailed(f"{code}: {text}")
        await self.send({"type": "websocket.close"})  # Daphne answers 403
        raise StopConsumer

    # -- frames from the device ------------------------------------------------------------------

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        self.last_frame_at = time.monotonic()
        try:
            frame = self._parse(message)
            handler = getattr(self, f"frame_{frame['type']}")
            await handler(frame)
        except ProtocolError as exc:
            await self._send_frame({"type": "error", "code": "protocol_error", "message": str(exc)})
            await self._close(CLOSE_PROTOCOL_ERROR, reason=f"protocol_error {exc}")
        except connection.Replaced:
            await self._close(CLOSE_REPLACED, reason="replaced", clear=False)

    def _parse(self, message: dict[str, Any]) -> dict[str, Any]:
        text = message.get("text")
        if text is None:
            raise ProtocolError("frames are JSON text")
        if len(text.encode("utf-8")) > int(qprint_settings.MAX_FRAME_BYTES):
            raise ProtocolError(f"frame larger than {qprint_settings.MAX_FRAME_BYTES} bytes")
        try:
            frame = json.loads(text)
        except ValueError as exc:
            raise ProtocolError("frame is not JSON") from exc
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            raise ProtocolError('a frame is an object with a "type"')
        if frame["type"] not in CLIENT_FRAMES:
            raise ProtocolError(f"unknown frame type {frame['type']!r}")
        if not self.ready and frame["type"] != "state":
            raise ProtocolError("the first frame must be state")
        return frame

    async def frame_state(self, frame: dict[str, Any]) -> None:
        control = _revision(frame, "control_revision")
        settings = _revision(frame, "settings_revision")
        if control > self.sent_control[0] or settings > self.sent_settings_revision:
            raise ProtocolError("applied revisions above those the server sent")
        first = not self.ready
        try:
            state = await socket_db.run(
                connection.mark_ready,
                self.device_id,
                self.connection_id,
                control,
                settings,
                self.heartbeat,
            )
        except connection.Replaced:
            raise
        except Exception as exc:  # not recorded: the device reconnects and reports again
            logger.warning("socket_state_failed device=%s error=%r", self.device_id, exc)
            await self._close(CLOSE_SERVER_ERROR, reason="database_error")
        self.ready = True
        if first:
            logger.info("socket_ready device=%s connection=%s", self.device_id, self.connection_id)
        await self._tell(state, wake=True, redeliver_commands=first)

    async def frame_ping(self, frame: dict[str, Any]) -> None:
        try:
            state = await socket_db.run(
                connection.ping, self.device_id, self.connection_id, self.heartbeat
            )
        except connection.Replaced:
            raise
        except Exception as exc:  # the lease runs on; the next ping tries again
            logger.warning("socket_ping_failed device=%s error=%r", self.device_id, exc)
            return
        metrics.heartbeat_reconciled(await self._tell(state, wake=False))

    async def frame_printers(self, frame: dict[str, Any]) -> None:
        printers = frame.get("printers")
        if not isinstance(printers, list) or not all(
            isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"] for p in printers
        ):
            raise ProtocolError("printers must be a list of objects with a name")
        try:
            await socket_db.run(api.replace_printers, self.device_id, printers)
        except Invalid as exc:
            raise ProtocolError(exc.message) from exc

    # -- messages from the bus, the drain and the timer ------------------------------------------

    async def qprint_wake(self, message: dict[str, Any]) -> None:
        metrics.wakeup_handled(message, await self._reconcile(wake=True))

    async def qprint_reconcile(self, message: dict[str, Any]) -> None:
        await self._reconcile(wake=True)

    async def qprint_replaced(self, message: dict[str, Any]) -> None:
        if message.get("connection_id") != str(self.connection_id):
            await self._close(CLOSE_REPLACED, reason="replaced", clear=False)

    async def qprint_drain(self, message: dict[str, Any]) -> None:
        await self._close(CLOSE_DRAINING, reason="node_draining")

    async def qprint_heartbeat_check(self, message: dict[str, Any]) -> None:
        limit = self.heartbeat * connection.LEASE_HEARTBEATS
        silent = time.monotonic() - self.last_frame_at
        if silent >= limit:
            reason = f"heartbeat_missed silent={silent:.1f}"
            await self._close(CLOSE_HEARTBEAT_MISSED, reason=reason)
        else:
            self._arm_timer(limit - silent)

    async def _reconcile(self, *, wake: bool) -> bool | None:
        try:
            state = await socket_db.run(connection.read, self.device_id, self.connection_id)
        except connection.Replaced:
            await self._close(CLOSE_REPLACED, reason="replaced", clear=False)
            return
        except Exception as exc:  # the heartbeat will try again
            logger.warning("socket_reconcile_failed device=%s error=%r", self.device_id, exc)
            return None
        return await self._tell(state, wake=wake)

    # -- telling the device what the row says ------------------------------------------------------

    async def _tell(
        self, state: connection.DeviceState, *, wake: bool, redeliver_commands: bool = False
    ) -> bool | None:
        """Send what the row says that this socket has not told the device yet; True when it
        sent a wake frame."""
        if not state.enabled or state.token_hash != self.token_hash:
            await self._close(CLOSE_DISABLED, reason="disabled_or_revoked")
            return
        control = (state.control_revision, state.paused)
        if control != self.sent_control and state.control_revision >= self.sent_control[0]:
            self.sent_control = control
            await self._send_frame(
                {"type": "control", "revision": state.control_revision, "paused": state.paused}
            )
        if state.settings_revision > self.sent_settings_revision:
            revision, values = await socket_db.run(
                connection.read_settings, self.device_id, self.connection_id
            )
            self.sent_settings_revision = revision
            await self._send_frame({"type": "settings", "revision": revision, "values": values})
        if not self.ready:
            return
        if state.command_pending or redeliver_commands:
            deliveries = await socket_db.run(
                command_delivery.deliver,
                self.device_id,
                self.connection_id,
                redeliver=redeliver_commands,
            )
            for d in deliveries:
                await self._send_frame(
                    {
                        "type": "command",
                        "command_id": d.command_id,
                        "command_type": d.type,
                        "payload": d.payload,
                    }
                )
        if not state.gate_open:
            return
        waiting = state.job_queued and state.claimed_job_id is None
        unannounced = state.claimed_job_id is not None and state.claimed_job_id != self.woken_claim
        if waiting or unannounced or (wake and (state.job_queued or state.claimed_job_id)):
            self.woken_claim = state.claimed_job_id
            await self._send_frame({"type": "wake"})
            return True
        return False

    # -- plumbing ---------------------------------------------------------------------------

    async def _send_frame(self, frame: dict[str, Any]) -> None:
        if self.accepted and not self.closing:
            await self.send({"type": "websocket.send", "text": json.dumps(frame)})

    def _arm_timer(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self.deliver, {"type": "qprint.heartbeat_check"})

    async def _close(self, code: int, *, reason: str, clear: bool = True) -> None:
        if self.closing:
            return
        logger.info(
            "socket_close device=%s connection=%s code=%s reason=%s",
            self.device_id,
            self.connection_id,
            code,
            reason,
        )
        if not clear:
            self.holds_row = False
        await self._clear_row()  # before the close: a reconnect finds the row already free
        await self.send({"type": "websocket.close", "code": code})
        self.closing = True
        raise StopConsumer

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self.accepted and not self.closing:
            logger.info(
                "socket_closed_by_peer device=%s connection=%s code=%s",
                self.device_id,
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
                    self.device_id,
                    self.connection_id,
                    exc,
                )
