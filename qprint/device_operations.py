"""The device's operations (claim, event, command result) as answers, for both transports.

The device HTTP API (:mod:`qprint.views.device_api`) and the device socket's operation frames
(docs/PROTOCOL.md, "Operations over the socket") answer through these functions, so both give the
same answers and guarantees: each calls the same domain function and returns an :class:`Answer`,
the HTTP status and JSON body (``None``: 204). A refusal is the domain's
:class:`~qprint.errors.QPrintError` (its ``status``, ``code`` and ``message``), raised as is; the
HTTP API turns it into ``{"error", "message"}`` with that status, the socket into a ``refused``
frame carrying the same three.

The frames' own parsing is here too, without I/O: :func:`parse_request` turns a request frame into
an :class:`OperationRequest` (or raises :class:`MalformedRequest`: the socket closes 4400), and
:func:`answer_frame` / :func:`refusal_frame` make the answer frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qprint import api
from qprint.claim import claim_next_job
from qprint.errors import Disabled, Invalid, QPrintError
from qprint.events import record_device_event
from qprint.models import Device
from qprint.serializers import assignment_body, command_object, event_object

#: What ``hello.operations`` offers.
OPERATIONS = ("claim", "event", "command_result")
MAX_REQUEST_ID = 64
#: The answer to a request the database could not serve (the HTTP API's 503).
UNAVAILABLE = (503, "unavailable", "The database could not answer; retry shortly.")


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any] | None


class Unauthorized(QPrintError):
    """The device's token no longer matches (revoked or rotated): the HTTP API's 401."""

    code = "unauthorized"
    status = 401


# -- the operations ----------------------------------------------------------------------------


def claim(device_id: int, document_url: Callable[[Any], str]) -> Answer:
    """200 the assignment (with ``document_url(job_id)``), 204 nothing."""
    assignment = claim_next_job(device_id)
    if assignment is None:
        return Answer(204, None)
    return Answer(200, assignment_body(assignment, document_url(assignment.job_id)))


def event(device: Device, job_id: Any, body: Any) -> Answer:
    """201 a new event, 200 the replay of one already recorded (same id, same content)."""
    outcome = record_device_event(device, job_id, body)
    answer = {
        **event_object(outcome.event),
        "job_id": str(outcome.job.pk),
        "job_status": outcome.job.status,
    }
    return Answer(201 if outcome.created else 200, answer)


def command_result(device: Device | int, command_id: Any, body: dict[str, Any]) -> Answer:
    """200 the command once its result is recorded (``{status: DONE|FAILED, result}``)."""
    status = body.get("status")
    if status not in ("DONE", "FAILED"):
        raise Invalid(message="status: must be DONE or FAILED")
    return Answer(
        200,
        command_object(api.record_command_result(device, command_id, status, body.get("result"))),
    )


def current_device(device_id: int, token_hash: str) -> Device:
    """The socket's device as the HTTP API would authenticate it now: 401 when its token changed,
    403 ``disabled``."""
    device = Device.objects.filter(pk=device_id, token_hash=token_hash).first()
    if device is None:
        raise Unauthorized(message="Unknown or revoked device token.")
    if not device.enabled:
        raise Disabled()
    return device


# -- the frames (no I/O) -----------------------------------------------------------------------


class MalformedRequest(ValueError):
    """A request frame the device must not send (the socket closes 4400)."""


@dataclass(frozen=True)
class OperationRequest:
    """A parsed request frame: ``operation`` is one of :data:`OPERATIONS`; ``target`` the job or
    command id; ``body`` what the HTTP API would have received as the request body."""

    operation: str
    request_id: str
    target: str | None = None
    body: dict[str, Any] = field(default_factory=dict)


#: Fields of an ``event`` frame that are the HTTP event body (``event_type`` is its ``type``).
_EVENT_FIELDS = ("event_id", "claim_id", "occurred_at", "message", "detail")


def parse_request(frame: dict[str, Any]) -> OperationRequest:
    """The request in an operation frame (``frame["type"]`` in :data:`OPERATIONS`)."""
    request_id = frame.get("request_id")
    if not isinstance(request_id, str) or not request_id or len(request_id) > MAX_REQUEST_ID:
        raise MalformedRequest(f"request_id must be a string of 1 to {MAX_REQUEST_ID} characters")
    kind = frame["type"]
    if kind == "claim":
        return OperationRequest("claim", request_id)
    if kind == "event":
        job_id = frame.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            raise MalformedRequest("an event frame names its job_id (a string)")
        body = {name: frame[name] for name in _EVENT_FIELDS if name in frame}
        if "event_type" in frame:
            body["type"] = frame["event_type"]
        return OperationRequest("event", request_id, job_id, body)
    if kind == "command_result":
        command_id = frame.get("command_id")
        if not isinstance(command_id, str) or not command_id:
            raise MalformedRequest("a command_result frame names its command_id (a string)")
        body = {name: frame[name] for name in ("status", "result") if name in frame}
        return OperationRequest("command_result", request_id, command_id, body)
    raise MalformedRequest(f"{kind!r} is not an operation")


def answer_frame(request: OperationRequest, answer: Answer) -> dict[str, Any]:
    """The frame that answers ``request`` with ``answer`` (what the HTTP API answers)."""
    rid = request.request_id
    if request.operation == "claim":
        if answer.body is None:
            return {"type": "nothing", "request_id": rid}
        return {**answer.body, "type": "assignment", "request_id": rid}
    if request.operation == "event":
        return {"type": "event_recorded", "request_id": rid, "status": answer.status,
                "event": answer.body}  # fmt: skip
    return {"type": "command_recorded", "request_id": rid, "status": answer.status,
            "command": answer.body}  # fmt: skip


def refusal_frame(request: OperationRequest, status: int, code: str, message: str) -> dict:
    """The ``refused`` frame: the HTTP status and error the HTTP API would have answered."""
    return {
        "type": "refused",
        "request_id": request.request_id,
        "status": status,
        "error": code,
        "message": message,
    }
