"""The connection record: the four connection columns of ``qprint_device``.

Invariant: at most one live connection per device, on any node. The row names it
(``connection_id``, ``connection_node``); its lease (``connection_lease_expires_at``) is set and
compared on the **database clock**; ``connection_ready`` says the device has reported what it
applied. This module is the only writer of those four columns, and every write is ONE statement:

- :func:`take` - a new connection takes the row unconditionally (newest wins), not ready, lease
  ``now() + 3 x heartbeat``, and ``connection_since = now()`` (shown to people, read by no
  rule); one read after it lists the device's jobs in RECEIVED or SPOOLED (``hello``'s
  ``active_jobs``, which the agent answers from its journal: docs/PROTOCOL.md). The caller then
  publishes ``replaced`` so an older socket closes.
- :func:`ping` - renew the lease **and**, in the same statement, return what the connection needs
  to know (revisions, a pending command, a job a claim would hand out now). One round trip per
  heartbeat.
- :func:`mark_ready` - record the revisions the device applied and mark the connection ready.
- :func:`clear` - forget the connection on close.
- :func:`poll` - a CloudPRNT printer's poll (docs/CLOUDPRNT.md): there is no socket, the polling
  is the connection. A live connection from the printer's bound MAC renews its lease in one
  statement; otherwise the poll takes the row (and binds ``printer_mac`` when none is bound).
  ``printer_mac`` is written here only (:func:`poll`, :func:`forget_printer`).

Every statement after ``take`` is guarded ``WHERE id = ? AND connection_id = ?``: a statement that
matches no row means another connection took the device, and the caller closes with 4000
(:class:`Replaced`). :func:`read` is the same answer as :func:`ping` without renewing, for a wakeup.

When an endpoint of the device's tenant wants ``device.connected`` / ``device.disconnected``
webhooks, :func:`take` and :func:`clear` run in one transaction with the outbox rows announcing
them (``qprint.webhooks.outbox.announcing_device``); otherwise the statement runs alone, as always.

The state a statement returns (:class:`DeviceState`) carries the inputs of the claim gate
(:mod:`qprint.core.gate`), the lease judged in the same statement, so the session decides
``wake`` exactly as a claim would. The functions are synchronous (Django's connection); the socket
path runs them on its own threads (``qprint.realtime.socket_db``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection as db

from qprint.core import sql
from qprint.domain import reconcile
from qprint.models import Device, raw
from qprint.webhooks import DEVICE_CONNECTED, DEVICE_DISCONNECTED, outbox

LEASE_HEARTBEATS = 3


class Replaced(Exception):
    """The row no longer names this connection: a newer one took the device (close 4000)."""


@dataclass(frozen=True)
class Taken:
    """What a new connection learns when it takes the row (the ``hello`` frame's content)."""

    enabled: bool
    paused: bool
    control_revision: int
    settings_revision: int
    settings: dict[str, Any]
    #: ``(job_id, claim_id, status)`` of the device's jobs in RECEIVED or SPOOLED.
    active_jobs: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class DeviceState:
    """What the row says now: enough to decide, without another query, what to tell the device.

    Its first eight fields are the claim gate's inputs (:class:`qprint.core.gate.GateInputs`).
    """

    enabled: bool
    connection_live: bool
    connection_ready: bool
    paused: bool
    control_revision: int
    control_applied_revision: int
    settings_revision: int
    settings_applied_revision: int
    token_hash: str
    command_pending: bool
    claimed_job_id: str | None
    job_queued: bool


def _state_columns() -> str:
    """The state a connection needs, as columns of the device row plus scalar subqueries."""
    t = raw.tables()
    d = t["device"]  # SQLite's RETURNING does not see a table alias: qualify by name
    return f"""
        {d}.enabled, {raw.live_connection(d)} AS connection_live, {d}.connection_ready,
        {d}.paused, {d}.control_revision, {d}.control_applied_revision,
        {d}.settings_revision, {d}.settings_applied_revision, {d}.token_hash,
        {raw.pending_command_exists(d)} AS command_pending,
        {raw.held_job_id(d)} AS claimed_job_id,
        {raw.claimable_job_exists(d)} AS job_queued
    """


def _state(row: tuple) -> DeviceState:
    return DeviceState(
        enabled=bool(row[0]),
        connection_live=bool(row[1]),
        connection_ready=bool(row[2]),
        paused=bool(row[3]),
        control_revision=int(row[4]),
        control_applied_revision=int(row[5]),
        settings_revision=int(row[6]),
        settings_applied_revision=int(row[7]),
        token_hash=row[8],
        command_pending=bool(row[9]),
        claimed_job_id=str(uuid.UUID(str(row[10]))) if row[10] is not None else None,
        job_queued=bool(row[11]),
    )


def _guarded_row(device_id: int, connection_id: uuid.UUID, statement: str, params: list) -> tuple:
    """Run one statement guarded ``WHERE id = %s AND connection_id = %s`` and return its row.

    No row means another connection took the device: :class:`Replaced`.
    """
    with db.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    if row is None:
        raise Replaced(f"device {device_id} connection {connection_id} was replaced")
    return row


def lease_seconds(heartbeat_seconds: float) -> float:
    return LEASE_HEARTBEATS * heartbeat_seconds


def take(device_id: int, connection_id: uuid.UUID, node: str, heartbeat_seconds: float) -> Taken:
    """Take the device's row for a new connection: newest wins, not ready, a fresh lease.

    Raises :class:`Replaced` when the device is gone (deleted) - the caller refuses the socket.
    """
    t = raw.tables()
    with outbox.announcing_device(device_id, DEVICE_CONNECTED) as announce, db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {t["device"]} SET
                connection_id = %s, connection_node = %s, connection_ready = {sql.false()},
                connection_lease_expires_at = {sql.seconds_from_now()}, last_seen_at = {sql.now()},
                connection_since = {sql.now()}
            WHERE id = %s
            RETURNING enabled, paused, control_revision, settings_revision, settings
            """,
            [
                sql.uuid_param(connection_id),
                node,
                lease_seconds(heartbeat_seconds),
                device_id,
            ],
        )
        row = cursor.fetchone()
        if row is None:
            raise Replaced(f"device {device_id} does not exist")
        announce()
    return Taken(
        enabled=bool(row[0]),
        paused=bool(row[1]),
        control_revision=int(row[2]),
        settings_revision=int(row[3]),
        settings=sql.json_value(row[4]) or {},
        active_jobs=reconcile.active_jobs(device_id),
    )


def ping(device_id: int, connection_id: uuid.UUID, heartbeat_seconds: float) -> DeviceState:
    """Renew the lease and learn, in the same statement, what the connection has not been told."""
    t = raw.tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"""
            UPDATE {t["device"]} SET
                connection_lease_expires_at = {sql.seconds_from_now()}, last_seen_at = {sql.now()}
            WHERE id = %s AND connection_id = %s
            RETURNING {_state_columns()}
            """,
        [lease_seconds(heartbeat_seconds), device_id, sql.uuid_param(connection_id)],
    )
    return _state(row)


def read(device_id: int, connection_id: uuid.UUID) -> DeviceState:
    """What :func:`ping` returns, without renewing the lease (a wakeup, a reconcile)."""
    t = raw.tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"""
            SELECT {_state_columns()} FROM {t["device"]}
            WHERE id = %s AND connection_id = %s
            """,
        [device_id, sql.uuid_param(connection_id)],
    )
    return _state(row)


def mark_ready(
    device_id: int,
    connection_id: uuid.UUID,
    control_applied_revision: int,
    settings_applied_revision: int,
    heartbeat_seconds: float,
) -> DeviceState:
    """Record what the device applied, mark the connection ready and renew its lease.

    The caller has checked that the revisions are not above those it sent (4400 otherwise).
    """
    t = raw.tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"""
            UPDATE {t["device"]} SET
                connection_ready = {sql.true()},
                control_applied_revision = %s, settings_applied_revision = %s,
                connection_lease_expires_at = {sql.seconds_from_now()}, last_seen_at = {sql.now()}
            WHERE id = %s AND connection_id = %s
            RETURNING {_state_columns()}
            """,
        [
            control_applied_revision,
            settings_applied_revision,
            lease_seconds(heartbeat_seconds),
            device_id,
            sql.uuid_param(connection_id),
        ],
    )
    return _state(row)


def clear(device_id: int, connection_id: uuid.UUID) -> bool:
    """Forget this connection (socket closed). False when a newer connection holds the row."""
    t = raw.tables()
    with (
        outbox.announcing_device(device_id, DEVICE_DISCONNECTED) as announce,
        db.cursor() as cursor,
    ):
        cursor.execute(
            f"""
            UPDATE {t["device"]} SET
                connection_id = NULL, connection_node = '', connection_ready = {sql.false()},
                connection_lease_expires_at = NULL
            WHERE id = %s AND connection_id = %s
            """,
            [device_id, sql.uuid_param(connection_id)],
        )
        cleared = cursor.rowcount == 1
        if cleared:
            announce()
    return cleared


class MacRefused(Exception):
    """A CloudPRNT poll from another MAC address than the one the device is bound to."""

    def __init__(self, bound: str) -> None:
        super().__init__(f"the device is bound to printer {bound}")
        self.bound = bound


@dataclass(frozen=True)
class Polled:
    """What a CloudPRNT poll's statement returns: the row's state (the claim gate's inputs, a
    held or claimable job), whether this poll took the connection (it was not live), and the
    printer's row as stored (``None`` before its first report)."""

    state: DeviceState
    taken: bool
    printer_status: str | None
    printer_capabilities: dict[str, Any] | None


def _poll_columns() -> str:
    t = raw.tables()
    d, p = t["device"], t["printer"]
    return f"""{_state_columns()},
        (SELECT p.status FROM {p} p WHERE p.device_id = {d}.id
         ORDER BY p.is_default DESC, p.id LIMIT 1) AS printer_status,
        (SELECT p.capabilities FROM {p} p WHERE p.device_id = {d}.id
         ORDER BY p.is_default DESC, p.id LIMIT 1) AS printer_capabilities"""


def _polled(row: tuple, taken: bool) -> Polled:
    capabilities = sql.json_value(row[13]) if row[13] is not None else None
    return Polled(
        state=_state(row[:12]),
        taken=taken,
        printer_status=row[12],
        printer_capabilities=capabilities,
    )


def poll(device_id: int, mac: str, node: str, poll_seconds: float) -> Polled:
    """A CloudPRNT printer polled: its connection is the polling itself (docs/CLOUDPRNT.md).

    The common case is ONE statement: a live connection from the bound MAC renews its lease
    (``3 x poll_seconds``) and returns the state a claim needs. Otherwise (the first poll, or the
    first after the lease ran out) the row is taken: a new ``connection_id``, ready at once (a
    printer has nothing to apply: the server applies control and settings for it, so the applied
    revisions are the current ones), the MAC bound when none is, and ``device.connected``
    announced. A poll from another MAC than the bound one changes nothing: :class:`MacRefused`.
    """
    t = raw.tables()
    d = t["device"]
    lease = lease_seconds(poll_seconds)
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {d} SET
                connection_node = %s, connection_ready = {sql.true()},
                control_applied_revision = control_revision,
                settings_applied_revision = settings_revision,
                connection_lease_expires_at = {sql.seconds_from_now()}, last_seen_at = {sql.now()}
            WHERE id = %s AND printer_mac = %s AND {raw.live_connection(d)}
            RETURNING {_poll_columns()}
            """,
            [node, lease, device_id, mac],
        )
        row = cursor.fetchone()
    if row is not None:
        return _polled(row, taken=False)
    with outbox.announcing_device(device_id, DEVICE_CONNECTED) as announce, db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {d} SET
                connection_id = %s, connection_node = %s, connection_ready = {sql.true()},
                control_applied_revision = control_revision,
                settings_applied_revision = settings_revision,
                connection_lease_expires_at = {sql.seconds_from_now()}, last_seen_at = {sql.now()},
                connection_since = {sql.now()},
                printer_mac = CASE WHEN printer_mac = '' THEN %s ELSE printer_mac END
            WHERE id = %s AND (printer_mac = '' OR printer_mac = %s)
            RETURNING {_poll_columns()}
            """,
            [sql.uuid_param(uuid.uuid4()), node, lease, mac, device_id, mac],
        )
        row = cursor.fetchone()
        if row is not None:
            announce()
    if row is None:
        bound = Device.objects.filter(pk=device_id).values_list("printer_mac", flat=True).first()
        raise MacRefused(bound or "")
    return _polled(row, taken=True)


