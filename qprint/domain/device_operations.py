"""The device's operations (claim, event, command result) as answers, for both transports.

The device HTTP API (:mod:`qprint.views.device_api`) and the device socket's operation frames
(docs/PROTOCOL.md, "Operations over the socket") answer through these functions, so both give the
same answers and guarantees: each calls the same domain function and returns an :class:`Answer`,
the HTTP status and JSON body (``None``: 204). A refusal is the domain's
:class:`~qprint.core.errors.QPrintError` (its ``status``, ``code`` and ``message``), raised as is;
the HTTP API turns it into ``{"error", "message"}`` with that status, the socket into a ``refused``
frame carrying the same three.

A socket's upgrade comes in here too (:func:`open_sockets`, those of a connect burst together): the
token matched in the statement that takes the connection record, or the one way in then the take.

The frames themselves (parsing a request, the answer frames) are the device session's
(:mod:`qprint.realtime.session`, no I/O).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qprint import documents
from qprint.core import wire
from qprint.core.errors import Invalid, NotFound
from qprint.domain import commands, connection, credentials, events
from qprint.domain.claim import (
    NOT_READ,
    Assignment,
    NotClaimed,
    Told,
    claim_next_job,
    claim_on_wakeup,
)
from qprint.models import Device
from qprint.models.serializers import assignment_body, command_object, event_object


@dataclass(frozen=True)
class Answer:
    """``queued``: for an event a pushing socket recorded, whether its device has a job to claim
    (:attr:`qprint.domain.events.EventOutcome.queued`); for a claim's 200, whether another job
    waited behind the one handed out (:attr:`qprint.domain.claim.Assignment.more_queued`). None:
    not known. Not part of the body."""

    status: int
    body: dict[str, Any] | None
    queued: bool | None = None


# -- the operations ----------------------------------------------------------------------------


#: A socket's upgrade as :func:`open_sockets` takes it: the token it presents, its connection's
#: id, the node, the heartbeat's seconds.
Upgrade = tuple[credentials.PresentedToken, uuid.UUID, str, float]


def open_sockets(
    upgrades: list[Upgrade],
) -> list[tuple[Device, connection.Taken] | Exception]:
    """Sockets' upgrades (their tokens differ): the device presenting each token takes its
    connection record for the upgrade's connection. One statement for all of them in the common
    case (:func:`connection.take_presented`, each token matched in it); an upgrade it did not
    take takes the one way in, :meth:`~credentials.PresentedToken.authenticate` (401 unknown, 429
    throttled, 403 disabled, as :class:`~qprint.core.errors.QPrintError`), then
    :func:`connection.take` (:class:`connection.Replaced` when the device was deleted meanwhile).
    Each upgrade's own answer, in order: the device and what it took, or the exception it
    raised (the others are answered all the same)."""
    found = connection.take_presented(
        [(presented.token_hash, *rest) for presented, *rest in upgrades]
    )
    answers: list[tuple[Device, connection.Taken] | Exception] = []
    for (presented, connection_id, node, heartbeat), taken in zip(upgrades, found, strict=True):
        try:
            if taken is not None:
                device = taken[0]
                presented.require(device.token_hash, device.enabled)
            else:
                device = presented.authenticate()
                taken = device, connection.take(device.pk, connection_id, node, heartbeat)
        except Exception as exc:  # this upgrade's answer; the others go on
            answers.append(exc)
        else:
            answers.append(taken)
    return answers


def open_socket(
    presented: credentials.PresentedToken,
    connection_id: uuid.UUID,
    node: str,
    heartbeat_seconds: float,
) -> tuple[Device, connection.Taken]:
    """One socket's upgrade: :func:`open_sockets` of it alone, its exception raised."""
    [answer] = open_sockets([(presented, connection_id, node, heartbeat_seconds)])
    if isinstance(answer, Exception):
        raise answer
    return answer


def claim(
    device: int | credentials.PresentedToken,
    document_url: Callable[[Any], str],
    *,
    token_hash: str | None = None,
    inline_asked: Callable[[], int | None] = lambda: None,
) -> Answer:
    """200 the assignment (with ``document_url(job_id)``), 204 nothing. ``device``: a socket's
    device id, or the token an HTTP request presents (matched in the claim's own lock).
    ``token_hash``: a socket's device, which must still hold that token (checked in the claim's
    own lock). ``inline_asked``: the transport's reading of the most bytes of a document the
    request asks for inline (capped; None: not asked), which raises
    :class:`~qprint.core.errors.Invalid` for a malformed one: the device's standing (401, 429,
    403) is then answered first, as for a malformed event. The body carries the document as
    ``document_base64`` when it has at most that many bytes."""
    try:
        inline_max = inline_asked()
    except Invalid:
        credentials.answer_standing(device, token_hash)
        raise
    assignment = claim_next_job(device, token_hash=token_hash, inline_max=inline_max)
    if assignment is None:
        return Answer(204, None)
    body = _assignment_body(assignment, document_url)
    if inline_max is not None:
        document = _inline_document(assignment, inline_max)
        if document is not None:
            body[wire.DOCUMENT_BASE64] = base64.b64encode(document).decode("ascii")
    return Answer(200, body, assignment.more_queued)


def _assignment_body(assignment, document_url: Callable[[Any], str]) -> dict[str, Any]:
    return {**assignment_body(assignment), "document_url": document_url(assignment.job_id)}


