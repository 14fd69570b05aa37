"""Wire protocol v1 of the device socket and the device HTTP API, seen from the device.

Frames are JSON text objects with a ``type``; the server speaks first with ``hello``. This module
only builds and checks frames and URLs: no I/O happens here.
"""

import base64
import binascii
import json
import re
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from qprint.core import wire

SUBPROTOCOL = wire.SUBPROTOCOL

# Events a device reports about a job; the final ones end the job on the server.
EVENT_TYPES = (
    "RECEIVED",
    "SPOOLED",
    "PRINTED",
    "FAILED",
    "OUTCOME_UNKNOWN",
    "CANCELLED",
    "PROGRESS",
)
FINAL_EVENT_TYPES = frozenset({"PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED"})

COMMAND_TYPES = ("CANCEL_JOB", "PRINT_TEST_PAGE", "REPORT_PRINTERS")
#: Documents of up to this many bytes come inside an assignment, pushed or claimed (the server may
#: cap it lower); the socket's frames are bounded at 1 MiB, base64 adds a third.
INLINE_MAX_BYTES = 262144


class CloseCode(IntEnum):
    """Close codes the server uses (docs/PROTOCOL.md)."""

    GOING_AWAY = wire.CLOSE_GOING_AWAY
    SERVICE_RESTART = wire.CLOSE_SERVICE_RESTART
    REPLACED = wire.CLOSE_REPLACED
    DISABLED = wire.CLOSE_DISABLED
    DRAINING = wire.CLOSE_DRAINING
    PROTOCOL_ERROR = wire.CLOSE_PROTOCOL_ERROR
    HEARTBEAT_MISSED = wire.CLOSE_HEARTBEAT_MISSED


class ProtocolError(Exception):
    """A frame the agent cannot understand."""


@dataclass(frozen=True)
class Hello:
    connection_id: str
    node: str
    heartbeat_seconds: float
    control_revision: int
    paused: bool
    settings_revision: int
    settings: dict[str, Any] = field(default_factory=dict)
    #: The operations the server answers as frames (``claim``, ``event``, ``command_result``).
    operations: frozenset[str] = frozenset()
    # The device's jobs the server holds in RECEIVED or SPOOLED: (job_id, claim_id, status).
    # None when the server did not send the list (an older server): nothing to reconcile.
    active_jobs: tuple[tuple[str, str, str], ...] | None = None


def parse_frame(text: str | bytes) -> dict[str, Any]:
    """Decode one frame; raise ``ProtocolError`` unless it is a JSON object with a string type."""
    if isinstance(text, bytes):
        raise ProtocolError("binary frames are not part of wire v1")
    try:
        frame = json.loads(text)
    except ValueError as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from exc
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ProtocolError("frame is not an object with a string 'type'")
    return frame


def uuid_text(value: Any, what: str) -> str:
    """``value`` as the canonical text of a UUID (how the server names jobs, claims and
    commands); ``ProtocolError`` otherwise. Ids from the server become file names and URL paths
    on the device: nothing else may pass."""
    if not isinstance(value, str):
        raise ProtocolError(f"{what} must be a UUID, got {value!r}")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ProtocolError(f"{what} must be a UUID, got {value!r}") from None


def _int(frame: dict[str, Any], key: str) -> int:
    value = frame.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"'{key}' must be an integer, got {value!r}")
    return value


def parse_hello(frame: dict[str, Any]) -> Hello:
    if frame.get("type") != wire.HELLO:
        raise ProtocolError(f"expected hello, got {frame.get('type')!r}")
    control = frame.get("control") or {}
    settings = frame.get("settings") or {}
    heartbeat = frame.get("heartbeat_seconds")
    if not isinstance(heartbeat, int | float) or heartbeat <= 0:
        raise ProtocolError(f"bad heartbeat_seconds {heartbeat!r}")
    return Hello(
        connection_id=str(frame.get("connection_id", "")),
        node=str(frame.get("node", "")),
        heartbeat_seconds=float(heartbeat),
        control_revision=_int(control, "revision"),
        paused=bool(control.get("paused", False)),
        settings_revision=_int(settings, "revision"),
        settings=dict(settings.get("values") or {}),
        operations=frozenset(op for op in (frame.get("operations") or ()) if isinstance(op, str)),
        active_jobs=_active_jobs(frame.get("active_jobs")),
    )


