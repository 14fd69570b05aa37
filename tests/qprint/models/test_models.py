"""The schema's own guarantees: names unique per tenant, idempotency keys unique per tenant,
one event per event id, at most one CLAIMED job per device."""

import uuid

import pytest
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from qprint.core.states import JobStatus
from qprint.models import Device, PrintJob, PrintJobEvent
from tests.qprint.helpers import PDF, make_device, submit

pytestmark = pytest.mark.django_db


def test_device_name_is_unique_within_a_tenant_not_across_tenants():
    make_device("acme", "desk")
    make_device("globex", "desk")
    with pytest.raises(IntegrityError), transaction.atomic():
        make_device("acme", "desk")
    assert Device.objects.filter(name="desk").count() == 2


def test_idempotency_key_is_unique_within_a_tenant_when_set():
    a = make_device("acme", "desk").device
    b = make_device("globex", "desk").device
    submit(a, idempotency_key="k1")
    submit(b, idempotency_key="k1")  # another tenant may use the same key
    submit(a)
    submit(a)  # no key: any number of jobs
    with pytest.raises(IntegrityError), transaction.atomic():
        PrintJob.objects.create(
            tenant="acme",
            device=a,
            content_type="text/plain",
            size=1,
            sha256="x",
            idempotency_key="k1",
        )
    assert PrintJob.objects.filter(idempotency_key__isnull=True).count() == 2


def test_event_id_is_unique():
    device = make_device().device
    job = submit(device)
    event_id = uuid.uuid4()
    PrintJobEvent.objects.create(
        event_id=event_id, job=job, source="DEVICE", type="PROGRESS", fingerprint="a"
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        PrintJobEvent.objects.create(
            event_id=event_id, job=job, source="DEVICE", type="PROGRESS", fingerprint="a"
        )


def test_a_device_cannot_hold_two_claimed_jobs_even_by_a_direct_write():
    device = make_device().device
    first, second = submit(device), submit(device)
    PrintJob.objects.filter(pk=first.pk).update(status=JobStatus.CLAIMED, claim_id=uuid.uuid4())
    with pytest.raises(IntegrityError), transaction.atomic():
        PrintJob.objects.filter(pk=second.pk).update(
            status=JobStatus.CLAIMED, claim_id=uuid.uuid4()
        )


def test_submitted_job_has_size_sha256_document_and_expiry_on_the_database_clock():
    device = make_device().device
    job = submit(device)
    job.refresh_from_db()
    assert job.size == len(PDF)
    assert len(job.sha256) == 64
    assert bytes(job.document.content) == PDF
    assert job.status == JobStatus.QUEUED
    assert (job.expires_at - job.created_at).total_seconds() == 86400
    assert PrintJob.objects.filter(pk=job.pk, created_at__lte=Now()).exists()


def test_job_created_without_the_api_still_expires_after_the_ttl(settings):
    from datetime import timedelta

    from django.utils import timezone

    device = make_device().device
    settings.QPRINT = {"JOB_TTL_SECONDS": 600}
    before = timezone.now()
    job = PrintJob.objects.create(
        tenant=device.tenant, device=device, content_type="text/plain", size=1, sha256="x"
    )
    assert before + timedelta(seconds=600) <= job.expires_at
    assert job.expires_at <= timezone.now() + timedelta(seconds=600)

    settings.QPRINT = {"JOB_TTL_SECONDS": None}
    forever = PrintJob.objects.create(
        tenant=device.tenant, device=device, content_type="text/plain", size=1, sha256="y"
    )
    assert forever.expires_at is None
