"""The connection record: the four connection columns of ``qprint_device``.

Invariant: at most one live connection per device, on any node. The row names it
(``connection_id``, ``connection_node``); its lease (``connection_lease_expires_at``) is set and
compared on the **database clock**; ``connection_ready`` says the device has reported what it
applied. This module is the only writer of those four columns, and every write is ONE statement:

- :func:`take` - a new connection takes the row unconditionally (newest wins), not ready, lease
  ``now() + 3 x heartbeat``, and ``connection_since = now()`` (shown to people, read by no
  rule); one read after it lists the device's jobs in RECEIVED or SPOOLED (``hello``'s
  ``active_jobs``, which the agent answers from its journal: docs/PROTOCOL.md). The statement
  also says whether the row named a connection when it took it (``Taken.displaced``, read in
  the row's lock on PostgreSQL): only then can an older socket be open, and the caller
  publishes ``replaced`` so it closes. An agent's row that names none was cleared by its last
  socket as it closed, however it closed (:func:`clear` is guarded by the socket's own id):
  nothing to tell. The common case, authentication included, is :func:`take_presented`:
  ``WHERE token_hash = <the hash of the presented token> AND kind = 'agent' AND enabled``, the
  tenant without webhook endpoints, in the same statement, which reads the active jobs too (the
  upgrade's only round trip; the upgrades of a connect burst share one, gathered by
  ``qprint.realtime.gathered``, the rows locked in the order of their ids); an upgrade it does
  not match takes the full way (``credentials.authenticate_device``, then :func:`take`).
- :func:`ping` - renew the lease **and**, in the same statement, return what the connection needs
  to know (revisions, a pending command, a job a claim would hand out now). One round trip per
  heartbeat. :func:`ping_many` is the same for the pings of several connections of a node at
  once (``qprint.realtime.pings`` gathers them): one statement for all of them on PostgreSQL,
  each row guarded as :func:`ping`'s, the rows locked in the order of their ids.
- :func:`mark_ready` - record the revisions the device applied and mark the connection ready.
  :func:`mark_ready_many` is the same for several connections at once (the ``state`` frames of
  a connect burst, gathered by ``qprint.realtime.gathered``): one statement on PostgreSQL, each
  row guarded as :func:`mark_ready`'s, the rows locked in the order of their ids.
- :func:`clear` - forget the connection on close.
- :func:`poll_live` and :func:`poll` - a CloudPRNT printer's poll (docs/CLOUDPRNT.md): there is
  no socket, the polling is the connection. The common case is ONE statement, the credential
  check included: :func:`poll_live` renews the lease of the row ``WHERE token_hash = <the hash of
  the presented token> AND kind = 'cloudprnt' AND enabled AND <the Basic user name, if any, is
  the device's name> AND printer_mac = <the polling MAC> AND <a live connection>`` and returns
  the whole device with the state. A poll it does not match writes nothing and takes the full
  way: ``credentials.authenticate_device`` (the throttle counts every wrong credential there),
  then :func:`poll`, where a live connection from the bound MAC renews its lease and otherwise
  the poll takes the row (and binds ``printer_mac`` when none is bound). ``printer_mac`` is
  written here only (:func:`poll`, :func:`forget_printer`).

Every statement after ``take`` is guarded ``WHERE id = ? AND connection_id = ?``: a statement that
matches no row means another connection took the device, and the caller closes with 4000
(:class:`Replaced`). :func:`read` is the same answer as :func:`ping` without renewing, for a wakeup;
a pushed wakeup reads it in the claim's lock of the row instead (:func:`state_of`), guarded the
same way.

When an endpoint of the device's tenant wants ``device.connected`` / ``device.disconnected``
webhooks, :func:`take` and :func:`clear` run in one transaction with the outbox rows announcing
them (``qprint.webhooks.outbox.announcing_device``); otherwise the statement runs alone, as always.

The state a statement returns (:class:`DeviceState`) carries the inputs of the claim gate
(:mod:`qprint.core.gate`), the lease judged in the same statement, so the session decides
``wake`` exactly as a claim would. The functions are synchronous (Django's connection); the socket
path runs them on its own threads (``qprint.realtime.socket_db``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection as db
from django.db.models import OuterRef
from django.db.models.expressions import RawSQL

from qprint.core import prepared, sql, wire
from qprint.core.prepared import PreparedQuery
from qprint.domain import reconcile
from qprint.models import Device, DeviceKind, raw
from qprint.webhooks import DEVICE_CONNECTED, DEVICE_DISCONNECTED, outbox

LEASE_HEARTBEATS = wire.HEARTBEAT_MISSED_INTERVALS


class Replaced(Exception):
    """The row no longer names this connection: a newer one took the device (close 4000)."""

    @classmethod
    def connection(cls, device_id: int, connection_id: uuid.UUID) -> Replaced:
        return cls(f"device {device_id} connection {connection_id} was replaced")


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
    #: The row named another connection when this one took it: an older socket may still be
    #: open, on any node (the caller publishes ``replaced``).
    displaced: bool = True


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
    #: A command is PENDING or was DELIVERED to an earlier connection: what the first ``state``
    #: of a connection hands out again. Read by :func:`mark_ready` only (False elsewhere).
    command_open: bool = False


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


def _state(row: tuple, *, command_open: bool = False) -> DeviceState:
    """The state of :func:`_state_columns`' twelve columns (``row`` may hold more after them);
    ``command_open`` from the statement that reads it (:func:`mark_ready`)."""
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
        command_open=command_open,
    )


def state_of(device: Any) -> DeviceState:
    """The state of a device row that another statement read with the same columns: the claim's
    lock of a pushed wakeup (:func:`qprint.domain.claim.claim_on_wakeup`: ``with_liveness()``,
    its next claimable job as ``next_job_id``, ``command_pending``, ``claimed_job_id``)."""
    held = device.claimed_job_id
    return DeviceState(
        enabled=bool(device.enabled),
        connection_live=bool(device.connection_live),
        connection_ready=bool(device.connection_ready),
        paused=bool(device.paused),
        control_revision=int(device.control_revision),
        control_applied_revision=int(device.control_applied_revision),
        settings_revision=int(device.settings_revision),
        settings_applied_revision=int(device.settings_applied_revision),
        token_hash=device.token_hash,
        command_pending=bool(device.command_pending),
        claimed_job_id=str(held) if held is not None else None,
        job_queued=device.next_job_id is not None,
    )


def _guarded_row(device_id: int, connection_id: uuid.UUID, statement: str, params: list) -> tuple:
    """Run one statement guarded ``WHERE id = %s AND connection_id = %s`` and return its row.

    No row means another connection took the device: :class:`Replaced`.
    """
    rows = prepared.fetch(statement, params)
    if not rows:
        raise Replaced.connection(device_id, connection_id)
    return rows[0]


def lease_seconds(heartbeat_seconds: float) -> float:
    return LEASE_HEARTBEATS * heartbeat_seconds


def _take_assignments(connection_id: str = "%s", node: str = "%s", lease: str = "%s") -> str:
    """The SET of a take: the connection's id, its node, the lease's seconds (parameters, or the
    SQL expressions given)."""
    return f"""connection_id = {connection_id}, connection_node = {node},
        connection_ready = {sql.false()},
        connection_lease_expires_at = {sql.seconds_from_now(lease)}, last_seen_at = {sql.now()},
        connection_since = {sql.now()}"""


#: What a take returns, in the order :func:`_taken` reads.
_TAKEN_COLUMNS = ("enabled", "paused", "control_revision", "settings_revision", "settings")


def _taken(row: tuple, active_jobs: tuple[tuple[str, str, str], ...], *, displaced: bool) -> Taken:
    """The :class:`Taken` of a row of :data:`_TAKEN_COLUMNS`, with the device's active jobs."""
    return Taken(
        enabled=bool(row[0]),
        paused=bool(row[1]),
        control_revision=int(row[2]),
        settings_revision=int(row[3]),
        settings=sql.json_value(row[4]) or {},
        active_jobs=active_jobs,
        displaced=displaced,
    )


