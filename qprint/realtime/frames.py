"""The device session's vocabulary (wire v1, docs/PROTOCOL.md): the rows the driver hands in, the
typed events a frame from the device means, and what the session answers (:class:`Close`,
:class:`Plan`). Shared by :mod:`qprint.realtime.session`, :mod:`qprint.realtime.session_operations`
and their driver (:mod:`qprint.realtime.consumer`); like them it does no I/O and imports nothing
of Django (the rows are duck-typed protocols, not the domain's classes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from qprint.core import gate


class ProtocolError(Exception):
    """A frame the device must not send: close 4400, change nothing."""


# -- what the driver hands in: the rows its statements returned (duck-typed, no import of them) --


class TakenRow(Protocol):
    """The row a new connection took (:class:`qprint.domain.connection.Taken`)."""

    paused: bool
    control_revision: int
    settings_revision: int
    settings: dict[str, Any]
    active_jobs: tuple[tuple[str, str, str], ...]


class StateRow(gate.GateInputs, Protocol):
    """What the row says now (:class:`qprint.domain.connection.DeviceState`): the gate's inputs
    and what the connection may not have been told yet."""

    token_hash: str
    command_pending: bool
    claimed_job_id: str | None
    job_queued: bool
    #: A command PENDING or DELIVERED before (read with a ``state`` frame only).
    command_open: bool


# -- typed events: what a frame from the device means (:meth:`DeviceSession.receive`) -----------


@dataclass(frozen=True)
class StateReported:
    """A ``state`` frame: the revisions the device applied (checked against those sent)."""

    control_revision: int
    settings_revision: int
    #: ``push.inline_max_bytes`` (capped by the server), None: the frame asks for no push.
    push_inline_max: int | None = None


@dataclass(frozen=True)
class Ping:
    """A ``ping`` frame: renew the lease."""


@dataclass(frozen=True)
class PrintersReported:
    """A ``printers`` frame: the list, for the domain to check and store."""

    printers: Any


@dataclass(frozen=True)
class OperationRequest:
    """An operation frame, parsed: ``operation`` one of ``wire.REQUEST_OPERATIONS``, ``target``
    the job or command id, ``body`` what the HTTP API would have received as the request body (a
    claim's: the ``inline_max_bytes`` it asked for, which the HTTP claim sends as a header).
    The driver answers it through :mod:`qprint.domain.device_operations`, as the HTTP API does."""

    operation: str
    request_id: str
    target: str | None = None
    body: dict[str, Any] = field(default_factory=dict)


Event = StateReported | Ping | PrintersReported | OperationRequest


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
    #: Claim for the device (push mode), then send :meth:`DeviceSession.pushed` of the answer.
    push: bool = False


def revision(frame: dict[str, Any], name: str) -> int:
    value = frame.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{name} must be a non-negative integer")
    return value


def encode(frame: dict[str, Any]) -> str:
    return json.dumps(frame)
