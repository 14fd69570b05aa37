"""The embedded default: the same claim and event code on SQLite, with threads of one process
(Daphne's thread pool) racing. ``transaction_mode = "IMMEDIATE"`` serialises the writers."""

import pytest
from django.db import connection

from qprint.core.states import JobStatus
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import PrintJob, PrintJobEvent
from tests.qprint.helpers import connect, event, make_device, run_concurrently, submit, values

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("the SQLite path (the PostgreSQL races are in test_claim_concurrency.py)")


def test_racing_claims_on_sqlite_make_one_transition_per_job():
    device = connect(make_device().device)
    jobs = [submit(device) for _ in range(4)]
    for job in jobs[:3]:
        assignments = values(run_concurrently(4, lambda i: claim_next_job(device.pk)))
        job.refresh_from_db()
        assert {a.claim_id for a in assignments} == {job.claim_id}
        assert PrintJobEvent.objects.filter(job=job, type="CLAIMED").count() == 1
        body = event(job, "RECEIVED")
        outcomes = values(
            run_concurrently(
                4, lambda i, job=job, body=body: record_device_event(device, job.pk, body)
            )
        )
        assert sorted(o.created for o in outcomes) == [False, False, False, True]
    assert PrintJob.objects.get(pk=jobs[3].pk).status == JobStatus.QUEUED