@functools.cache
def _take_statement(vendor: str) -> str:
    """:func:`take`'s statement, built once per vendor: the row taken, with whether it named a
    connection (PostgreSQL: the row as the take's lock found it, the take's own sub-select)."""
    d = raw.tables()["device"]
    if vendor != "postgresql":  # SQLite: RETURNING sees only the row as updated
        return f"""
            UPDATE {d} SET {_take_assignments()}
            WHERE id = %s
            RETURNING {", ".join(_TAKEN_COLUMNS)}
            """
    return f"""
        UPDATE {d} SET {_take_assignments()}
        FROM (SELECT id, connection_id FROM {d} WHERE id = %s FOR NO KEY UPDATE) AS previous
        WHERE {d}.id = previous.id
        RETURNING {", ".join(f"{d}.{c}" for c in _TAKEN_COLUMNS)},
            previous.connection_id IS NOT NULL
        """


def _named_a_connection(device_id: int) -> bool:
    """SQLite's half of :func:`take`'s question, read just before the take without a row lock
    (SQLite has none; development only): two takes at once may both read none, and the older
    socket then learns that it was replaced at its next frame, as without the bus."""
    return Device.objects.filter(pk=device_id, connection_id__isnull=False).exists()


def take(device_id: int, connection_id: uuid.UUID, node: str, heartbeat_seconds: float) -> Taken:
    """Take the device's row for a new connection: newest wins, not ready, a fresh lease.

    Raises :class:`Replaced` when the device is gone (deleted) - the caller refuses the socket.
    """
    postgresql = sql.postgresql()
    with outbox.announcing_device(device_id, DEVICE_CONNECTED) as announce:
        named_before = None if postgresql else _named_a_connection(device_id)
        rows = prepared.fetch(
            _take_statement(db.vendor),
            [
                sql.uuid_param(connection_id),
                node,
                lease_seconds(heartbeat_seconds),
                device_id,
            ],
        )
        if not rows:
            raise Replaced(f"device {device_id} does not exist")
        row = rows[0]
        announce()
    displaced = bool(row[len(_TAKEN_COLUMNS)]) if postgresql else bool(named_before)
    return _taken(row, reconcile.active_jobs(device_id), displaced=displaced)