def forget_printer(device_id: int) -> bool:
    """Unbind a CloudPRNT device's printer (a replaced printer): the next poll, from any MAC,
    binds again. The connection is forgotten with it. False when the device does not exist."""
    t = raw.tables()
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {t["device"]} SET
                printer_mac = '', connection_id = NULL, connection_node = '',
                connection_ready = {sql.false()}, connection_lease_expires_at = NULL
            WHERE id = %s
            """,
            [device_id],
        )
        return cursor.rowcount == 1


def read_settings(device_id: int, connection_id: uuid.UUID) -> tuple[int, dict[str, Any]]:
    """The device's settings revision and values (read only when the revision moved)."""
    t = raw.tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"SELECT settings_revision, settings FROM {t['device']} "
        "WHERE id = %s AND connection_id = %s",
        [device_id, sql.uuid_param(connection_id)],
    )
    return int(row[0]), sql.json_value(row[1]) or {}


def live_connections_by_node() -> dict[str, int]:
    """Live connections (lease not expired, database clock) per node, for metrics and qcluster."""
    return Device.objects.live_connections_by_node()


def live_connections_of_node(node_id: str) -> int:
    """The ``connections`` gauge of ``cluster_node``: live connection rows naming ``node_id``."""
    return Device.objects.filter(connection_node=node_id).live().count()
