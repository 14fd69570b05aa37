"""Expiry and retention, and their registration as qcluster singleton tasks."""

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from qcluster import tasks
from qprint.core.states import JobStatus
from qprint.domain import commands, maintenance
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import PrintDocument, PrintJob, PrintJobEvent
from qprint.signals import job_finished
from tests.qprint.helpers import connect, event, make_device, recording_wakeups, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def device():
    return connect(make_device().device)


def _age(job, **delta):
    PrintJob.objects.filter(pk=job.pk).update(expires_at=Now() - timedelta(**delta))


def test_queued_and_claimed_jobs_past_expiry_expire_with_a_server_event(device):
    claimed, queued, fresh, never = (
        submit(device),
        submit(device),
        submit(device),
        submit(device, expires_in=None),
    )
    claim_next_job(device.pk)
    for job in (claimed, queued):
        _age(job, seconds=1)

    assert maintenance.expire_jobs() == 2

    statuses = dict(PrintJob.objects.values_list("pk", "status"))
    assert statuses[claimed.pk] == statuses[queued.pk] == JobStatus.EXPIRED
    assert statuses[fresh.pk] == statuses[never.pk] == JobStatus.QUEUED
    expired = PrintJobEvent.objects.filter(type="EXPIRED", source="SERVER")
    assert set(expired.values_list("job_id", flat=True)) == {claimed.pk, queued.pk}
    assert PrintJob.objects.get(pk=claimed.pk).finished_at is not None
    assert maintenance.expire_jobs() == 0  # idempotent


def test_a_received_job_does_not_expire(device):
    job = submit(device)
    claim_next_job(device.pk)
    job.refresh_from_db()
    record_device_event(device, job.pk, event(job, "RECEIVED"))
    _age(job, seconds=1)
    assert maintenance.expire_jobs() == 0
    assert PrintJob.objects.get(pk=job.pk).status == JobStatus.RECEIVED


def test_expiring_a_claimed_job_releases_the_device_and_reports_it_finished(
    device, django_capture_on_commit_callbacks
):
    job = submit(device)
    claim_next_job(device.pk)
    _age(job, seconds=1)
    finished = []

    def on_finished(sender, job, status, **kwargs):
        finished.append((job.pk, status))

    job_finished.connect(on_finished)
    woken = recording_wakeups()
    recorded = next(woken)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            maintenance.expire_jobs()
    finally:
        job_finished.disconnect(on_finished)
        next(woken, None)
    assert finished == [(job.pk, "EXPIRED")]
    assert (device.tenant, device.pk, "job_released") in recorded


def test_retention_deletes_old_final_jobs_with_documents_and_events(device):
    old, recent, unfinished = submit(device), submit(device), submit(device)
    PrintJob.objects.filter(pk=old.pk).update(
        status=JobStatus.PRINTED, finished_at=Now() - timedelta(days=31)
    )
    PrintJob.objects.filter(pk=recent.pk).update(
        status=JobStatus.FAILED, finished_at=Now() - timedelta(days=29)
    )
    reprint_of_old = submit(device)
    PrintJob.objects.filter(pk=reprint_of_old.pk).update(reprint_of=old)

    assert maintenance.delete_old_jobs() == 1

    assert set(PrintJob.objects.values_list("pk", flat=True)) == {
        recent.pk,
        unfinished.pk,
        reprint_of_old.pk,
    }
    assert not PrintDocument.objects.filter(job_id=old.pk).exists()
    assert not PrintJobEvent.objects.filter(job_id=old.pk).exists()
    assert PrintJob.objects.get(pk=reprint_of_old.pk).reprint_of_id is None
    assert maintenance.delete_old_jobs(retention_days=28) == 1


def test_both_tasks_are_registered_as_singleton_tasks():
    registered = {t.name: t for t in tasks.registered()}
    assert registered[maintenance.EXPIRE_TASK].func is maintenance.expire
    assert registered[maintenance.RETENTION_TASK].func is maintenance.retain
    assert registered[maintenance.EXPIRE_TASK].lease_name == "task:qprint.expire-jobs"
    assert registered[maintenance.EXPIRE_TASK].every == timedelta(seconds=30)


def test_the_expiry_period_is_a_setting(settings):
    settings.QPRINT = {"EXPIRY_SECONDS": 1.5}
    try:
        maintenance.register_tasks()
        registered = {t.name: t for t in tasks.registered()}
        assert registered[maintenance.EXPIRE_TASK].every == timedelta(seconds=1.5)
    finally:
        settings.QPRINT = {}
        maintenance.register_tasks()
    assert {t.name: t for t in tasks.registered()}[maintenance.EXPIRE_TASK].every == timedelta(
        seconds=30
    )


def test_unfinished_commands_expire_after_the_job_ttl(device):
    from qprint import api
    from qprint.models import DeviceCommand

    old, fresh, done = (api.send_command(device, "PING", {}) for _ in range(3))
    api.record_command_result(device, done.pk, "DONE", {})
    DeviceCommand.objects.filter(pk__in=[old.pk, done.pk]).update(
        created_at=Now() - timedelta(seconds=86401)
    )
    assert commands.expire_commands() == 1
    statuses = dict(DeviceCommand.objects.values_list("pk", "status"))
    assert statuses == {old.pk: "EXPIRED", fresh.pk: "PENDING", done.pk: "DONE"}
    late = api.record_command_result(device, old.pk, "DONE", {})
    assert late.status == "EXPIRED"