#: An upgrade as :func:`take_presented` takes it: (the presented token's hash, the new
#: connection's id, the node, the heartbeat's seconds).
Presented = tuple[str, uuid.UUID, str, float]

#: The gate of :func:`take_presented`: the agents holding the token hashes the statement's
#: ``presented`` rows name (the credential lookup's own index), whether their tenant has a webhook
#: endpoint, and their active jobs; the rows in the order of their ids (two nodes' statements
#: never wait on each other crosswise).
_TAKE_GATE = PreparedQuery(
    lambda: (
        Device.objects.filter(
            token_hash__in=RawSQL("SELECT digest FROM presented", ()), kind=DeviceKind.AGENT
        )
        .annotate(
            announced=outbox.tenant_subscribed(OuterRef("tenant")),
            active_jobs=reconcile.active_jobs_column(OuterRef("pk")),
        )
        .order_by("pk")
    )
)


@functools.cache
def _take_presented_statement(gate: str) -> str:
    """:func:`take_presented`'s statement around the gate's compiled SELECT, built once: the
    upgrades as four arrays, each row the gate locked taken for the connection that presented
    its token."""
    d = raw.tables()["device"]
    taken = _take_assignments(
        "presented.connection_id", "presented.node", "presented.lease_seconds"
    )
    return f"""
        WITH presented AS (
            SELECT * FROM unnest(%s::varchar[], %s::uuid[], %s::varchar[], %s::float8[])
                AS p(digest, connection_id, node, lease_seconds)
        ), gate AS ({gate} FOR NO KEY UPDATE OF {d}), taken AS (
            UPDATE {d} SET {taken}
            FROM gate JOIN presented ON presented.digest = gate.token_hash
            WHERE {d}.id = gate.id AND gate.enabled AND NOT gate.announced
            RETURNING {d}.id AS taken_id, {", ".join(f"{d}.{c}" for c in _TAKEN_COLUMNS)}
        )
        SELECT gate.*, taken.* FROM gate JOIN taken ON taken.taken_id = gate.id
        """


