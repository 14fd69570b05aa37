"""The SQL text of qprint's raw statements that differs between PostgreSQL and SQLite, in one place.

The connection record (:mod:`qprint.domain.connection`) and command delivery
(:mod:`qprint.domain.commands`) write with raw ``UPDATE ... RETURNING`` statements so each guarded
write is one round trip (SQLite has ``RETURNING`` since 3.35). What they need of the vendor:

- :func:`now`: the database clock, as SQL;
- :func:`seconds_from_now` / :func:`seconds_ago`: ``now`` plus / minus a number of seconds given
  as a parameter;
- :func:`true` / :func:`false`: boolean literals;
- :func:`uuid_param`: how a UUID is passed (uuid on PostgreSQL, 32 hex characters on SQLite, as
  Django stores it there);
- :func:`json_value`: a JSON column as read back (text on SQLite).

and the SQL copies of two queryset predicates (:mod:`qprint.models.querysets`), which
``tests/qprint/test_predicates.py`` pins to agree with them: :func:`live_connection`,
:func:`claimable_job` and :func:`claimable_job_exists`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection as db

from qprint.models import Device, DeviceCommand, DevicePrinter, PrintJob


def postgresql() -> bool:
    return db.vendor == "postgresql"


def now() -> str:
    return "now()" if postgresql() else "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def seconds_from_now() -> str:
    """``now()`` plus ``%s`` seconds (one parameter)."""
    if postgresql():
        return "now() + make_interval(secs => %s)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || %s || ' seconds')"


def seconds_ago() -> str:
    """``now()`` minus ``%s`` seconds (one parameter)."""
    if postgresql():
        return "now() - make_interval(secs => %s)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || %s || ' seconds')"


def true() -> str:
    return "true" if postgresql() else "1"


def false() -> str:
    return "false" if postgresql() else "0"


def uuid_param(value: uuid.UUID) -> Any:
    return value if postgresql() else value.hex


def json_value(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return value


def tables() -> dict[str, str]:
    return {
        "device": Device._meta.db_table,
        "job": PrintJob._meta.db_table,
        "command": DeviceCommand._meta.db_table,
        "printer": DevicePrinter._meta.db_table,
    }


def live_connection(device: str) -> str:
    """``DeviceQuerySet.live()`` as SQL on the device table named (or aliased) ``device``."""
    return (
        f"({device}.connection_id IS NOT NULL AND {device}.connection_lease_expires_at > {now()})"
    )


def claimable_job(job: str) -> str:
    """``PrintJobQuerySet.claimable()``'s condition on the job table named (or aliased) ``job``."""
    return f"({job}.status = 'QUEUED' AND ({job}.expires_at IS NULL OR {job}.expires_at > {now()}))"


def claimable_job_exists(device: str) -> str:
    """``PrintJobQuerySet.claimable()`` of the device ``device``, as an EXISTS."""
    return f"""EXISTS (SELECT 1 FROM {tables()["job"]} j
                WHERE j.device_id = {device}.id AND {claimable_job("j")})"""
