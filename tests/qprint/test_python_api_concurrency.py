"""Races of the Python API on PostgreSQL: idempotent submission, double-click reprint, cancel
against claim."""

import pytest

from qprint import api
from qprint.core.errors import Conflict
from qprint.core.states import JobStatus
from qprint.domain.claim import claim_next_job
from qprint.models import PrintJob, PrintJobEvent
from tests.qprint.helpers import PDF, connect, make_device, run_concurrently, submit, values

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_the_same_idempotency_key_six_times_at_once_makes_one_job():
    connect(make_device().device)
    for round_no in range(5):
        key = f"invoice-{round_no}"
        results = values(
            run_concurrently(
                6,
                lambda i, key=key: api.submit_job(
                    "acme", "front-desk", PDF, "application/pdf", idempotency_key=key
                ),
            )
        )
        assert len({job.pk for job, _ in results}) == 1
        assert sorted(created for _, created in results) == [False] * 5 + [True]
        assert PrintJob.objects.filter(idempotency_key=key).count() == 1
        job = PrintJob.objects.get(idempotency_key=key)
        assert job.events.filter(type="QUEUED").count() == 1
        assert bytes(job.document.content) == PDF


def test_a_double_click_on_reprint_makes_one_reprint():
    device = make_device().device
    for _round in range(4):
        job = submit(device)
        results = run_concurrently(4, lambda i, job=job: api.reprint_job(job.pk))
        made = [r[1] for r in results if r[0] == "ok"]
        refused = [r[1] for r in results if r[0] == "error"]
        assert len(made) == 1
        assert [e.code for e in refused if isinstance(e, Conflict)] == ["already_reprinted"] * 3
        assert PrintJob.objects.filter(reprint_of=job).count() == 1


def test_cancel_racing_a_claim_either_cancels_or_the_claim_wins_never_both():
    device = connect(make_device().device)
    for _round in range(6):
        job = submit(device)

        def claim_or_cancel(i: int, job=job):
            if i == 0:
                return api.cancel_job(job.pk)
            return claim_next_job(device.pk, node=f"node-{i % 2}")

        results = values(run_concurrently(4, claim_or_cancel))
        job.refresh_from_db()
        assert job.status == JobStatus.CANCELLED  # cancel wins over QUEUED and over CLAIMED
        claimed_events = PrintJobEvent.objects.filter(job=job, type="CLAIMED").count()
        assert claimed_events <= 1
        handed = {a.claim_id for a in results[1:] if a is not None}
        assert len(handed) <= 1  # if it was handed out, it was handed out once
        assert not PrintJob.objects.filter(device=device, status=JobStatus.CLAIMED).exists()