def take_presented(upgrades: list[Presented]) -> list[tuple[Device, Taken] | None]:
    """Sockets' upgrades in ONE statement, their authentication included (PostgreSQL): those of
    a connect burst together (``qprint.realtime.gathered``), or one alone.

    The agent holding each token hash, enabled, whose tenant has no webhook endpoint (a
    ``device.connected`` delivery is written in the take's transaction, which :func:`take` runs)
    takes its row for the upgrade's connection as :func:`take` does; the statement locks the rows
    it judges, in the order of their ids, and returns each whole as it found it (:class:`Device`;
    its connection columns are the displaced connection's) with what the take returns, the
    device's active jobs read in the same statement (:func:`reconcile.active_jobs_column`; as of
    the statement's start, where :func:`take` reads them after its commit: a job the device
    reports meanwhile is in its journal either way, and an event sent again is answered as a
    replay). Each upgrade's answer in order: None when it took nothing for it (an unknown or
    wrong token, another kind of device, a disabled device, a tenant with webhooks, SQLite): the
    caller then takes the full way, ``credentials.authenticate_device`` (its throttle and
    answers) and :func:`take`; nothing was written for it. The caller compares each returned
    ``token_hash`` in constant time as the credential lookup does. The tokens must differ: two
    connections of one device are taken one after the other (newest wins), never in one
    statement.
    """
    if len({digest for digest, *_ in upgrades}) != len(upgrades):
        raise ValueError("two upgrades of one statement present the same token")
    if db.vendor != "postgresql":
        return [None] * len(upgrades)
    gate, params = _TAKE_GATE.statement()
    rows = prepared.fetch(
        _take_presented_statement(gate),
        [
            [digest for digest, _, _, _ in upgrades],
            [connection_id for _, connection_id, _, _ in upgrades],
            [node for _, _, node, _ in upgrades],
            [lease_seconds(heartbeat) for _, _, _, heartbeat in upgrades],
            *params,
        ],
    )
    devices = _TAKE_GATE.instances(rows)
    taken: dict[str, tuple[Device, Taken]] = {}
    for device, row in zip(devices, rows, strict=True):
        # The gate's row is the row as the take's lock found it: the connection it names, if
        # any, is the one this take displaced.
        taken[device.token_hash] = (
            device,
            _taken(
                row[-len(_TAKEN_COLUMNS) :],
                reconcile.active_jobs_of(device.active_jobs),
                displaced=device.connection_id is not None,
            ),
        )
    return [taken.get(digest) for digest, *_ in upgrades]


@functools.cache
def _ping_statement(vendor: str) -> str:
    """The ping's statement, built once per database vendor (every ping runs it)."""
    t = raw.tables()
    return f"""
        UPDATE {t["device"]} SET
            connection_lease_expires_at = {sql.seconds_from_now()}, last_seen_at = {sql.now()}
        WHERE id = %s AND connection_id = %s
        RETURNING {_state_columns()}
        """


@functools.cache
def _read_statement(vendor: str) -> str:
    """The read's statement, built once per database vendor (every wakeup runs it)."""
    return f"""
        SELECT {_state_columns()} FROM {raw.tables()["device"]}
        WHERE id = %s AND connection_id = %s
        """


def ping(device_id: int, connection_id: uuid.UUID, heartbeat_seconds: float) -> DeviceState:
    """Renew the lease and learn, in the same statement, what the connection has not been told."""
    row = _guarded_row(
        device_id,
        connection_id,
        _ping_statement(db.vendor),
        [lease_seconds(heartbeat_seconds), device_id, sql.uuid_param(connection_id)],
    )
    return _state(row)


def _one_after_the_other(
    statement: Callable[..., DeviceState], calls: list[tuple]
) -> list[DeviceState | None]:
    """What a ``*_many`` function answers where there is no one statement for all (SQLite, one
    node): ``statement(*call)`` for each call in turn, None where the connection was replaced."""
    states: list[DeviceState | None] = []
    for call in calls:
        try:
            states.append(statement(*call))
        except Replaced:
            states.append(None)
    return states


