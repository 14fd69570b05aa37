"""The claim gate: may this device be handed a job now? One function, one set of inputs.

A device may claim when it is enabled, its connection is live (the lease judged on the database
clock) and ready, it applied the current control and settings revisions, and it is not paused
(docs/JOBS.md, "The claim gate"). The claim (:mod:`qprint.domain.claim`) decides from the device
row it locked; the socket session decides from the row its last statement returned, so it never
sends ``wake`` for a claim that would be refused; the admin shows the same answer.

Each caller hands :func:`refusal` an object carrying the inputs of :class:`GateInputs`: a
``Device`` read through ``Device.objects.with_liveness()`` has them, and so does
:class:`qprint.domain.connection.DeviceState`.
"""

from __future__ import annotations

from typing import Protocol

from qprint.core.errors import Disabled, GateClosed, QPrintError


class GateInputs(Protocol):
    enabled: bool
    connection_live: bool
    connection_ready: bool
    paused: bool
    control_revision: int
    control_applied_revision: int
    settings_revision: int
    settings_applied_revision: int


def refusal(device: GateInputs) -> QPrintError | None:
    """Why ``device`` may not claim now (:class:`Disabled`, 403, or :class:`GateClosed`, 409,
    with ``not_connected``, ``not_ready``, ``stale_control``, ``stale_settings``, ``paused``), or
    ``None`` when the gate is open. The first reason in that order is the one given."""
    if not device.enabled:
        return Disabled()
    if not device.connection_live:
        return GateClosed("not_connected", "The device has no live connection.")
    if not device.connection_ready:
        return GateClosed("not_ready", "The device's connection has not reported its state yet.")
    if device.control_applied_revision != device.control_revision:
        return GateClosed(
            "stale_control",
            f"The device applied control revision {device.control_applied_revision}, "
            f"current is {device.control_revision}.",
        )
    if device.settings_applied_revision != device.settings_revision:
        return GateClosed(
            "stale_settings",
            f"The device applied settings revision {device.settings_applied_revision}, "
            f"current is {device.settings_revision}.",
        )
    if device.paused:
        return GateClosed("paused", "The device is paused.")
    return None


def open_sql(row: str) -> str:
    """:func:`refusal` is None, as SQL over ``row``: a relation with the columns of
    :class:`GateInputs` (``connection_live`` judged by the statement). For a statement that
    claims in the round trip that locks the device (``qprint.domain.claim``); the refusal itself
    is then told from the row by :func:`refusal`. ``tests/qprint/core/test_gate.py`` pins the two to
    agree on every combination of the inputs."""
    return (
        f"({row}.enabled AND {row}.connection_live AND {row}.connection_ready"
        f" AND {row}.control_applied_revision = {row}.control_revision"
        f" AND {row}.settings_applied_revision = {row}.settings_revision"
        f" AND NOT {row}.paused)"
    )


def is_open(device: GateInputs) -> bool:
    return refusal(device) is None


def check(device: GateInputs) -> None:
    """Raise :func:`refusal`'s error, if any."""
    error = refusal(device)
    if error is not None:
        raise error