def _active_jobs(value: Any) -> tuple[tuple[str, str, str], ...] | None:
    """hello's ``active_jobs``; an entry without a job id and a claim id (UUIDs) and a status is
    left out (the connection must not fail on it: the job is then reconciled on a later hello, or
    by a person)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ProtocolError("'active_jobs' must be a list")
    jobs = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("status"), str):
            continue
        try:
            job_id = uuid_text(item.get("job_id"), "job_id")
            claim_id = uuid_text(item.get("claim_id"), "claim_id")
        except ProtocolError:
            continue
        if item["status"]:
            jobs.append((job_id, claim_id, item["status"]))
    return tuple(jobs)


#: The frames that answer an operation request (they repeat its ``request_id``).
ANSWER_TYPES = wire.ANSWER_TYPES


def is_pushed_assignment(frame: dict[str, Any]) -> bool:
    """An ``assignment`` the server pushed (push mode): no request of ours answered by it."""
    return frame.get("type") == wire.ASSIGNMENT and frame.get("pushed") is True


def inline_document(frame: dict[str, Any]) -> bytes | None:
    """The document an assignment carries inline (``document_base64``), or None (then it
    is downloaded from ``document_url``; also when the inline text is not base64)."""
    text = frame.get(wire.DOCUMENT_BASE64)
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def claim_request(request_id: str) -> str:
    """A ``claim`` frame, asking for a document of up to :data:`INLINE_MAX_BYTES` inline."""
    return json.dumps(
        {"type": wire.CLAIM, "request_id": request_id, wire.INLINE_MAX_BYTES: INLINE_MAX_BYTES}
    )


#: The HTTP claim's headers: a document of up to :data:`INLINE_MAX_BYTES` inline.
CLAIM_HEADERS = {wire.INLINE_MAX_HEADER: str(INLINE_MAX_BYTES)}


def event_request(request_id: str, job_id: str, body: dict[str, Any]) -> str:
    """An event as a frame: the HTTP body's ``type`` travels as ``event_type``."""
    frame = {k: v for k, v in body.items() if k != "type"}
    frame.update(
        {"type": wire.EVENT, "request_id": request_id, "job_id": job_id, "event_type": body["type"]}
    )
    return json.dumps(frame)


def command_result_request(request_id: str, command_id: str, body: dict[str, Any]) -> str:
    return json.dumps(
        {"type": wire.COMMAND_RESULT, "request_id": request_id, "command_id": command_id, **body}
    )


def answer_of(frame: dict[str, Any]) -> tuple[int, dict[str, Any] | None, dict[str, str]]:
    """The HTTP status, body and headers an answer frame stands for (an ``assignment``'s
    ``more_queued`` is the HTTP claim's ``Qprint-More-Queued`` header)."""
    kind = frame["type"]
    if kind == wire.ASSIGNMENT:
        body = {k: v for k, v in frame.items() if k not in ("type", "request_id", wire.MORE_QUEUED)}
        more = frame.get(wire.MORE_QUEUED)
        if not isinstance(more, bool):
            return 200, body, {}
        return 200, body, {wire.MORE_QUEUED_HEADER: "true" if more else "false"}
    if kind == wire.NOTHING:
        return 204, None, {}
    if kind == wire.REFUSED:
        error = {"error": frame.get("error"), "message": frame.get("message")}
        return _int(frame, "status"), error, {}
    if kind == wire.EVENT_RECORDED:
        return _int(frame, "status"), frame.get("event"), {}
    if kind == wire.COMMAND_RECORDED:
        return _int(frame, "status"), frame.get("command"), {}
    raise ProtocolError(f"{kind!r} is not an answer")


#: The most events of one job sent in one HTTP request (the server's limit).
EVENTS_PER_REQUEST = wire.MAX_EVENTS_TOGETHER


def event_list_answers(body: Any, sent: int) -> list[tuple[int, str]] | None:
    """The ``(status, error code)`` of each of the ``sent`` events of a list that the server
    answered 200 ``{"results": [...]}`` (docs/API.md, "Several events of a job at once"), in
    order; None when the answer is not that (a server that takes one event per request)."""
    results = body.get(wire.RESULTS) if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != sent:
        return None
    answers = []
    for result in results:
        status = result.get("status") if isinstance(result, dict) else None
        if not isinstance(status, int) or isinstance(status, bool):
            return None
        answers.append((status, str(result.get("error") or "")))
    return answers


def more_queued(response: Any) -> bool | None:
    """What a claim's 200 says of the device's queue (docs/PROTOCOL.md, "Operations over the
    socket"): whether another job waited behind the one handed out; None when the server did not
    say (an older server): then the device claims again after the job, as it always did."""
    value = response.headers.get(wire.MORE_QUEUED_HEADER)
    return {"true": True, "false": False}.get(value.strip().lower()) if value else None


def parse_control(frame: dict[str, Any]) -> tuple[int, bool]:
    return _int(frame, "revision"), bool(frame.get("paused", False))