@functools.cache
def _ping_many_statement(vendor: str) -> str:
    """:func:`ping_many`'s statement on PostgreSQL, built once: the pings as three arrays, the
    rows they still name locked in the order of their ids (two nodes' statements never wait on
    each other crosswise), then renewed."""
    d = raw.tables()["device"]
    return f"""
        WITH pinged AS (
            SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::float8[])
                AS p(id, connection_id, lease_seconds)
        ), locked AS (
            SELECT {d}.id, pinged.lease_seconds FROM {d}
            JOIN pinged ON pinged.id = {d}.id AND pinged.connection_id = {d}.connection_id
            ORDER BY {d}.id
            FOR UPDATE OF {d}
        )
        UPDATE {d} SET
            connection_lease_expires_at = {sql.seconds_from_now("locked.lease_seconds")},
            last_seen_at = {sql.now()}
        FROM locked WHERE {d}.id = locked.id
        RETURNING {d}.id, {d}.connection_id, {_state_columns()}
        """


def ping_many(pings: list[tuple[int, uuid.UUID, float]]) -> list[DeviceState | None]:
    """:func:`ping` for several connections, ``(device_id, connection_id, heartbeat_seconds)``
    each: their states in the same order, None for a connection that was replaced. One statement
    on PostgreSQL; elsewhere (one node, SQLite) one :func:`ping` after the other."""
    if db.vendor != "postgresql":
        return _one_after_the_other(ping, pings)
    rows = prepared.fetch(
        _ping_many_statement(db.vendor),
        [
            [device_id for device_id, _, _ in pings],
            [connection_id for _, connection_id, _ in pings],
            [lease_seconds(heartbeat) for _, _, heartbeat in pings],
        ],
    )
    renewed = {(row[0], row[1]): _state(row[2:]) for row in rows}
    return [renewed.get((device_id, connection_id)) for device_id, connection_id, _ in pings]


def read(device_id: int, connection_id: uuid.UUID) -> DeviceState:
    """What :func:`ping` returns, without renewing the lease (a wakeup, a reconcile)."""
    row = _guarded_row(
        device_id,
        connection_id,
        _read_statement(db.vendor),
        [device_id, sql.uuid_param(connection_id)],
    )
    return _state(row)


@functools.cache
def _mark_ready_statement(vendor: str) -> str:
    """:func:`mark_ready`'s statement, built once per database vendor (every connect runs it)."""
    d = raw.tables()["device"]
    return f"""
        UPDATE {d} SET
            connection_ready = {sql.true()},
            control_applied_revision = %s, settings_applied_revision = %s,
            connection_lease_expires_at = {sql.seconds_from_now()}, last_seen_at = {sql.now()}
        WHERE id = %s AND connection_id = %s
        RETURNING {_state_columns()}, {raw.open_command_exists(d)} AS command_open
        """


def mark_ready(
    device_id: int,
    connection_id: uuid.UUID,
    control_applied_revision: int,
    settings_applied_revision: int,
    heartbeat_seconds: float,
) -> DeviceState:
    """Record what the device applied, mark the connection ready and renew its lease; the state
    says too whether a command is open (``command_open``), which a first ``state`` hands out.

    The caller has checked that the revisions are not above those it sent (4400 otherwise).
    """
    row = _guarded_row(
        device_id,
        connection_id,
        _mark_ready_statement(db.vendor),
        [
            control_applied_revision,
            settings_applied_revision,
            lease_seconds(heartbeat_seconds),
            device_id,
            sql.uuid_param(connection_id),
        ],
    )
    return _state(row, command_open=bool(row[12]))


