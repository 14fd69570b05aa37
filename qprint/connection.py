"""The connection record: the four connection columns of ``qprint_device``.

Invariant: at most one live connection per device, on any node. The row names it
(``connection_id``, ``connection_node``); its lease (``connection_lease_expires_at``) is set and
compared on the **database clock**; ``connection_ready`` says the device has reported what it
applied. This module is the only writer of those four columns, and every write is ONE statement:

- :func:`take` - a new connection takes the row unconditionally (newest wins), not ready, lease
  ``now() + 3 x heartbeat``. The caller then publishes ``replaced`` so an older socket closes.
- :func:`ping` - renew the lease **and**, in the same statement, return what the connection needs
  to know (revisions, a pending command, a job a claim would hand out now). One round trip per
  heartbeat.
- :func:`mark_ready` - record the revisions the device applied and mark the connection ready.
- :func:`clear` - forget the connection on close.

Every statement after ``take`` is guarded ``WHERE id = ? AND connection_id = ?``: a statement that
matches no row means another connection took the device, and the caller closes with 4000
(:class:`Replaced`). :func:`read` is the same answer as :func:`ping` without renewing, for a wakeup.

When an endpoint of the device's tenant wants ``device.connected`` / ``device.disconnected``
webhooks, :func:`take` and :func:`clear` run in one transaction with the outbox rows announcing
them (``qprint.webhooks.outbox.announcing_device``); otherwise the statement runs alone, as always.

The functions are synchronous (Django's connection); the socket path runs them on its own threads
(``qprint.socket_db``) so they never queue behind HTTP views.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection as db

from qprint.models import Device, DeviceCommand, PrintJob
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


@dataclass(frozen=True)
class DeviceState:
    """What the row says now: enough to decide, without another query, what to tell the device."""

    enabled: bool
    paused: bool
    control_revision: int
    settings_revision: int
    control_applied_revision: int
    settings_applied_revision: int
    ready: bool
    token_hash: str
    command_pending: bool
    claimed_job_id: str | None
    job_queued: bool

    @property
    def gate_open(self) -> bool:
        """The claim gate as the row shows it (the lease is live: this statement just read it)."""
        return (
            self.enabled
            and self.ready
            and not self.paused
            and self.control_applied_revision == self.control_revision
            and self.settings_applied_revision == self.settings_revision
        )


def _vendor_sql() -> dict[str, str]:
    """The SQL fragments that differ between PostgreSQL and SQLite (3.35+ has RETURNING)."""
    if db.vendor == "postgresql":
        return {
            "now": "now()",
            "lease": "now() + make_interval(secs => %s)",
            "true": "true",
            "false": "false",
        }
    return {
        "now": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')",
        "lease": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || %s || ' seconds')",
        "true": "1",
        "false": "0",
    }


def _tables() -> dict[str, str]:
    return {
        "device": Device._meta.db_table,
        "job": PrintJob._meta.db_table,
        "command": DeviceCommand._meta.db_table,
    }


def _state_columns(sql: dict[str, str]) -> str:
    """The state a connection needs, as columns of ``d`` plus scalar subqueries (one round trip)."""
    t = _tables()
    d = t["device"]  # SQLite's RETURNING does not see a table alias: qualify by name
    return f"""
        {d}.enabled, {d}.paused, {d}.control_revision, {d}.settings_revision,
        {d}.control_applied_revision, {d}.settings_applied_revision, {d}.connection_ready,
        {d}.token_hash,
        EXISTS (SELECT 1 FROM {t["command"]} c
                WHERE c.device_id = {d}.id AND c.status = 'PENDING') AS command_pending,
        (SELECT j.id FROM {t["job"]} j
         WHERE j.device_id = {d}.id AND j.status = 'CLAIMED' LIMIT 1) AS claimed_job_id,
        EXISTS (SELECT 1 FROM {t["job"]} j
                WHERE j.device_id = {d}.id AND j.status = 'QUEUED'
                  AND (j.expires_at IS NULL OR j.expires_at > {sql["now"]})) AS job_queued
    """


def _state(row: tuple) -> DeviceState:
    return DeviceState(
        enabled=bool(row[0]),
        paused=bool(row[1]),
        control_revision=int(row[2]),
        settings_revision=int(row[3]),
        control_applied_revision=int(row[4]),
        settings_applied_revision=int(row[5]),
        ready=bool(row[6]),
        token_hash=row[7],
        command_pending=bool(row[8]),
        claimed_job_id=str(uuid.UUID(str(row[9]))) if row[9] is not None else None,
        job_queued=bool(row[10]),
    )


def _uuid_param(value: uuid.UUID) -> Any:
    # Django stores UUIDs as 32 hex characters on SQLite and as uuid on PostgreSQL.
    return value if db.vendor == "postgresql" else value.hex


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return value or {}


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
    sql = _vendor_sql()
    t = _tables()
    with outbox.announcing_device(device_id, DEVICE_CONNECTED) as announce, db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {t["device"]} SET
                connection_id = %s, connection_node = %s, connection_ready = {sql["false"]},
                connection_lease_expires_at = {sql["lease"]}, last_seen_at = {sql["now"]}
            WHERE id = %s
            RETURNING enabled, paused, control_revision, settings_revision, settings
            """,
            [
                _uuid_param(connection_id),
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
        settings=_json(row[4]),
    )


