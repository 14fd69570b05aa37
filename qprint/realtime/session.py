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
- when the device last sent a frame (the driver passes the monotonic time in);
- in push mode (the device's ``state`` asked for ``push``), the most bytes sent inline and the job
  last pushed, so a held job is pushed once per connection.

Frames in are typed events (:class:`~qprint.realtime.frames.StateReported`,
:class:`~qprint.realtime.frames.Ping`, :class:`~qprint.realtime.frames.PrintersReported`,
:class:`~qprint.realtime.frames.OperationRequest`: :mod:`qprint.realtime.frames`); the driver
dispatches on the event's class. The operations and pushed assignments are
:mod:`qprint.realtime.session_operations`, mixed into :class:`DeviceSession`. The session imports
nothing of Django: the rows it reads are duck-typed (``StateRow``, ``TakenRow``) and the
bounded JSON parser is handed in.

``wake`` is sent (or, in push mode, a claim made for the device) only when the claim gate
(:func:`qprint.core.gate.refusal`) is open for the last row the session read: the device is
never woken for a claim that row would refuse. A wakeup that says a job was queued is answered
from that row without reading it again (:meth:`DeviceSession.woken`). A device in push mode gets
no ``wake``.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from qprint.core import gate, wire
from qprint.realtime.frames import (
    Close,
    Event,
    Ping,
    Plan,
    PrintersReported,
    ProtocolError,
    StateReported,
    StateRow,
    TakenRow,
    revision,
)
from qprint.realtime.session_operations import SessionOperations, is_byte_count

#: A device may send this many seconds' worth of ``MAX_FRAMES_PER_SECOND`` at once.
FRAME_BURST_SECONDS = 5


class DeviceSession(SessionOperations):
    """One device connection, from ``hello`` to the close.

    ``decode`` parses a frame's JSON text (the driver passes the domain's bounded parser; it
    raises ``ValueError`` with a message for text it refuses). ``inline_cap`` caps the
    ``push.inline_max_bytes`` a device asks for.
    """

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
        inline_cap: int = 262144,
        decode: Callable[[str], Any] | None = None,
    ) -> None:
        self.device_id = device_id
        self.token_hash = token_hash
        self.connection_id = connection_id
        self.node = node
        self.heartbeat_seconds = heartbeat_seconds
        self.max_frame_bytes = max_frame_bytes
        self.inline_cap = inline_cap
        self.decode = decode or _plain_json
        self.ready = False
        self.sent_control: tuple[int, bool] = (0, False)
        self.sent_settings_revision = 0
        self.woken_claim: str | None = None
        #: Whether the claim gate was open for the last row planned from (:meth:`woken`).
        self.gate_open = False
        #: Push mode: the most bytes of a document sent inline (None: the device claims itself).
        self.push_inline_max: int | None = None
        #: The job last pushed on this connection (pushed again only on the next connection).
        self.pushed_job: str | None = None
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

    def hello(self, taken: TakenRow, now: float) -> dict[str, Any]:
        """The ``hello`` frame for the row the connection took; remembers what it tells."""
        self.sent_control = (taken.control_revision, taken.paused)
        self.sent_settings_revision = taken.settings_revision
        self.last_frame_at = now
        heartbeat = self.heartbeat_seconds
        return {
            "type": wire.HELLO,
            "connection_id": str(self.connection_id),
            "node": self.node,
            "heartbeat_seconds": int(heartbeat) if heartbeat == int(heartbeat) else heartbeat,
            "control": {"revision": taken.control_revision, "paused": taken.paused},
            "settings": {"revision": taken.settings_revision, "values": taken.settings},
            "operations": list(wire.OPERATIONS),
            "active_jobs": [
                {"job_id": job_id, "claim_id": claim_id, "status": status}
                for job_id, claim_id, status in taken.active_jobs
            ],
        }

    # -- frames from the device -------------------------------------------------------------------

    def receive(self, text: str | None, now: float) -> Event:
        """What a frame from the device means; :class:`ProtocolError` when it must not be sent."""
        frame = self._frame(text, now)
        kind = frame["type"]
        if kind == wire.STATE:
            control, settings = self.applied_revisions(frame)
            return StateReported(control, settings, self._push_asked(frame))
        if kind == wire.PING:
            return Ping()
        if kind == wire.PRINTERS:
            return PrintersReported(frame.get("printers"))
        return self.operation(frame)

    def _frame(self, text: str | None, now: float) -> dict[str, Any]:
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
            frame = self.decode(text)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            raise ProtocolError('a frame is an object with a "type"')
        if frame["type"] not in wire.CLIENT_FRAMES:
            raise ProtocolError(f"unknown frame type {frame['type']!r}")
        if not self.ready and frame["type"] != wire.STATE:
            raise ProtocolError("the first frame must be state")
        return frame

    def applied_revisions(self, frame: dict[str, Any]) -> tuple[int, int]:
        """The control and settings revisions a ``state`` frame reports as applied."""
        control = revision(frame, "control_revision")
        settings = revision(frame, "settings_revision")
        if control > self.sent_control[0] or settings > self.sent_settings_revision:
            raise ProtocolError("applied revisions above those the server sent")
        return control, settings

    def _push_asked(self, frame: dict[str, Any]) -> int | None:
        """``push.inline_max_bytes`` of a ``state`` frame, capped; None without ``push``."""
        if "push" not in frame:
            return None
        push = frame["push"]
        if not isinstance(push, dict):
            raise ProtocolError("push must be an object")
        inline = push.get(wire.INLINE_MAX_BYTES)  # required: no default stands in for it
        if not is_byte_count(inline):
            raise ProtocolError("push.inline_max_bytes must be a non-negative integer")
        return min(inline, self.inline_cap)

    @staticmethod
    def protocol_error(error: ProtocolError) -> tuple[dict[str, Any], Close]:
        """The ``error`` frame to send, then the close (4400)."""
        frame = {"type": wire.ERROR, "code": "protocol_error", "message": str(error)}
        return frame, Close(wire.CLOSE_PROTOCOL_ERROR, f"protocol_error {error}")

    # -- what the row says -------------------------------------------------------------------------

    def marked_ready(self, state: StateRow, reported: StateReported | None = None) -> Plan:
        """The row after the ``state`` frame was recorded. The first one makes the connection
        ready and hands the device its open commands again (it may have lost them); one asking
        for ``push`` turns push mode on for the rest of the connection."""
        first = not self.ready
        self.ready = True
        if reported is not None and reported.push_inline_max is not None:
            self.push_inline_max = reported.push_inline_max
        return self.plan(state, wake=True, redeliver_commands=first)

    def pinged(self, state: StateRow) -> Plan:
        """The row after a ``ping`` renewed the lease: tell only what changed."""
        return self.plan(state, wake=False)

    def reconciled(self, state: StateRow) -> Plan:
        """The row read after a wakeup or a reconcile: wake the device if it may claim."""
        return self.plan(state, wake=True)

    @property
    def reads_row_on_wakeup(self) -> bool:
        """Every wakeup makes this session read its device's row in the claim's lock (ready, in
        push mode): the read tells whether its connection still holds the row."""
        return self.ready and self.push_inline_max is not None

    def woken(self, queued: bool | None) -> Plan | None:
        """What a wakeup asks of this session: None, read the row (then :meth:`reconciled`); a
        plan, carried out without reading it. ``queued`` is what the wakeup says of the device's
        queue (absent: None).

        A session in push mode reads the row (and claims) for every wakeup: a job committed while
        its held job's release was recorded elsewhere (over HTTP, by another connection) may have
        had its own wakeup read here while that job still held the device, and the release's
        wakeup is then the one that finds it. One that only tells its device when to claim
        answers what the wakeup says:

        - a job left CLAIMED and no other waited (``False``): nothing. The read would find nothing
          to wake the device for; a job committed after the statement that released that one
          publishes a wakeup of its own, and so does every other change.
        - a job was queued (``True``): ``wake``, when the claim gate was open for the last row
          read. That row is as recent as the wakeups this session has read (each change to what
          the gate reads publishes one); a gate closed since, whose wakeup was lost or comes
          later, refuses the device's claim with its reason, and the next ping tells the device
          what changed. When the gate was closed, the row is read.

        Before the device reported its state, nothing: that frame's statement reads the row."""
        if not self.ready:
            return Plan()
        if self.reads_row_on_wakeup or queued is None:
            return None
        if not queued:
            return Plan()
        if not self.gate_open:
            return None
        return Plan(then=[{"type": wire.WAKE}])

    def plan(self, state: StateRow, *, wake: bool, redeliver_commands: bool = False) -> Plan:
        """What the row says that this connection has not told the device yet."""
        if not state.enabled or not _same(state.token_hash, self.token_hash):
            return Plan(close=self.revoked())
        plan = Plan()
        self.gate_open = gate.is_open(state)
        control = (state.control_revision, state.paused)
        if control != self.sent_control and state.control_revision >= self.sent_control[0]:
            self.sent_control = control
            plan.frames.append(
                {"type": wire.CONTROL, "revision": state.control_revision, "paused": state.paused}
            )
        plan.read_settings = state.settings_revision > self.sent_settings_revision
        if not self.ready:
            return plan
        # A first state hands out again what an earlier connection may have lost, if anything.
        plan.deliver_commands = state.command_pending or (redeliver_commands and state.command_open)
        plan.redeliver_commands = redeliver_commands
        if not self.gate_open:
            return plan
        if self.push_inline_max is not None:
            plan.push = self._should_push(state)
        elif self._should_wake(state, wake):
            self.woken_claim = state.claimed_job_id
            plan.then.append({"type": wire.WAKE})
        return plan

    def _should_wake(self, state: StateRow, asked: bool) -> bool:
        waiting = state.job_queued and state.claimed_job_id is None
        unannounced = state.claimed_job_id is not None and state.claimed_job_id != self.woken_claim
        return (
            waiting or unannounced or (asked and (state.job_queued or bool(state.claimed_job_id)))
        )

    def _should_push(self, state: StateRow) -> bool:
        """A job waits and none is held, or the device holds one not pushed on this connection
        (the replay of its claim). A job already pushed here is not sent twice."""
        if state.claimed_job_id is None:
            return state.job_queued
        return state.claimed_job_id != self.pushed_job

    def settings_frame(self, settings_revision: int, values: dict[str, Any]) -> dict[str, Any]:
        self.sent_settings_revision = settings_revision
        return {"type": wire.SETTINGS, "revision": settings_revision, "values": values}

    @staticmethod
    def command_frames(deliveries: Iterable[Any]) -> list[dict[str, Any]]:
        return [
            {
                "type": wire.COMMAND,
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
            return Close(wire.CLOSE_REPLACED, "replaced", clear_row=False)
        return None

    @staticmethod
    def row_taken() -> Close:
        """A guarded statement matched no row: another connection holds the device."""
        return Close(wire.CLOSE_REPLACED, "replaced", clear_row=False)

    @staticmethod
    def revoked() -> Close:
        """The device was disabled or its token rotated (the row says so, or a statement
        refused the socket's token): close 4001, the device stops and asks a person."""
        return Close(wire.CLOSE_DISABLED, "disabled_or_revoked")

    @staticmethod
    def draining() -> Close:
        return Close(wire.CLOSE_DRAINING, "node_draining")

    @property
    def silence_limit(self) -> float:
        """Seconds without a frame before the connection is given up (three intervals)."""
        return self.heartbeat_seconds * wire.HEARTBEAT_MISSED_INTERVALS

    def heartbeat_check(self, now: float) -> Close | float:
        """Close 4408 when the device was silent too long, else the seconds until the next check."""
        silent = now - self.last_frame_at
        if silent >= self.silence_limit:
            return Close(wire.CLOSE_HEARTBEAT_MISSED, f"heartbeat_missed silent={silent:.1f}")
        return self.silence_limit - silent


def _plain_json(text: str) -> Any:
    """The decoder without the domain's limits (tests, tools)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"frame is not JSON ({exc})") from None


def _same(a: str, b: str) -> bool:
    """Constant-time comparison of two token hashes."""
    return hmac.compare_digest(a.encode(), b.encode())
