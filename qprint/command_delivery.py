"""Hand a device's commands to its live connection.

Invariant: a command moves PENDING -> DELIVERED only in a statement guarded by the connection
named on the device row (``connection_id``), so a replaced socket never marks a command delivered
that its device will not see. A new connection is handed the DELIVERED commands again (the device
may have lost them with the old socket); agents treat a ``command_id`` they already ran as done.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection as db

from qprint.models import Device, DeviceCommand


@dataclass(frozen=True)
class Delivery:
    command_id: str
    type: str
    payload: dict[str, Any]


def deliver(device_id: int, connection_id: uuid.UUID, *, redeliver: bool = False) -> list[Delivery]:
    """Mark the device's PENDING commands (and DELIVERED ones with ``redeliver``) as delivered.

    Returns them oldest first; an empty list when the connection no longer holds the row.
    """
    now = "now()" if db.vendor == "postgresql" else "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
    statuses = "('PENDING', 'DELIVERED')" if redeliver else "('PENDING')"
    conn_param: Any = connection_id if db.vendor == "postgresql" else connection_id.hex
    with db.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {DeviceCommand._meta.db_table} SET status = 'DELIVERED', delivered_at = {now}
            WHERE device_id = %s AND status IN {statuses}
              AND EXISTS (SELECT 1 FROM {Device._meta.db_table} d
                          WHERE d.id = %s AND d.connection_id = %s)
            RETURNING id, type, payload, created_at
            """,
            [device_id, device_id, conn_param],
        )
        rows = cursor.fetchall()
    rows.sort(key=lambda r: str(r[3]))
    return [
        Delivery(
            command_id=str(uuid.UUID(str(r[0]))),
            type=r[1],
            payload=json.loads(r[2]) if isinstance(r[2], (str, bytes)) else (r[2] or {}),
        )
        for r in rows
    ]