@functools.cache
def _mark_ready_many_statement(vendor: str) -> str:
    """:func:`mark_ready_many`'s statement on PostgreSQL, built once: the connections as five
    arrays, the rows they still name locked in the order of their ids (two nodes' statements
    never wait on each other crosswise), then marked as :func:`mark_ready` marks one."""
    d = raw.tables()["device"]
    return f"""
        WITH ready AS (
            SELECT * FROM unnest(
                %s::bigint[], %s::uuid[], %s::bigint[], %s::bigint[], %s::float8[]
            ) AS r(id, connection_id, control_applied, settings_applied, lease_seconds)
        ), locked AS (
            SELECT {d}.id, ready.control_applied, ready.settings_applied, ready.lease_seconds
            FROM {d}
            JOIN ready ON ready.id = {d}.id AND ready.connection_id = {d}.connection_id
            ORDER BY {d}.id
            FOR UPDATE OF {d}
        )
        UPDATE {d} SET
            connection_ready = {sql.true()},
            control_applied_revision = locked.control_applied,
            settings_applied_revision = locked.settings_applied,
            connection_lease_expires_at = {sql.seconds_from_now("locked.lease_seconds")},
            last_seen_at = {sql.now()}
        FROM locked WHERE {d}.id = locked.id
        RETURNING {d}.id, {d}.connection_id, {_state_columns()},
            {raw.open_command_exists(d)} AS command_open
        """


#: What :func:`mark_ready` takes: ``(device_id, connection_id, control_applied_revision,
#: settings_applied_revision, heartbeat_seconds)``.
Ready = tuple[int, uuid.UUID, int, int, float]


def mark_ready_many(readies: list[Ready]) -> list[DeviceState | None]:
    """:func:`mark_ready` for several connections: their states in the same order, None for a
    connection that was replaced. One statement on PostgreSQL; elsewhere (one node, SQLite) one
    :func:`mark_ready` after the other."""
    if db.vendor != "postgresql":
        return _one_after_the_other(mark_ready, readies)
    rows = prepared.fetch(
        _mark_ready_many_statement(db.vendor),
        [
            [ready[0] for ready in readies],
            [ready[1] for ready in readies],
            [ready[2] for ready in readies],
            [ready[3] for ready in readies],
            [lease_seconds(ready[4]) for ready in readies],
        ],
    )
    marked = {(row[0], row[1]): _state(row[2:], command_open=bool(row[14])) for row in rows}
    return [marked.get((ready[0], ready[1])) for ready in readies]


def clear(device_id: int, connection_id: uuid.UUID) -> bool:
    """Forget this connection (socket closed). False when a newer connection holds the row."""
    t = raw.tables()
    with outbox.announcing_device(device_id, DEVICE_DISCONNECTED) as announce:
        cleared = bool(
            prepared.fetch(
                f"""
                UPDATE {t["device"]} SET
                    connection_id = NULL, connection_node = '', connection_ready = {sql.false()},
                    connection_lease_expires_at = NULL
                WHERE id = %s AND connection_id = %s
                RETURNING id
                """,
                [device_id, sql.uuid_param(connection_id)],
            )
        )
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


def _poll_renewal() -> str:
    """What every poll statement sets (parameters: the node, then the default poll interval).

    The lease is ``3 x`` the printer's poll interval: the one it reported (``agent_info``'s
    ``poll_interval``, a positive number), else the default given; ready at once (a printer has
    nothing to apply: the server applies control and settings for it, so the applied revisions
    are the current ones).
    """
    d = raw.tables()["device"]
    reported = sql.json_number(f"{d}.agent_info", "poll_interval")
    interval = f"(CASE WHEN {reported} > 0 THEN {reported} ELSE %s END)"
    return f"""connection_node = %s, connection_ready = {sql.true()},
        control_applied_revision = control_revision,
        settings_applied_revision = settings_revision,
        connection_lease_expires_at = {sql.seconds_from_now(f"{LEASE_HEARTBEATS} * {interval}")},
        last_seen_at = {sql.now()}"""


def _device_columns() -> str:
    """Every column of the device row, in the order of :func:`_device`."""
    d = raw.tables()["device"]
    return ", ".join(f"{d}.{db.ops.quote_name(f.column)}" for f in Device._meta.concrete_fields)


