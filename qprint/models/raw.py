"""The shared predicates of :mod:`qprint.models.querysets` as SQL text, for the raw statements.

The connection record (:mod:`qprint.domain.connection`), command delivery
(:mod:`qprint.domain.commands`) and the claim write with raw statements; the predicates they
need are copied here once, next to the table names, and ``tests/qprint/models/test_predicates.py``
pins each copy to agree with its queryset: :func:`live_connection`, :func:`claimable_job`,
:func:`claimable_job_exists` and :func:`other_claimable_job_exists`.
"""

from __future__ import annotations

from qprint.core.sql import now
from qprint.models.commands import DeviceCommand
from qprint.models.devices import Device, DevicePrinter
from qprint.models.jobs import PrintJob


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


def other_claimable_job_exists(device_id: str, job_id: str) -> str:
    """``PrintJob.objects.claimable()`` of the device other than the job (their ids as SQL
    expressions), as an EXISTS: whether another job waits behind the one a claim handed out."""
    return f"""EXISTS (SELECT 1 FROM {tables()["job"]} j
                WHERE j.device_id = {device_id} AND {claimable_job("j")} AND j.id <> {job_id})"""


def held_job(job: str) -> str:
    """``PrintJobQuerySet.held()``'s condition on the job table named (or aliased) ``job``."""
    return f"{job}.status = 'CLAIMED'"


def held_job_id(device: str) -> str:
    """The id of the job the device ``device`` holds (``PrintJobQuerySet.held()``), or NULL."""
    return f"""(SELECT j.id FROM {tables()["job"]} j
                WHERE j.device_id = {device}.id AND {held_job("j")} LIMIT 1)"""


def pending_command(command: str) -> str:
    """``DeviceCommandQuerySet.pending()``'s condition on the command table named ``command``."""
    return f"{command}.status = 'PENDING'"


def pending_command_exists(device: str) -> str:
    """``DeviceCommandQuerySet.pending()`` of the device ``device``, as an EXISTS."""
    return f"""EXISTS (SELECT 1 FROM {tables()["command"]} c
                WHERE c.device_id = {device}.id AND {pending_command("c")})"""


def open_command(command: str) -> str:
    """A command of the table named ``command`` that a new connection hands out (again): PENDING,
    or DELIVERED to an earlier connection and not finished."""
    return f"({pending_command(command)} OR {command}.status = 'DELIVERED')"


def open_command_exists(device: str) -> str:
    """:func:`open_command` of the device ``device``, as an EXISTS."""
    return f"""EXISTS (SELECT 1 FROM {tables()["command"]} c
                WHERE c.device_id = {device}.id AND {open_command("c")})"""
