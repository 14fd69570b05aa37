"""The device sessions, rows and taken records the session's tests build (no socket, no
database): shared by ``test_session.py`` and ``test_session_operations.py``."""

from __future__ import annotations

import uuid
from dataclasses import replace

from qprint.domain.connection import DeviceState, Taken
from qprint.realtime.session import DeviceSession

TOKEN_HASH = "a" * 64
CONNECTION = uuid.uuid4()


def session(
    heartbeat: float = 20, max_frame_bytes: int = 1024, inline_cap: int = 262144
) -> DeviceSession:
    return DeviceSession(
        device_id=7,
        token_hash=TOKEN_HASH,
        connection_id=CONNECTION,
        node="node-a",
        heartbeat_seconds=heartbeat,
        max_frame_bytes=max_frame_bytes,
        inline_cap=inline_cap,
    )


def taken(control: int = 1, settings: int = 1, paused: bool = False) -> Taken:
    return Taken(
        enabled=True,
        paused=paused,
        control_revision=control,
        settings_revision=settings,
        settings={"tray": 1},
    )


def state(**changes) -> DeviceState:
    """A row whose gate is open, with a job waiting, unless ``changes`` say otherwise."""
    base = DeviceState(
        enabled=True,
        connection_live=True,
        connection_ready=True,
        paused=False,
        control_revision=1,
        control_applied_revision=1,
        settings_revision=1,
        settings_applied_revision=1,
        token_hash=TOKEN_HASH,
        command_pending=False,
        claimed_job_id=None,
        job_queued=True,
    )
    return replace(base, **changes)


def ready_session(**kwargs) -> DeviceSession:
    s = session(**kwargs)
    s.hello(taken(), now=0.0)
    s.marked_ready(state(job_queued=False))
    return s
