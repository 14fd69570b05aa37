"""Claims and reports as frames on the device's socket, when the server offers them.

The server lists in ``hello.operations`` what it answers over the socket (docs/PROTOCOL.md,
"Operations over the socket"): then a claim, an event or a command result travels as a request
frame with a ``request_id`` on the connection already open, instead of an HTTP request, and its
answer frame stands for the HTTP status and body it would have had (:class:`Reply`, read like an
``httpx.Response``). Without the socket or the offer, :class:`DeviceApi` uses HTTP: the answers
and what the agent does with them are the same either way. The document is downloaded
over HTTP unless a pushed assignment carried it inline.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import Any

import httpx

from qprint.agent import protocol as p


class OperationUnavailable(httpx.TransportError):
    """The socket closed (or did not answer in time) before the answer came: like a network error
    of the HTTP request, the caller retries later."""


class Reply:
    """An answer, read as the HTTP response it stands for."""

    def __init__(self, status: int, body: dict[str, Any] | None, headers: dict[str, str]):
        self.status_code = status
        self._body = body
        self.headers = httpx.Headers(headers)

    def json(self) -> Any:
        if self._body is None:
            raise ValueError("no body")
        return self._body


class SocketOperations:
    """The requests in flight on the current socket, matched to their answers by request_id."""

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self._ws = None
        self._offered: frozenset[str] = frozenset()
        self._pending: dict[str, asyncio.Future] = {}
        self._ids = itertools.count(1)

    def attach(self, ws, offered: frozenset[str]) -> None:
        self._ws, self._offered = ws, offered

    def detach(self) -> None:
        """The socket closed: every request in flight fails (its caller retries)."""
        self._ws, self._offered = None, frozenset()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(OperationUnavailable("the socket closed"))

    def available(self, operation: str) -> bool:
        return self._ws is not None and operation in self._offered

    @property
    def offered(self) -> frozenset[str]:
        """What the current socket's ``hello.operations`` offered (empty: no socket)."""
        return self._offered if self._ws is not None else frozenset()

    def deliver(self, frame: dict[str, Any]) -> bool:
        """Take an answer frame (True), or leave any other frame to the caller (False)."""
        if frame.get("type") not in p.ANSWER_TYPES or p.is_pushed_assignment(frame):
            return False
        future = self._pending.pop(str(frame.get("request_id")), None)
        if future is not None and not future.done():
            try:
                future.set_result(Reply(*p.answer_of(frame)))
            except p.ProtocolError as exc:
                future.set_exception(OperationUnavailable(f"bad answer: {exc}"))
        return True

    async def call(self, make_frame) -> Reply:
        """Send ``make_frame(request_id)`` and wait for its answer."""
        ws = self._ws
        if ws is None:
            raise OperationUnavailable("not connected")
        request_id = str(next(self._ids))
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await ws.send(make_frame(request_id))
            return await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            raise OperationUnavailable("no answer in time") from None
        except Exception as exc:  # the socket closed under the send
            if isinstance(exc, OperationUnavailable):
                raise
            raise OperationUnavailable(f"send failed: {exc!r}") from exc
        finally:
            self._pending.pop(request_id, None)


class BearerToOwnOrigins(httpx.Auth):
    """The device token on the requests to the agent's own servers only (the origins of its
    configured URLs, scheme, host and port): a URL the server wrote, or a redirect, that names
    another origin never carries it, even in cleartext to the same host."""

    def __init__(self, token: str, origins: Iterable[tuple[str, str, int]]):
        self._header = f"Bearer {token}"
        self._origins = frozenset(origins)

    def auth_flow(self, request: httpx.Request):
        if p.origin_of(str(request.url)) in self._origins:
            request.headers["Authorization"] = self._header
        yield request


class DeviceApi:
    """Claim and report over the socket when offered, else over HTTP."""

    def __init__(self, http: httpx.AsyncClient, operations: SocketOperations | None):
        self.http = http
        self.operations = operations

    def _socket(self, operation: str) -> SocketOperations | None:
        ops = self.operations
        return ops if ops is not None and ops.available(operation) else None

    async def claim(self, endpoints: p.Endpoints):
        ops = self._socket("claim")
        if ops is not None:
            return await ops.call(p.claim_request)
        return await self.http.post(endpoints.claim, headers=p.CLAIM_HEADERS)

    def ordered(self, path: str) -> bool:
        """Whether the report for ``path`` travels on the socket, where the server answers frames
        in the order they were sent: then reports may be sent without waiting for each answer."""
        job, command = p.Endpoints.events_job(path), p.Endpoints.result_command(path)
        return bool((job and self._socket("event")) or (command and self._socket("command_result")))

    async def report(
        self, endpoints: p.Endpoints, path: str, body: dict[str, Any], *, socket_only=False
    ):
        """POST ``body`` to ``path`` (an event or a command result), or its frame.
        ``socket_only``: a report sent without waiting for the one before it, which only the
        socket keeps in order; without the socket it fails like a network error."""
        job, command = p.Endpoints.events_job(path), p.Endpoints.result_command(path)
        if job and (ops := self._socket("event")) is not None:
            return await ops.call(lambda rid: p.event_request(rid, job, body))
        if command and (ops := self._socket("command_result")) is not None:
            return await ops.call(lambda rid: p.command_result_request(rid, command, body))
        if socket_only:
            raise OperationUnavailable("the socket closed")
        return await self.http.post(endpoints.base + path, json=body)
