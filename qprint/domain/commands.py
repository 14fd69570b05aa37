"""Device commands: the one owner of PENDING -> DELIVERED -> DONE / FAILED / EXPIRED.

Invariant: a command moves forward only, and a finished command (DONE, FAILED, EXPIRED) never
changes again.

- :func:`send_command` (and :func:`request_cancel` for ``CANCEL_JOB``) creates it PENDING, in the
  caller's transaction, and wakes the device after the commit.
- :func:`deliver` moves PENDING -> DELIVERED only in a statement guarded by the connection named on
  the device row (``connection_id``), so a replaced socket never marks a command delivered that its
  device will not see. A new connection is handed the DELIVERED commands again (the device may
  have lost them with the old socket); agents treat a ``command_id`` they already ran as done.
- :func:`record_result` moves PENDING/DELIVERED -> DONE/FAILED under the command's row lock; a
  result reported again (the device retries) is answered with the command as it is.
- :func:`expire_commands` moves what is still PENDING/DELIVERED ``JOB_TTL_SECONDS`` after it was
  created to EXPIRED, so a device that comes back much later is not handed stale orders.

Nothing else writes ``status``, ``delivered_at``, ``finished_at`` or ``result`` of
``qprint_device_command``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection as db
from django.db import transaction
from django.db.models.functions import Now

from qprint.core import inputs, sql
from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid, NotFound
from qprint.domain import credentials
from qprint.domain.wakeups import wake_after_commit
from qprint.models import CommandStatus, Device, DeviceCommand, PrintJob, raw

logger = logging.getLogger("qprint.commands")

#: Statuses a command is still open in: the device may yet run it.
OPEN: tuple[str, ...] = (CommandStatus.PENDING, CommandStatus.DELIVERED)
#: Statuses a command never leaves.
FINISHED: tuple[str, ...] = (CommandStatus.DONE, CommandStatus.FAILED, CommandStatus.EXPIRED)
#: What a device may report.
RESULTS: tuple[str, ...] = (CommandStatus.DONE, CommandStatus.FAILED)
TYPE_MAX_LENGTH = 50


@dataclass(frozen=True)
class Delivery:
    command_id: str
    type: str
    payload: dict[str, Any]


def send_command(
    device: Device | int, type: str, payload: dict[str, Any] | None = None
) -> DeviceCommand:
    """Queue a command for the device (delivered over its socket, result reported back)."""
    type = inputs.required_text("type", type, TYPE_MAX_LENGTH)
    payload = inputs.json_object("payload", payload, qprint_settings.MAX_DETAIL_BYTES)
    device_id = credentials.device_id_of(device)
    with transaction.atomic():
        target = Device.objects.filter(pk=device_id).only("id", "tenant", "name").first()
        if target is None:
            raise NotFound("unknown_device", "No such device.")
        command = DeviceCommand.objects.create(device=target, type=type.strip(), payload=payload)
        wake_after_commit(target.tenant, target.pk, "command")
    logger.info("command_queued command=%s device=%s type=%s", command.pk, target, command.type)
    return command


def request_cancel(job: PrintJob) -> DeviceCommand:
    """Ask the device holding ``job`` (RECEIVED or SPOOLED) to cancel it: a ``CANCEL_JOB``
    command, in the caller's transaction (which holds the job's row lock)."""
    command = DeviceCommand.objects.create(
        device_id=job.device_id,
        type=DeviceCommand.CANCEL_JOB,
        payload={"job_id": str(job.pk), "claim_id": str(job.claim_id)},
    )
    wake_after_commit(job.tenant, job.device_id, "command")
    return command


def pending_commands(device: Device | int) -> list[DeviceCommand]:
    """Commands the device has not finished (PENDING or DELIVERED), oldest first."""
    return list(
        DeviceCommand.objects.filter(
            device_id=credentials.device_id_of(device), status__in=OPEN
        ).order_by("created_at")
    )


def deliver(device_id: int, connection_id: uuid.UUID, *, redeliver: bool = False) -> list[Delivery]:
    """Mark the device's PENDING commands (and DELIVERED ones with ``redeliver``) as delivered.

    Returns them oldest first; an empty list when the connection no longer holds the row.
    """
    t = raw.tables()
    command = t["command"]
    deliverable = raw.open_command(command) if redeliver else raw.pending_command(command)
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {t["command"]} SET status = 'DELIVERED', delivered_at = {sql.now()}
            WHERE device_id = %s AND {deliverable}
              AND EXISTS (SELECT 1 FROM {t["device"]} d
                          WHERE d.id = %s AND d.connection_id = %s)
            RETURNING id, type, payload, created_at
            """,
            [device_id, device_id, sql.uuid_param(connection_id)],
        )
        rows = cursor.fetchall()
    rows.sort(key=lambda r: str(r[3]))
    return [
        Delivery(
            command_id=str(uuid.UUID(str(r[0]))),
            type=r[1],
            payload=sql.json_value(r[2]) or {},
        )
        for r in rows
    ]


def record_result(
    device: Device | int,
    command_id: uuid.UUID | str,
    status: Any,
    result: Any = None,
) -> DeviceCommand:
    """Record the device's result of a command (``status`` DONE or FAILED, ``result`` any JSON).

    A command already finished is answered as it is (the device may retry its report).
    Raises :class:`Invalid` (422) for another status, :class:`NotFound` (404) when the command is
    not this device's.
    """
    if not isinstance(status, str) or status not in RESULTS:
        raise Invalid(message="'status' must be DONE or FAILED.")
    result = inputs.json_value("result", result, qprint_settings.MAX_DETAIL_BYTES)
    try:
        command_uuid = uuid.UUID(str(command_id))
    except ValueError:
        raise NotFound("not_found", "No such command.") from None
    device_id = credentials.device_id_of(device)
    with transaction.atomic():
        command = (
            DeviceCommand.objects.select_for_update()
            .filter(pk=command_uuid, device_id=device_id)
            .first()
        )
        if command is None:
            raise NotFound("not_found", "No such command.")
        if command.status in FINISHED:
            return command
        DeviceCommand.objects.filter(pk=command.pk).update(
            status=status, result=result, finished_at=Now()
        )
        command.refresh_from_db()
    logger.info("command_finished command=%s device=%s status=%s", command.pk, device_id, status)
    return command


def expire_commands() -> int:
    """Expire device commands left unfinished for ``JOB_TTL_SECONDS``; returns how many."""
    ttl = qprint_settings.JOB_TTL_SECONDS
    if ttl is None:
        return 0
    count = DeviceCommand.objects.filter(
        status__in=OPEN, created_at__lt=Now() - timedelta(seconds=ttl)
    ).update(status=CommandStatus.EXPIRED, finished_at=Now())
    if count:
        logger.info("commands_expired count=%s", count)
    return count