def parse_settings(frame: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return _int(frame, "revision"), dict(frame.get("values") or {})


def parse_command(frame: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``(command_id, command type, payload)`` of a ``command`` frame.

    The frame is ``{command_id, command_type, payload}`` (docs/PROTOCOL.md): ``type`` already
    names the frame. The command's own type is read from ``command_type`` (what the server
    sends), else ``kind``, else a nested ``command`` object.
    """
    nested = frame.get("command") if isinstance(frame.get("command"), dict) else {}
    command_id = frame.get("command_id") or nested.get("command_id") or nested.get("id")
    kind = frame.get("command_type") or frame.get("kind") or nested.get("type")
    payload = frame.get("payload", nested.get("payload")) or {}
    if not isinstance(command_id, str) or not command_id:
        raise ProtocolError("command frame without command_id")
    command_id = uuid_text(command_id, "command_id")
    if not isinstance(kind, str) or not kind:
        raise ProtocolError("command frame without a command type")
    if not isinstance(payload, dict):
        raise ProtocolError("command payload must be an object")
    return command_id, kind, payload


def state_frame(
    control_revision: int, settings_revision: int, push_inline_max: int | None = None
) -> str:
    """The ``state`` frame; ``push_inline_max``: ask for pushed assignments, with documents of
    up to that many bytes inline (docs/PROTOCOL.md, "Pushed assignments")."""
    frame: dict[str, Any] = {
        "type": wire.STATE,
        "control_revision": control_revision,
        "settings_revision": settings_revision,
    }
    if push_inline_max is not None:
        frame[wire.PUSH] = {wire.INLINE_MAX_BYTES: push_inline_max}
    return json.dumps(frame)


def ping_frame() -> str:
    return json.dumps({"type": wire.PING})


def printers_frame(printers: list[dict[str, Any]]) -> str:
    return json.dumps({"type": wire.PRINTERS, "printers": printers})


DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def origin_of(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``, the port made explicit; ``ws``/``wss`` read as
    ``http``/``https`` (the socket and the HTTP API of one server share an origin)."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        port = -1  # a port that is not a number matches no origin
    return scheme, (parts.hostname or "").lower(), port


@dataclass(frozen=True)
class Endpoints:
    """Where one server (a node or the load balancer) answers, derived from one base URL.

    The base is the mount of ``qprint.urls`` (``http://host:8000/qprint/``); a socket URL
    (``ws://host:8000/qprint/ws/device/``) is accepted too and mapped back to its base.
    """

    base: str

    @classmethod
    def from_url(cls, url: str) -> "Endpoints":
        parts = urlsplit(url)
        scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {url!r} (http://... or https://...)")
        try:
            parts.port  # noqa: B018 - read for its check (1 to 65535)
        except ValueError:
            raise ValueError(f"no valid port in {url!r}") from None
        if not parts.hostname:
            raise ValueError(f"no host in {url!r}")
        path = parts.path or "/"
        if path.rstrip("/").endswith("ws/device"):
            path = path.rstrip("/")[: -len("ws/device")]
        if not path.endswith("/"):
            path += "/"
        return cls(urlunsplit((scheme, parts.netloc, path, "", "")))

    @property
    def socket(self) -> str:
        parts = urlsplit(self.base)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return urlunsplit((scheme, parts.netloc, parts.path + "ws/device/", "", ""))

    @property
    def claim(self) -> str:
        return self.base + "api/v1/device/claim"

    @property
    def printers(self) -> str:
        return self.base + "api/v1/device/printers"

    def document(self, job_id: str) -> str:
        return self.base + f"api/v1/device/jobs/{job_id}/document"

    @property
    def origin(self) -> tuple[str, str, int]:
        """(scheme, host, port) of this base: where the device's token may be sent."""
        return origin_of(self.base)

    def resolve(self, url: str) -> str:
        """An URL from the server (``document_url``), resolved against this base; ``ValueError``
        unless it stays on this base's origin (scheme, host and port): the token goes nowhere
        else, whatever the server wrote."""
        resolved = urljoin(self.base, url)
        if origin_of(resolved) != self.origin:
            raise ValueError(f"{url!r} leaves {self.base} (another scheme, host or port)")
        return resolved

    @staticmethod
    def events_path(job_id: str) -> str:
        return f"api/v1/device/jobs/{job_id}/events"

    @staticmethod
    def command_result_path(command_id: str) -> str:
        return f"api/v1/device/commands/{command_id}/result"

    @staticmethod
    def events_job(path: str) -> str | None:
        """The job of an :meth:`events_path`, or None for another path."""
        match = _EVENTS_PATH.search(path)
        return match["id"] if match else None

    @staticmethod
    def result_command(path: str) -> str | None:
        """The command of a :meth:`command_result_path`, or None for another path."""
        match = _COMMAND_RESULT_PATH.search(path)
        return match["id"] if match else None


_EVENTS_PATH = re.compile(r"api/v1/device/jobs/(?P<id>[^/]+)/events$")
_COMMAND_RESULT_PATH = re.compile(r"api/v1/device/commands/(?P<id>[^/]+)/result$")
