"""The device session, wire v1 (docs/PROTOCOL.md): what to send the device, and when. No I/O.

Like the agent's ``qprint.agent.protocol``, this is a state machine in the style of h11 and
wsproto: the driver (:mod:`qprint.realtime.consumer`) hands it what happened (a frame from the
device, the row a statement returned, a message from the bus) and it answers with what to do: the
frames to send, a close code, the statement to run next. Nothing here reads a socket, a clock or
the database, so every rule of the session is tested without them
(``tests/qprint/realtime/test_session.py``).

What it remembers of one connection:

- what it has told the device (the control and settings revisions sent), so a change is sent
  once and a revision is never sent backwards;
- whether the device reported its state (``ready``: the first ``state`` frame);
- the claimed job it last woke the device for, so a job held since before a reconnect is
  announced once;
- when the device last sent a frame (the driver passes the monotonic time in).

``wake`` is sent only when the claim gate (:func:`qprint.core.gate.refusal`) is open for the
row the last statement returned: the device is never woken for a claim that would be refused.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qprint.core import gate, inputs
from qprint.core.errors import Invalid
from qprint.domain.connection import LEASE_HEARTBEATS, DeviceState, Taken

SUBPROTOCOL = "qprint.v1"

CLOSE_REPLACED = 4000
CLOSE_DISABLED = 4001
CLOSE_DRAINING = 4003
CLOSE_PROTOCOL_ERROR = 4400
CLOSE_HEARTBEAT_MISSED = 4408
CLOSE_SERVER_ERROR = 1011

#: Operations a device may send as frames instead of HTTP requests (``hello.operations``).
OPERATIONS = ("claim", "event", "command_result")
#: Frames a device may send.
CLIENT_FRAMES = frozenset({"state", "ping", "printers", *OPERATIONS})
MAX_REQUEST_ID = 64
#: Fields of an ``event`` frame that are the HTTP event body (``event_type`` is its ``type``).
_EVENT_FIELDS = ("event_id", "claim_id", "occurred_at", "message", "detail")
#: A device may send this many seconds' worth of ``MAX_FRAMES_PER_SECOND`` at once.
FRAME_BURST_SECONDS = 5


class ProtocolError(Exception):
    """A frame the device must not send: close 4400, change nothing."""


@dataclass(frozen=True)
class OperationRequest:
    """An operation frame, parsed: ``operation`` one of :data:`OPERATIONS`, ``target`` the job or
    command id, ``body`` what the HTTP API would have received as the request body. The driver
    answers it through :mod:`qprint.domain.device_operations`, as the HTTP API does."""

    operation: str
    request_id: str
    target: str | None = None
    body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Close:
    code: int
    reason: str
    #: False when the row no longer names this connection (nothing of ours to clear).
    clear_row: bool = True


@dataclass
class Plan:
    """What to do after a statement returned the row: carried out in this order."""

    close: Close | None = None
    #: Sent first (a control change).
    frames: list[dict[str, Any]] = field(default_factory=list)
    #: Read the settings (:func:`qprint.domain.connection.read_settings`), then send
    #: :meth:`DeviceSession.settings_frame` of what was read.
    read_settings: bool = False
    #: Deliver the device's commands (:func:`qprint.domain.commands.deliver`), then send
    #: :meth:`DeviceSession.command_frames` of what was delivered.
    deliver_commands: bool = False
    redeliver_commands: bool = False
    #: Sent last (the ``wake``).
    then: list[dict[str, Any]] = field(default_factory=list)


def revision(frame: dict[str, Any], name: str) -> int:
    value = frame.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{name} must be a non-negative integer")
    return value


def encode(frame: dict[str, Any]) -> str:
    return json.dumps(frame)


class DeviceSession:
    """One device connection, from ``hello`` to the close."""

    def __init__(
        self,
        *,
        device_id: int,
        token_hash: str,
        connection_id: uuid.UUID,
        node: str,
        heartbeat_seconds: float,
        max_frame_bytes: int,
        max_frames_per_second: int = 50,
    ) -> None:
        self.device_id = device_id
        self.token_hash = token_hash
        self.connection_id = connection_id
        self.node = node
        self.heartbeat_seconds = heartbeat_seconds
        self.max_frame_bytes = max_frame_bytes
        self.ready = False
        self.sent_control: tuple[int, bool] = (0, False)
        self.sent_settings_revision = 0
        self.woken_claim: str | None = None
        self.last_frame_at = 0.0
        self.max_frames_per_second = max_frames_per_second
        self._tokens = float(max_frames_per_second * FRAME_BURST_SECONDS)
        self._tokens_at: float | None = None

    def _allowance(self, now: float) -> bool:
        """A token bucket: ``max_frames_per_second`` on average, bursts of
        :data:`FRAME_BURST_SECONDS` worth. False when the device floods the socket."""
        capacity = self.max_frames_per_second * FRAME_BURST_SECONDS
        if self._tokens_at is not None:
            elapsed = max(0.0, now - self._tokens_at)
            self._tokens = min(capacity, self._tokens + elapsed * self.max_frames_per_second)
        self._tokens_at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    # -- the start ------------------------------------------------------------------------------

    def hello(self, taken: Taken, now: float) -> dict[str, Any]:
        """The ``hello`` frame for the row the connection took; remembers what it tells."""
        self.sent_control = (taken.control_revision, taken.paused)
        self.sent_settings_revision = taken.settings_revision
        self.last_frame_at = now
        heartbeat = self.heartbeat_seconds
        return {
            "type": "hello",
            "connection_id": str(self.connection_id),
            "node": self.node,
            "heartbeat_seconds": int(heartbeat) if heartbeat == int(heartbeat) else heartbeat,
            "control": {"revision": taken.control_revision, "paused": taken.paused},
            "settings": {"revision": taken.settings_revision, "values": taken.settings},
            "operations": list(OPERATIONS),
            "active_jobs": [
                {"job_id": job_id, "claim_id": claim_id, "status": status}
                for job_id, claim_id, status in taken.active_jobs
            ],
        }

    # -- frames from the device -------------------------------------------------------------------

    def receive(self, text: str | None, now: float) -> dict[str, Any]:
        """Parse a frame from the device; :class:`ProtocolError` when it must not be sent."""
        self.last_frame_at = now
        if text is None:
            raise ProtocolError("frames are JSON text")
        if not self._allowance(now):
            raise ProtocolError(f"more than {self.max_frames_per_second} frames per second")
        if len(text) > self.max_frame_bytes or (
            len(text.encode("utf-8", "surrogatepass")) > self.max_frame_bytes
        ):
            raise ProtocolError(f"frame larger than {self.max_frame_bytes} bytes")
        try:
            frame = inputs.parse_json("frame", text)
        except Invalid as exc:
            raise ProtocolError(exc.message) from exc
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            raise ProtocolError('a frame is an object with a "type"')
        if frame["type"] not in CLIENT_FRAMES:
            raise ProtocolError(f"unknown frame type {frame['type']!r}")
        if not self.ready and frame["type"] != "state":
            raise ProtocolError("the first frame must be state")
        return frame

    def applied_revisions(self, frame: dict[str, Any]) -> tuple[int, int]:
        """The control and settings revisions a ``state`` frame reports as applied."""
        control = revision(frame, "control_revision")
        settings = revision(frame, "settings_revision")
        if control > self.sent_control[0] or settings > self.sent_settings_revision:
            raise ProtocolError("applied revisions above those the server sent")
        return control, settings

    @staticmethod
    def printers(frame: dict[str, Any]) -> Any:
        """The printer list of a ``printers`` frame (checked by the domain)."""
        return frame.get("printers")

    @staticmethod
    def protocol_error(error: ProtocolError) -> tuple[dict[str, Any], Close]:
        """The ``error`` frame to send, then the close (4400)."""
        frame = {"type": "error", "code": "protocol_error", "message": str(error)}
        return frame, Close(CLOSE_PROTOCOL_ERROR, f"protocol_error {error}")

    # -- operations (docs/PROTOCOL.md, "Operations over the socket") -----------------------------

    @staticmethod
    def operation(frame: dict[str, Any]) -> OperationRequest:
        """The request in a ``claim``, ``event`` or ``command_result`` frame. A malformed one
        (no valid ``request_id``, no job or command id) is a :class:`ProtocolError`; what the
        body says is the domain's to judge, and a refusal is an answer."""
        request_id = frame.get("request_id")
        if not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_REQUEST_ID:
            raise ProtocolError(f"request_id must be a string of 1 to {MAX_REQUEST_ID} characters")
        kind = frame["type"]
        if kind == "claim":
            return OperationRequest("claim", request_id)
        if kind == "event":
            job_id = frame.get("job_id")
            if not isinstance(job_id, str) or not job_id:
                raise ProtocolError("an event frame names its job_id (a string)")
            body = {name: frame[name] for name in _EVENT_FIELDS if name in frame}
            if "event_type" in frame:
                body["type"] = frame["event_type"]
            return OperationRequest("event", request_id, job_id, body)
        command_id = frame.get("command_id")
        if not isinstance(command_id, str) or not command_id:
            raise ProtocolError("a command_result frame names its command_id (a string)")
        body = {name: frame[name] for name in ("status", "result") if name in frame}
        return OperationRequest("command_result", request_id, command_id, body)

    @staticmethod
    def answer(request: OperationRequest, status: int, body: dict[str, Any] | None) -> dict:
        """The frame answering ``request`` with the HTTP API's status and body (None: 204)."""
        rid = request.request_id
        if request.operation == "claim":
            if body is None:
                return {"type": "nothing", "request_id": rid}
            return {**body, "type": "assignment", "request_id": rid}
        if request.operation == "event":
            return {"type": "event_recorded", "request_id": rid, "status": status, "event": body}
        return {"type": "command_recorded", "request_id": rid, "status": status, "command": body}

    @staticmethod
    def refused(request: OperationRequest, status: int, code: str, message: str) -> dict:
        """The ``refused`` frame: the HTTP status and error the HTTP API would have answered. The
        socket stays open."""
        return {
            "type": "refused",
            "request_id": request.request_id,
            "status": status,
            "error": code,
            "message": message,
        }

    # -- what the row says -------------------------------------------------------------------------

    def marked_ready(self, state: DeviceState) -> Plan:
        """The row after the ``state`` frame was recorded. The first one makes the connection
        ready and hands the device its open commands again (it may have lost them)."""
        first = not self.ready
        self.ready = True
        return self.plan(state, wake=True, redeliver_commands=first)

    def pinged(self, state: DeviceState) -> Plan:
        """The row after a ``ping`` renewed the lease: tell only what changed."""
        return self.plan(state, wake=False)

    def reconciled(self, state: DeviceState) -> Plan:
        """The row read after a wakeup or a reconcile: wake the device if it may claim."""
        return self.plan(state, wake=True)

    def plan(self, state: DeviceState, *, wake: bool, redeliver_commands: bool = False) -> Plan:
        """What the row says that this connection has not told the device yet."""
        if not state.enabled or not hmac.compare_digest(state.token_hash or "", self.token_hash):
            return Plan(close=self.revoked())
        plan = Plan()
        control = (state.control_revision, state.paused)
        if control != self.sent_control and state.control_revision >= self.sent_control[0]:
            self.sent_control = control
            plan.frames.append(
                {"type": "control", "revision": state.control_revision, "paused": state.paused}
            )
        plan.read_settings = state.settings_revision > self.sent_settings_revision
        if not self.ready:
            return plan
        plan.deliver_commands = state.command_pending or redeliver_commands
        plan.redeliver_commands = redeliver_commands
        if gate.is_open(state) and self._should_wake(state, wake):
            self.woken_claim = state.claimed_job_id
            plan.then.append({"type": "wake"})
        return plan

    def _should_wake(self, state: DeviceState, asked: bool) -> bool:
        waiting = state.job_queued and state.claimed_job_id is None
        unannounced = state.claimed_job_id is not None and state.claimed_job_id != self.woken_claim
        return (
            waiting or unannounced or (asked and (state.job_queued or bool(state.claimed_job_id)))
        )

    def settings_frame(self, settings_revision: int, values: dict[str, Any]) -> dict[str, Any]:
        self.sent_settings_revision = settings_revision
        return {"type": "settings", "revision": settings_revision, "values": values}

    @staticmethod
    def command_frames(deliveries: Iterable[Any]) -> list[dict[str, Any]]:
        return [
            {
                "type": "command",
                "command_id": d.command_id,
                "command_type": d.type,
                "payload": d.payload,
            }
            for d in deliveries
        ]

    # -- messages from the bus, the drain and the timer --------------------------------------------

    def replaced(self, message: dict[str, Any]) -> Close | None:
        """A ``replaced`` message: close 4000 unless it announces this very connection."""
        if message.get("connection_id") != str(self.connection_id):
            return Close(CLOSE_REPLACED, "replaced", clear_row=False)
        return None

    @staticmethod
    def row_taken() -> Close:
        """A guarded statement matched no row: another connection holds the device."""
        return Close(CLOSE_REPLACED, "replaced", clear_row=False)

    @staticmethod
    def revoked() -> Close:
        """The device was disabled or its token rotated (the row says so, or a statement
        refused the socket's token): close 4001, the device stops and asks a person."""
        return Close(CLOSE_DISABLED, "disabled_or_revoked")

    @staticmethod
    def draining() -> Close:
        return Close(CLOSE_DRAINING, "node_draining")

    @property
    def silence_limit(self) -> float:
        """Seconds without a frame before the connection is given up (three intervals)."""
        return self.heartbeat_seconds * LEASE_HEARTBEATS

    def heartbeat_check(self, now: float) -> Close | float:
        """Close 4408 when the device was silent too long, else the seconds until the next check."""
        silent = now - self.last_frame_at
        if silent >= self.silence_limit:
            return Close(CLOSE_HEARTBEAT_MISSED, f"heartbeat_missed silent={silent:.1f}")
        return self.silence_limit - silent
