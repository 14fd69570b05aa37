"""The device socket's operations and pushed assignments, driven: a request frame answered as
the HTTP API would (:mod:`qprint.domain.device_operations`, on the socket path's threads) and a
claim made for a device in push mode sent as a pushed ``assignment``. A mixin of
:class:`qprint.realtime.consumer.DeviceConsumer`, apart from its connection life (upgrade, bus,
timer, close) because it is the request/answer half of the socket; what to answer and when to push
is the session's (:mod:`qprint.realtime.session_operations`).
"""

from __future__ import annotations

import collections
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from django.db import DatabaseError

from qprint.core import wire
from qprint.core.database import answer_of
from qprint.core.errors import QPrintError
from qprint.domain import device_operations, events
from qprint.domain.claim import NOT_CLAIMED, Told
from qprint.domain.connection import DeviceState
from qprint.metrics import instruments
from qprint.models.serializers import document_path
from qprint.realtime import socket_db
from qprint.realtime.frames import OperationRequest, Plan, ProtocolError
from qprint.realtime.session import DeviceSession

logger = logging.getLogger("qprint.socket")

#: A push whose claim has not been made yet (:meth:`DeviceConsumer._carry_out`).
NOT_FETCHED = object()


class OperationDriver:
    """Operations over the socket and pushed assignments (mixed into the device consumer)."""

    session: DeviceSession
    device_id: int
    connection_id: uuid.UUID
    label: str
    #: The consumer's: what was taken out of turn and runs next, in order (``held``); the
    #: client's next message when it already arrived (``arrived``); the handling of a message,
    #: of a frame the session read and of a protocol error.
    held: collections.deque[Callable[[], Awaitable[None]]]
    arrived: Callable[[], Awaitable[dict[str, Any] | None]]
    dispatch: Callable[[dict[str, Any]], Awaitable[None]]
    handle: Callable[[Any], Awaitable[None]]
    protocol_error: Callable[[ProtocolError], Awaitable[None]]
    #: The consumer's ``_send_frame`` sends a frame while the socket is open.

    # -- operations over the socket (claim, event, command result) ------------------------------

    async def on_operation(self, request: OperationRequest) -> None:
        """Answer a request frame as the HTTP API would: a malformed one is the session's
        protocol error (4400); a refusal is a ``refused`` frame and the socket stays."""
        if request.operation == wire.EVENT:
            await self._on_events(request)
            return
        started = time.perf_counter()
        try:
            answer = await socket_db.run(_OPERATIONS[request.operation], self, request)
        except (QPrintError, DatabaseError) as exc:
            answer = exc
        await self._answer(request, answer, started)

    async def _answer(self, request: OperationRequest, answer: Any, started: float) -> None:
        """Send the answer frame of ``request`` (an Answer, or the refusal raised)."""
        if isinstance(answer, (QPrintError, DatabaseError)):
            if isinstance(answer, DatabaseError):
                logger.warning("socket_operation_failed device=%s error=%r", self.label, answer)
            status, error, message = answer_of(answer)
            out = self.session.refused(request, status, error, message)
        else:
            status, error = answer.status, ""
            out = self.session.answer(request, answer.status, answer.body, answer.queued)
        instruments.socket_operation_answered(request.operation, started, status, error)
        await self._send_frame(out)

    # -- events, several at once ------------------------------------------------------------------

    async def _on_events(self, first: OperationRequest) -> None:
        """``first`` and the event frames that arrived right behind it (sent without waiting for
        the answers), recorded in one hand-off and one transaction, answered in order; then the
        push their release calls for. A frame behind them that is not an event runs after."""
        started = time.perf_counter()
        batch = await self._arrived_events(first)
        reports = [
            events.EventReport(r.target, r.body, self.session.pushes_after(r)) for r in batch
        ]
        try:
            answers, pushed = await socket_db.run(self._events_then_push, batch, reports)
        except DatabaseError as exc:
            answers, pushed = [exc] * len(batch), NOT_FETCHED
        for request, answer in zip(batch, answers, strict=True):
            await self._answer(request, answer, started)
        if pushed is not NOT_FETCHED:
            await self._send_pushed(pushed)

    async def _arrived_events(self, first: OperationRequest) -> list[OperationRequest]:
        """``first`` and the event frames already arrived behind it (at most
        :data:`~qprint.core.wire.MAX_EVENTS_TOGETHER`); the first other message is held to run
        after them."""
        batch = [first]
        while len(batch) < wire.MAX_EVENTS_TOGETHER:
            message = await self.arrived()
            if message is None:
                break
            if message.get("type") != "websocket.receive":
                self.held.append(functools.partial(self.dispatch, message))
                break
            try:
                event = self.session.receive(message.get("text"), time.monotonic())
            except ProtocolError as exc:
                self.held.append(functools.partial(self.protocol_error, exc))
                break
            if not (isinstance(event, OperationRequest) and event.operation == wire.EVENT):
                self.held.append(functools.partial(self.handle, event))
                break
            batch.append(event)
        return batch

    def _events_then_push(
        self, batch: list[OperationRequest], reports: list[events.EventReport]
    ) -> tuple[list[Any], Any]:
        """On a socket thread: the events, then (when one released the job last pushed and its
        statement saw another job queued, or could not tell) the claim for the next job, so the
        RECEIVED that frees a device's queue costs one hand-off and one with nothing queued
        claims nothing."""
        answers = device_operations.socket_events(
            self.device_id, reports, token_hash=self.session.token_hash
        )
        push = False
        for request, answer in zip(batch, answers, strict=True):
            if isinstance(answer, device_operations.Answer):
                push = self.session.push_after(request, answer.body, answer.queued) or push
        return answers, (self._claim_for_push() if push else NOT_FETCHED)

    def _claim(self, request: OperationRequest) -> device_operations.Answer:
        """On a socket thread: the claim for the device as the HTTP API authenticates it (the
        token is checked in the claim's own lock). The document's URL is relative to qprint's
        mount: the agent resolves it against the base URL it was configured with (the scope says
        nothing trustworthy of the public scheme and host), so its token goes only where it
        connected. A ``claim`` frame's ``inline_max_bytes`` asks for the document inline."""
        return device_operations.claim(
            self.device_id,
            document_path,
            token_hash=self.session.token_hash,
            inline_asked=lambda: self.session.inline_asked(request),
        )

    def _command_result(self, request: OperationRequest) -> device_operations.Answer:
        return device_operations.command_result(
            self.device_id, request.target, request.body, token_hash=self.session.token_hash
        )

    # -- pushed assignments ----------------------------------------------------------------------

    def _claim_for_push(self) -> Any:
        """On a socket thread: the claim for the device (push mode): ``(body, document)``, None
        (nothing to hand out), or the refusal or database error (sent nothing: the next
        wakeup, event or heartbeat tries again)."""
        try:
            return device_operations.pushed_claim(
                self.device_id,
                document_path,
                token_hash=self.session.token_hash,
                inline_max=self.session.push_inline_max or 0,
            )
        except (QPrintError, DatabaseError) as exc:
            return exc

    def _read_in_claim(self) -> tuple[Plan, Any]:
        """On a socket thread, for a ready session in push mode: the row read in the claim's
        lock, the session's plan made from it, and the claim in the same transaction when the
        plan says push and nothing has to go out before it (else :data:`NOT_FETCHED`: the
        frames go first, then :meth:`_claim_for_push`)."""
        plans: list[Plan] = []

        def push_now(state: DeviceState) -> bool:
            plan = self.session.reconciled(state)
            plans.append(plan)
            return plan.push and not (plan.frames or plan.read_settings or plan.deliver_commands)

        session = self.session
        pushed = device_operations.pushed_on_wakeup(
            self.device_id,
            self.connection_id,
            push_now,
            document_path,
            token_hash=session.token_hash,
            inline_max=session.push_inline_max or 0,
            told=Told(*session.sent_control, session.sent_settings_revision, session.pushed_job),
        )
        return plans[0], (NOT_FETCHED if pushed is NOT_CLAIMED else pushed)

    async def _send_pushed(self, pushed: Any) -> bool:
        """Send what :meth:`_claim_for_push` got; True when an assignment went out."""
        if isinstance(pushed, QPrintError):
            logger.debug("push_refused device=%s error=%s", self.label, pushed.code)
            return False
        if isinstance(pushed, DatabaseError):
            logger.warning("push_failed device=%s error=%r", self.label, pushed)
            return False
        if pushed is None:
            return False
        body, document = pushed
        await self._send_frame(self.session.pushed(body, document))
        return True


#: Operation requests -> what runs them on a socket thread.
_OPERATIONS = {
    wire.CLAIM: OperationDriver._claim,
    wire.COMMAND_RESULT: OperationDriver._command_result,
}
