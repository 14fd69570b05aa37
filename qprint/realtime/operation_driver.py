"""The device socket's operations and pushed assignments, driven: a request frame answered as
the HTTP API would (:mod:`qprint.domain.device_operations`, on the socket path's threads) and a
claim made for a device in push mode sent as a pushed ``assignment``. A mixin of
:class:`qprint.realtime.consumer.DeviceConsumer`, apart from its connection life (upgrade, bus,
timer, close) because it is the request/answer half of the socket; what to answer and when to push
is the session's (:mod:`qprint.realtime.session_operations`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import DatabaseError

from qprint.core import wire
from qprint.core.errors import QPrintError
from qprint.domain import device_operations
from qprint.metrics import instruments
from qprint.models.serializers import document_path
from qprint.realtime import socket_db
from qprint.realtime.frames import OperationRequest
from qprint.realtime.session import DeviceSession

logger = logging.getLogger("qprint.socket")

#: A push whose claim has not been made yet (:meth:`DeviceConsumer._carry_out`).
NOT_FETCHED = object()


class OperationDriver:
    """Operations over the socket and pushed assignments (mixed into the device consumer)."""

    session: DeviceSession
    device_id: int
    label: str
    #: The consumer's ``_send_frame`` sends a frame while the socket is open.

    # -- operations over the socket (claim, event, command result) ------------------------------

    async def on_operation(self, request: OperationRequest) -> None:
        """Answer a request frame as the HTTP API would: a malformed one is the session's
        protocol error (4400); a refusal is a ``refused`` frame and the socket stays."""
        started = time.perf_counter()
        pushed = NOT_FETCHED
        try:
            if self.session.pushes_after(request):  # the event, then the push: one thread hop
                answer, pushed = await socket_db.run(self._event_then_push, request)
            else:
                answer = await socket_db.run(_OPERATIONS[request.operation], self, request)
        except QPrintError as exc:
            status, error = exc.status, exc.code
            out = self.session.refused(request, exc.status, exc.code, exc.message)
        except DatabaseError as exc:
            logger.warning("socket_operation_failed device=%s error=%r", self.label, exc)
            status, error = device_operations.UNAVAILABLE[:2]
            out = self.session.refused(request, *device_operations.UNAVAILABLE)
        else:
            status, error = answer.status, ""
            out = self.session.answer(request, answer.status, answer.body)
        instruments.socket_operation_answered(request.operation, started, status, error)
        await self._send_frame(out)
        if pushed is not NOT_FETCHED:
            await self._send_pushed(pushed)

    def _event_then_push(self, request: OperationRequest) -> tuple[device_operations.Answer, Any]:
        """On a socket thread: the event, then (when it released the job last pushed and the
        event's statement saw another job queued, or could not tell) the claim for the next job,
        so the RECEIVED that frees a device's queue costs one hand-off and one with nothing
        queued claims nothing."""
        answer = self._event(request)
        if not self.session.push_after(request, answer.body, answer.queued):
            return answer, None
        return answer, self._claim_for_push()

    def _claim(self, request: OperationRequest) -> device_operations.Answer:
        """On a socket thread: the claim for the device as the HTTP API authenticates it (the
        token is checked in the claim's own lock). The document's URL is relative to qprint's
        mount: the agent resolves it against the base URL it was configured with (the scope says
        nothing trustworthy of the public scheme and host), so its token goes only where it
        connected."""
        return device_operations.claim(
            self.device_id, document_path, token_hash=self.session.token_hash
        )

    def _event(self, request: OperationRequest) -> device_operations.Answer:
        return device_operations.event(
            self.device_id,
            request.target,
            request.body,
            token_hash=self.session.token_hash,
            pushes_next=self.session.pushes_after(request),
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
    wire.EVENT: OperationDriver._event,
    wire.COMMAND_RESULT: OperationDriver._command_result,
}