def pushed_claim(
    device_id: int, document_url: Callable[[Any], str], *, token_hash: str, inline_max: int
) -> tuple[dict[str, Any], bytes | None] | None:
    """The claim a socket in push mode makes for its device (docs/PROTOCOL.md, "Pushed
    assignments"): the same claim as :func:`claim`, with the same gate and token check, and the
    document's bytes when its size is at most ``inline_max`` (None: downloaded by the device).
    None when there is nothing to hand out. The claim's own statement reads the document where
    the database keeps it; elsewhere it is read after."""
    assignment = claim_next_job(
        device_id, token_hash=token_hash, inline_max=inline_max, for_push=True
    )
    return _pushed(assignment, document_url, inline_max)


def pushed_on_wakeup(
    device_id: int,
    connection_id: uuid.UUID,
    decide: Callable[[connection.DeviceState], bool],
    document_url: Callable[[Any], str],
    *,
    token_hash: str,
    inline_max: int,
    told: Told,
) -> tuple[dict[str, Any], bytes | None] | NotClaimed | None:
    """A wakeup of a socket in push mode (:func:`qprint.domain.claim.claim_on_wakeup`): the
    connection's state read in the claim's lock, and, when ``decide(state)`` says so, the claim
    :func:`pushed_claim` makes, in the same statement (``told``: what the socket told its device).
    What :func:`pushed_claim` returns, or :data:`~qprint.domain.claim.NOT_CLAIMED`."""
    assignment = claim_on_wakeup(
        device_id, connection_id, decide, token_hash=token_hash, inline_max=inline_max, told=told
    )
    if isinstance(assignment, NotClaimed):
        return assignment
    return _pushed(assignment, document_url, inline_max)


def _pushed(
    assignment: Assignment | None, document_url: Callable[[Any], str], inline_max: int
) -> tuple[dict[str, Any], bytes | None] | None:
    """The pushed assignment's body and its document (None: downloaded by the device)."""
    if assignment is None:
        return None
    return _assignment_body(assignment, document_url), _inline_document(assignment, inline_max)


def _inline_document(assignment: Assignment, inline_max: int) -> bytes | None:
    """The assignment's document when it has at most ``inline_max`` bytes: as the claim's
    statement read it, or from the storage that keeps it; None: larger, or gone (the device's
    download then answers 404 and it reports FAILED)."""
    if assignment.size > inline_max:
        return None
    document = assignment.document
    if document is NOT_READ:
        try:
            document = documents.open_document(assignment.job_id)
        except NotFound:
            document = None
    return document


def event(
    device: Device | int | credentials.PresentedToken,
    job_id: Any,
    body: Any,
    *,
    token_hash: str | None = None,
    pushes_next: bool = False,
) -> Answer:
    """201 a new event, 200 the replay of one already recorded (same id, same content).
    ``device`` and ``token_hash``: as for :func:`claim` (checked in the event's own lock; a
    :class:`~qprint.models.Device` already authenticated needs neither). ``pushes_next``: the
    socket pushes the next job itself after this answer (no wakeup of the device)."""
    outcome = events.record_device_event(
        device, job_id, body, token_hash=token_hash, pushes_next=pushes_next
    )
    return _event_answer(outcome)


def _event_answer(outcome: events.EventOutcome) -> Answer:
    answer = {
        **event_object(outcome.event),
        "job_id": str(outcome.job.pk),
        "job_status": outcome.job.status,
    }
    return Answer(201 if outcome.created else 200, answer, outcome.queued)


def socket_events(
    device_id: int, reports: list[events.EventReport], *, token_hash: str
) -> list[Answer | Exception]:
    """Consecutive event frames of one socket, answered in order as :func:`event` answers each
    (an Answer, or the refusal or database error as raised: the transport answers it with
    :func:`qprint.core.database.answer_of`), recorded in one transaction
    (:func:`qprint.domain.events.record_events_together`)."""
    return _event_answers(events.record_events_together(device_id, reports, token_hash=token_hash))


def presented_events(
    presented: credentials.PresentedToken, job_id: Any, bodies: list[Any]
) -> list[Answer | Exception]:
    """The events of one job that an HTTP request sends as a list, answered in order as
    :func:`socket_events` answers a socket's (:func:`qprint.domain.events.record_presented_events`:
    one statement for a job's SPOOLED and how it ended). The device's standing (401, 429, 403),
    then a list that is empty, longer than :data:`~qprint.core.wire.MAX_EVENTS_TOGETHER` or holds
    a malformed event (422), and a job that is not the device's (404) are raised: they answer the
    whole request."""
    return _event_answers(events.record_presented_events(presented, job_id, bodies))


def _event_answers(outcomes: list[Any]) -> list[Answer | Exception]:
    return [
        _event_answer(outcome) if isinstance(outcome, events.EventOutcome) else outcome
        for outcome in outcomes
    ]


def command_result(
    device: Device | int, command_id: Any, body: dict[str, Any], *, token_hash: str | None = None
) -> Answer:
    """200 the command once its result is recorded (``{status: DONE|FAILED, result}``).
    ``token_hash``: as for :func:`claim` (checked by a read of the device first)."""
    if token_hash is not None:
        device_id = device.pk if isinstance(device, Device) else device
        device = credentials.still_held(device_id, token_hash)
    command = commands.record_result(device, command_id, body.get("status"), body.get("result"))
    return Answer(200, command_object(command))
