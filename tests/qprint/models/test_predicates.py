"""The raw statements' copies of the queryset predicates agree with the querysets."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection as db
from django.db.models.functions import Now

from qprint.core.states import CommandStatus, JobStatus
from qprint.models import Device, DeviceCommand, PrintJob, raw
from tests.qprint.factories import make_device

pytestmark = pytest.mark.django_db


def _devices() -> dict[str, Device]:
    names = ["never", "live", "lapsed", "cleared"]
    devices = {name: make_device(name=name).device for name in names}
    Device.objects.filter(pk=devices["live"].pk).update(
        connection_id=uuid.uuid4(), connection_lease_expires_at=Now() + timedelta(seconds=60)
    )
    Device.objects.filter(pk=devices["lapsed"].pk).update(
        connection_id=uuid.uuid4(), connection_lease_expires_at=Now() - timedelta(seconds=1)
    )
    Device.objects.filter(pk=devices["cleared"].pk).update(
        connection_id=None, connection_lease_expires_at=Now() + timedelta(seconds=60)
    )
    return devices


def _raw_ids(condition: str) -> set[int]:
    table = raw.tables()["device"]
    with db.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {table} WHERE {condition.replace('%%', '%')}")
        return {row[0] for row in cursor.fetchall()}


def test_live_connection_sql_agrees_with_the_queryset():
    devices = _devices()
    table = raw.tables()["device"]
    live = set(Device.objects.live().values_list("pk", flat=True))
    assert live == {devices["live"].pk}
    assert _raw_ids(raw.live_connection(table)) == live
    annotated = {d.pk for d in Device.objects.with_liveness() if d.connection_live}
    assert annotated == live


def _job(device: Device, status: str, expires_in: float | None, title: str = "") -> None:
    PrintJob.objects.create(
        tenant=device.tenant,
        device=device,
        title=title,
        content_type="application/pdf",
        size=1,
        sha256="0" * 64,
        status=status,
        expires_at=None if expires_in is None else Now() + timedelta(seconds=expires_in),
    )


def test_claimable_job_sql_agrees_with_the_queryset():
    cases = {
        "queued": [(JobStatus.QUEUED, 60)],
        "queued-forever": [(JobStatus.QUEUED, None)],
        "queued-expired": [(JobStatus.QUEUED, -1)],
        "claimed": [(JobStatus.CLAIMED, 60)],
        "nothing": [],
    }
    devices = {}
    for name, jobs in cases.items():
        devices[name] = make_device(name=name).device
        for status, expires_in in jobs:
            _job(devices[name], status, expires_in)
    table = raw.tables()["device"]
    claimable = set(PrintJob.objects.claimable().values_list("device_id", flat=True).distinct())
    assert claimable == {devices["queued"].pk, devices["queued-forever"].pk}
    assert _raw_ids(raw.claimable_job_exists(table)) == claimable


def _raw_values(expression: str) -> dict[int, object]:
    table = raw.tables()["device"]
    with db.cursor() as cursor:
        cursor.execute(f"SELECT id, {expression.replace('%%', '%')} FROM {table}")
        return {row[0]: row[1] for row in cursor.fetchall()}


def test_held_job_sql_agrees_with_the_queryset():
    devices = {}
    for name, statuses in {
        "holds": [JobStatus.QUEUED, JobStatus.CLAIMED],
        "received": [JobStatus.RECEIVED],
        "queued": [JobStatus.QUEUED],
    }.items():
        devices[name] = make_device(name=name).device
        for status in statuses:
            _job(devices[name], status, 60)
    held = dict(PrintJob.objects.held().values_list("device_id", "id"))
    assert set(held) == {devices["holds"].pk}
    table = raw.tables()["device"]
    raw_held = {d: j for d, j in _raw_values(raw.held_job_id(table)).items() if j is not None}
    assert {d: uuid.UUID(str(j)) for d, j in raw_held.items()} == held


def test_pending_command_sql_agrees_with_the_queryset():
    devices = {}
    for name, statuses in {
        "pending": [CommandStatus.PENDING, CommandStatus.DONE],
        "delivered": [CommandStatus.DELIVERED],
        "none": [],
    }.items():
        devices[name] = make_device(name=name).device
        for status in statuses:
            DeviceCommand.objects.create(device=devices[name], type="X", status=status)
    pending = set(DeviceCommand.objects.pending().values_list("device_id", flat=True))
    assert pending == {devices["pending"].pk}
    table = raw.tables()["device"]
    assert {d for d, v in _raw_values(raw.pending_command_exists(table)).items() if v} == pending


def test_other_claimable_job_sql_agrees_with_the_queryset():
    jobs = {
        "two-queued": [("a", JobStatus.QUEUED, 60), ("b", JobStatus.QUEUED, None)],
        "one-queued": [("c", JobStatus.QUEUED, 60)],
        "held-and-queued": [("d", JobStatus.CLAIMED, 60), ("e", JobStatus.QUEUED, 60)],
        "held-and-expired": [("f", JobStatus.CLAIMED, 60), ("g", JobStatus.QUEUED, -1)],
    }
    table, job_table = raw.tables()["device"], raw.tables()["job"]
    for name, made in jobs.items():
        device = make_device(name=name).device
        for title, status, expires_in in made:
            _job(device, status, expires_in, title=title)
        for title, _, _ in made:
            job = PrintJob.objects.get(title=title)
            other = PrintJob.objects.filter(device=device).claimable().exclude(pk=job.pk).exists()
            found = f"(SELECT id FROM {job_table} WHERE title = '{title}')"
            exists = raw.other_claimable_job_exists(f"{table}.id", found)
            raw_other = _raw_values(exists)[device.pk]
            assert bool(raw_other) is other, (name, title)
    assert PrintJob.objects.filter(device__name="two-queued").claimable().count() == 2