def ping(device_id: int, connection_id: uuid.UUID, heartbeat_seconds: float) -> DeviceState:
    """Renew the lease and learn, in the same statement, what the connection has not been told."""
    sql = _vendor_sql()
    t = _tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"""
            UPDATE {t["device"]} SET
                connection_lease_expires_at = {sql["lease"]}, last_seen_at = {sql["now"]}
            WHERE id = %s AND connection_id = %s
            RETURNING {_state_columns(sql)}
            """,
        [lease_seconds(heartbeat_seconds), device_id, _uuid_param(connection_id)],
    )
    return _state(row)


def read(device_id: int, connection_id: uuid.UUID) -> DeviceState:
    """What :func:`ping` returns, without renewing the lease (a wakeup, a reconcile)."""
    sql = _vendor_sql()
    t = _tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"""
            SELECT {_state_columns(sql)} FROM {t["device"]}
            WHERE id = %s AND connection_id = %s
            """,
        [device_id, _uuid_param(connection_id)],
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
    sql = _vendor_sql()
    t = _tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"""
            UPDATE {t["device"]} SET
                connection_ready = {sql["true"]},
                control_applied_revision = %s, settings_applied_revision = %s,
                connection_lease_expires_at = {sql["lease"]}, last_seen_at = {sql["now"]}
            WHERE id = %s AND connection_id = %s
            RETURNING {_state_columns(sql)}
            """,
        [
            control_applied_revision,
            settings_applied_revision,
            lease_seconds(heartbeat_seconds),
            device_id,
            _uuid_param(connection_id),
        ],
    )
    return _state(row)


def clear(device_id: int, connection_id: uuid.UUID) -> bool:
    """Forget this connection (socket closed). False when a newer connection holds the row."""
    sql = _vendor_sql()
    t = _tables()
    with (
        outbox.announcing_device(device_id, DEVICE_DISCONNECTED) as announce,
        db.cursor() as cursor,
    ):
        cursor.execute(
            f"""
            UPDATE {t["device"]} SET
                connection_id = NULL, connection_node = '', connection_ready = {sql["false"]},
                connection_lease_expires_at = NULL
            WHERE id = %s AND connection_id = %s
            """,
            [device_id, _uuid_param(connection_id)],
        )
        cleared = cursor.rowcount == 1
        if cleared:
            announce()
    return cleared


def read_settings(device_id: int, connection_id: uuid.UUID) -> tuple[int, dict[str, Any]]:
    """The device's settings revision and values (read only when the revision moved)."""
    t = _tables()
    row = _guarded_row(
        device_id,
        connection_id,
        f"SELECT settings_revision, settings FROM {t['device']} "
        "WHERE id = %s AND connection_id = %s",
        [device_id, _uuid_param(connection_id)],
    )
    return int(row[0]), _json(row[1])


def live_connections_by_node() -> dict[str, int]:
    """Live connections (lease not expired, database clock) per node, for metrics and qcluster."""
    sql = _vendor_sql()
    t = _tables()
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT connection_node, count(*) FROM {t["device"]}
            WHERE connection_id IS NOT NULL AND connection_lease_expires_at > {sql["now"]}
            GROUP BY connection_node
            """
        )
        return {node: int(count) for node, count in cursor.fetchall()}


def live_connections_of_node(node_id: str) -> int:
    """The ``connections`` gauge of ``cluster_node``: live connection rows naming ``node_id``."""
    return live_connections_by_node().get(node_id, 0)
