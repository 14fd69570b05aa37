"""The device session's operations and pushed assignments (docs/PROTOCOL.md, "Operations over
the socket" and "Pushed assignments"): parsing a ``claim``, ``event`` or ``command_result`` frame
into an :class:`~qprint.realtime.frames.OperationRequest`, the frame that answers or refuses it,
and when a push follows. Part of :class:`qprint.realtime.session.DeviceSession` (a mixin of it),
kept apart because it is the request/answer half of the session, not its connection state. No
I/O, nothing of Django.
"""

from __future__ import annotations

import base64
from typing import Any

from qprint.core import wire
from qprint.core.errors import Invalid
from qprint.realtime.frames import OperationRequest, ProtocolError

#: Fields of an ``event`` frame that are the HTTP event body (``event_type`` is its ``type``).
_EVENT_FIELDS = ("event_id", "claim_id", "occurred_at", "message", "detail")
#: Event types after which the device's held job has left CLAIMED (the next one may be pushed).
_RELEASING_EVENTS = frozenset({"RECEIVED", "PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED"})


def is_byte_count(value: Any) -> bool:
    """Whether a frame's ``inline_max_bytes`` is what it must be: a non-negative integer."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class SessionOperations:
    """The operations and pushes of one connection (mixed into the device session)."""

    #: Push mode: the most bytes of a document sent inline (None: the device claims itself).
    push_inline_max: int | None
    #: The job last pushed on this connection (pushed again only on the next connection).
    pushed_job: str | None
    #: The most bytes of a document that travel inline (``QPRINT["INLINE_DOCUMENT_MAX_BYTES"]``).
    inline_cap: int

    # -- operations (docs/PROTOCOL.md, "Operations over the socket") -----------------------------

    @staticmethod
    def operation(frame: dict[str, Any]) -> OperationRequest:
        """The request in a ``claim``, ``event`` or ``command_result`` frame. A malformed one
        (no valid ``request_id``, no job or command id) is a :class:`ProtocolError`; what the
        body says is the domain's to judge, and a refusal is an answer."""
        request_id = frame.get("request_id")
        if not isinstance(request_id, str) or not 0 < len(request_id) <= wire.MAX_REQUEST_ID:
            raise ProtocolError(
                f"request_id must be a string of 1 to {wire.MAX_REQUEST_ID} characters"
            )
        kind = frame["type"]
        if kind == wire.CLAIM:
            asked = frame.get(wire.INLINE_MAX_BYTES)
            body = {} if asked is None else {wire.INLINE_MAX_BYTES: asked}
            return OperationRequest(wire.CLAIM, request_id, body=body)
        if kind == wire.EVENT:
            job_id = frame.get("job_id")
            if not isinstance(job_id, str) or not job_id:
                raise ProtocolError("an event frame names its job_id (a string)")
            body = {name: frame[name] for name in _EVENT_FIELDS if name in frame}
            if "event_type" in frame:
                body["type"] = frame["event_type"]
            return OperationRequest(wire.EVENT, request_id, job_id, body)
        command_id = frame.get("command_id")
        if not isinstance(command_id, str) or not command_id:
            raise ProtocolError("a command_result frame names its command_id (a string)")
        body = {name: frame[name] for name in ("status", "result") if name in frame}
        return OperationRequest(wire.COMMAND_RESULT, request_id, command_id, body)

    @staticmethod
    def answer(
        request: OperationRequest,
        status: int,
        body: dict[str, Any] | None,
        more_queued: bool | None = None,
    ) -> dict:
        """The frame answering ``request`` with the HTTP API's status and body (None: 204); a
        claim's ``assignment`` says ``more_queued`` when known (the HTTP answer's header)."""
        rid = request.request_id
        if request.operation == wire.CLAIM:
            if body is None:
                return {"type": wire.NOTHING, "request_id": rid}
            frame = {**body, "type": wire.ASSIGNMENT, "request_id": rid}
            if more_queued is not None:
                frame[wire.MORE_QUEUED] = more_queued
            return frame
        if request.operation == wire.EVENT:
            return {"type": wire.EVENT_RECORDED, "request_id": rid, "status": status, "event": body}
        return {"type": wire.COMMAND_RECORDED, "request_id": rid, "status": status, "command": body}

    def inline_asked(self, request: OperationRequest) -> int | None:
        """The most bytes of a document a ``claim`` frame asked for inline (its
        ``inline_max_bytes``), capped as a pushed one is; None when it did not ask.
        :class:`~qprint.core.errors.Invalid` (a ``refused`` 422, as the HTTP claim's header)
        unless it is a non-negative integer."""
        asked = request.body.get(wire.INLINE_MAX_BYTES)
        if asked is None:
            return None
        if not is_byte_count(asked):
            raise Invalid(message=f"'{wire.INLINE_MAX_BYTES}' must be a non-negative integer.")
        return min(asked, self.inline_cap)

    def pushes_after(self, request: OperationRequest) -> bool:
        """Whether this connection will push once ``request`` is answered (before it runs): in
        push mode, an event that may release the job last pushed (RECEIVED or final). The event
        then needs no wakeup of the device: this connection claims the next job itself."""
        return (
            self.push_inline_max is not None
            and request.operation == wire.EVENT
            and request.target == self.pushed_job
            and request.body.get("type") in _RELEASING_EVENTS
        )

    def push_after(
        self, request: OperationRequest, body: dict[str, Any] | None, queued: bool | None = None
    ) -> bool:
        """Whether to push once ``request`` was answered with ``body``: in push mode, when the
        device's RECEIVED or final event for the job last pushed is recorded, that job has left
        CLAIMED and the next one may go out at once. Once: the job is no longer the one held
        (its later events push nothing; the claim that follows names the next one). ``queued``
        False: the event's own statement saw no other job to claim, so no claim is made (a job
        submitted later wakes the socket, which pushes it then); None: not known, claim."""
        if not self.pushes_after(request) or (body or {}).get("job_status") == "CLAIMED":
            return False
        self.pushed_job = None
        return queued is not False

    @staticmethod
    def refused(request: OperationRequest, status: int, code: str, message: str) -> dict:
        """The ``refused`` frame: the HTTP status and error the HTTP API would have answered. The
        socket stays open."""
        return {
            "type": wire.REFUSED,
            "request_id": request.request_id,
            "status": status,
            "error": code,
            "message": message,
        }

    # -- pushed assignments (docs/PROTOCOL.md, "Pushed assignments") ------------------------------

    def pushed(self, body: dict[str, Any], document: bytes | None) -> dict[str, Any]:
        """The ``assignment`` frame of a claim made for the device: the HTTP assignment body, and
        the document inline when the driver read it (its size within ``inline_max_bytes``)."""
        self.pushed_job = body["job_id"]
        frame = {**body, "type": wire.ASSIGNMENT, "pushed": True}
        if document is not None:
            frame[wire.DOCUMENT_BASE64] = base64.b64encode(document).decode("ascii")
        return frame

    def inline(self, size: int) -> bool:
        """Whether a pushed document of ``size`` bytes travels inline."""
        return self.push_inline_max is not None and size <= self.push_inline_max