def _device(values: tuple) -> Device:
    """The :class:`Device` of a row of :func:`_device_columns`, as the ORM would load it (its
    fields' converters applied: JSON decoded, datetimes and booleans as on any read)."""
    fields = Device._meta.concrete_fields
    compiler = Device.objects.all().query.get_compiler(connection=db)
    converters = compiler.get_converters([f.get_col(Device._meta.db_table) for f in fields])
    (row,) = compiler.apply_converters([list(values)], converters)
    return Device.from_db(db.alias, [f.attname for f in fields], row)


def poll_live(
    token_hash: str, user: str, mac: str, node: str, default_seconds: float
) -> tuple[Device, Polled] | None:
    """A CloudPRNT poll with nothing new in ONE statement, its authentication included.

    The device of kind ``cloudprnt`` holding the token hashed ``token_hash`` (the credential
    lookup's own index, :mod:`qprint.domain.credentials`), enabled, named ``user`` (when the
    Basic user name is not empty), bound to ``mac`` and with a live connection renews its lease
    as :func:`poll` does, and the same statement returns the whole device row and what
    :func:`poll` returns. ``None`` when no row matched (a wrong or unknown credential, a disabled
    device, another name or MAC, the first poll, a lease that ran out): the caller then takes
    the full way, :func:`credentials.authenticate_device` (its throttle and answers) and
    :func:`poll`; nothing was written. The caller compares the returned ``token_hash`` in
    constant time as the credential lookup does.
    """
    d = raw.tables()["device"]
    rows = prepared.fetch(
        f"""
            UPDATE {d} SET {_poll_renewal()}
            WHERE {d}.token_hash = %s AND {d}.kind = %s AND {d}.enabled
                AND (%s = '' OR {d}.name = %s)
                AND {d}.printer_mac = %s AND {raw.live_connection(d)}
            RETURNING {_device_columns()}, {_poll_columns()}
            """,
        [node, default_seconds, token_hash, DeviceKind.CLOUDPRNT, user, user, mac],
    )
    if not rows:
        return None
    [row] = rows
    width = len(Device._meta.concrete_fields)
    return _device(row[:width]), _polled(row[width:], taken=False)


def poll(device_id: int, mac: str, node: str, default_seconds: float) -> Polled:
    """A CloudPRNT printer polled: its connection is the polling itself (docs/CLOUDPRNT.md).

    A live connection from the bound MAC renews its lease (``3 x`` the printer's poll interval,
    :func:`_poll_renewal`; ``default_seconds`` until it reported one) and returns the state a
    claim needs, in one statement. Otherwise (the first poll, or the first after the lease ran
    out) the row is taken: a new ``connection_id``, ready at once, the MAC bound when none is,
    and ``device.connected`` announced. A poll from another MAC than the bound one changes
    nothing: :class:`MacRefused`. The common case, authentication included, is
    :func:`poll_live`: this is the way of a poll it did not match.
    """
    d = raw.tables()["device"]
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {d} SET {_poll_renewal()}
            WHERE id = %s AND printer_mac = %s AND {raw.live_connection(d)}
            RETURNING {_poll_columns()}
            """,
            [node, default_seconds, device_id, mac],
        )
        row = cursor.fetchone()
    if row is not None:
        return _polled(row, taken=False)
    with outbox.announcing_device(device_id, DEVICE_CONNECTED) as announce, db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {d} SET {_poll_renewal()},
                connection_id = %s, connection_since = {sql.now()},
                printer_mac = CASE WHEN printer_mac = '' THEN %s ELSE printer_mac END
            WHERE id = %s AND (printer_mac = '' OR printer_mac = %s)
            RETURNING {_poll_columns()}
            """,
            [node, default_seconds, sql.uuid_param(uuid.uuid4()), mac, device_id, mac],
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
    binds again. The connection is forgotten with it. False when no CloudPRNT device has that
    id: an agent's connection is its socket's, which only :func:`take` and :func:`clear` write."""
    t = raw.tables()
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {t["device"]} SET
                printer_mac = '', connection_id = NULL, connection_node = '',
                connection_ready = {sql.false()}, connection_lease_expires_at = NULL
            WHERE id = %s AND kind = %s
            """,
            [device_id, DeviceKind.CLOUDPRNT],
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
