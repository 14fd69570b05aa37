"""Reaching a server: which URL to try next, how long to wait, and what a failure means.

The agent treats refusals in three ways (docs/PROTOCOL.md):

- **stop**: 401/403 at the upgrade (credentials refused: a person must act) and close 4001
  (device disabled or token revoked). Retrying would only hammer the server.
- **reconnect now**: close 4003 (this node is draining): go to the next URL at once, with a
  little jitter so a drained node's devices do not arrive elsewhere in one burst.
- **retry with backoff**: everything else (5xx at the upgrade, connection refused or reset, close
  4000/4400/4408/1001/1012, a lost socket). The delay grows exponentially with full jitter between
  half the step and the step, capped, and resets once a connection becomes ready.
"""

import random
from dataclasses import dataclass, field
from enum import Enum

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from qprint.agent.protocol import SUBPROTOCOL, CloseCode, Endpoints


class Disposition(Enum):
    STOP = "stop"
    RECONNECT_NOW = "reconnect_now"
    RETRY = "retry"


class CredentialsRefused(Exception):
    """The server will not let this device in until a person changes something."""


@dataclass
class Backoff:
    """Exponential backoff with jitter: attempt n waits in [step/2, step], step = initial*2^n."""

    initial: float = 0.5
    maximum: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def step(self) -> float:
        return min(self.maximum, self.initial * (2**self.attempt))

    def next_delay(self) -> float:
        step = self.step()
        self.attempt = min(self.attempt + 1, 62)
        return self.rng.uniform(step / 2, step)

    def reset(self) -> None:
        self.attempt = 0


class UrlRotation:
    """The servers to try, in turn; a draining node sends the device to the next one."""

    def __init__(self, urls: list[str]):
        if not urls:
            raise ValueError("at least one server URL is needed")
        self.endpoints = [Endpoints.from_url(u) for u in urls]
        self.index = 0

    @property
    def current(self) -> Endpoints:
        return self.endpoints[self.index]

    def advance(self) -> Endpoints:
        self.index = (self.index + 1) % len(self.endpoints)
        return self.current


def reconnect_jitter(rng: random.Random | None = None) -> float:
    """The small delay before reconnecting after a drain (spreads the herd over 0-0.5 s)."""
    return (rng or random).uniform(0.0, 0.5)


def classify_handshake_failure(exc: BaseException) -> Disposition:
    """What a failed opening handshake means; raises nothing, decides only."""
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        if status in (401, 403):
            return Disposition.STOP
        return Disposition.RETRY
    return Disposition.RETRY


def classify_close(code: int | None) -> Disposition:
    if code == CloseCode.DISABLED:
        return Disposition.STOP
    if code == CloseCode.DRAINING:
        return Disposition.RECONNECT_NOW
    return Disposition.RETRY


def close_code(exc: ConnectionClosed) -> int | None:
    """The close code the server sent (None when the connection dropped without a close frame)."""
    return exc.rcvd.code if exc.rcvd is not None else None


def handshake_hint(status: int | None) -> str | None:
    """What a refused upgrade probably means, for the person reading the agent's log."""
    if status == 404:
        return (
            "nothing serves the device socket at this URL: --url must be where the server mounts "
            "qprint.urls (e.g. http://host:8000/qprint/; the socket is ws/device/ under it), and "
            "the server must speak WebSockets: Daphne or another ASGI server running the project's "
            "asgi.py with qprint.routing, not Django's runserver without 'daphne' in INSTALLED_APPS"
        )
    if status == 500:
        return (
            "the server failed the upgrade: its log says why (socket_refused: draining or its "
            "database did not answer; socket_no_route: --url is not where qprint.urls is mounted; "
            "'Django can only handle ASGI/HTTP connections': the project's asgi.py does not route "
            "WebSockets to qprint.routing, docs/INSTALL.md)"
        )
    if status is not None and status not in (401, 403, 429, 503):
        return (
            f"the server answered the upgrade with HTTP {status}: is --url a qprint server, "
            "served by an ASGI server with WebSockets (Daphne), behind a proxy that passes "
            "the Upgrade header?"
        )
    return None


def handshake_status(exc: BaseException) -> int | None:
    return exc.response.status_code if isinstance(exc, InvalidStatus) else None


async def open_socket(endpoints: Endpoints, token: str, open_timeout: float = 10.0):
    """Open the device socket with the required subprotocol and the bearer token.

    Raises ``InvalidHandshake``/``OSError``/``TimeoutError`` like ``websockets.connect``.
    """
    ws = await websockets.connect(
        endpoints.socket,
        subprotocols=[SUBPROTOCOL],
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=open_timeout,
        close_timeout=5,
        max_size=2**20,
    )
    if ws.subprotocol != SUBPROTOCOL:
        await ws.close()
        raise InvalidHandshake(f"server did not agree on {SUBPROTOCOL}")
    return ws
