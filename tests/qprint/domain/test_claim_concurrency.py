"""The delivery guarantee's rules 1 and 3 (docs/JOBS.md) on PostgreSQL with real concurrency:
claims race through two service instances (threads with their own connections, each half naming
a different node)."""

import pytest

from qprint.core.states import JobStatus
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import PrintJob, PrintJobEvent
from tests.qprint.helpers import connect, event, make_device, run_concurrently, submit, values

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROUNDS = 12
CLAIMERS = 8
NODES = ("node-a", "node-b")


def _claim_from_two_nodes(device_id: int):
    return run_concurrently(CLAIMERS, lambda i: claim_next_job(device_id, node=NODES[i % 2]))


def test_racing_claims_make_exactly_one_transition_and_all_get_the_same_assignment():
    device = connect(make_device().device)
    jobs = [submit(device) for _ in range(ROUNDS + 1)]

    for round_no in range(ROUNDS):
        assignments = values(_claim_from_two_nodes(device.pk))

        job = PrintJob.objects.get(pk=jobs[round_no].pk)
        assert {a.claim_id for a in assignments} == {job.claim_id}, f"round {round_no}"
        assert {a.job_id for a in assignments} == {job.pk}
        assert job.status == JobStatus.CLAIMED
        assert job.attempts == 1
        assert job.claim_node in NODES
        assert PrintJobEvent.objects.filter(job=job, type="CLAIMED").count() == 1
        nxt = PrintJob.objects.get(pk=jobs[round_no + 1].pk)
        assert (nxt.status, nxt.claim_id, nxt.attempts) == (JobStatus.QUEUED, None, 0)
        assert PrintJob.objects.filter(device=device, status=JobStatus.CLAIMED).count() == 1

        record_device_event(device, job.pk, event(job, "RECEIVED"))

    handed_out = PrintJob.objects.filter(pk__in=[j.pk for j in jobs[:ROUNDS]])
    assert set(handed_out.values_list("status", flat=True)) == {JobStatus.RECEIVED}
    assert set(handed_out.values_list("attempts", flat=True)) == {1}
    assert PrintJobEvent.objects.filter(type="CLAIMED").count() == ROUNDS
    assert PrintJob.objects.get(pk=jobs[ROUNDS].pk).status == JobStatus.QUEUED


def test_a_job_leaving_claimed_while_claims_race_is_never_handed_out_again():
    device = connect(make_device().device)
    jobs = [submit(device) for _ in range(7)]
    claim_next_job(device.pk)

    for round_no in range(6):
        current = PrintJob.objects.get(pk=jobs[round_no].pk)

        def claim_or_report(i: int, current=current):
            if i == 0:
                return record_device_event(device, current.pk, event(current, "RECEIVED"))
            return claim_next_job(device.pk, node=NODES[i % 2])

        results = values(run_concurrently(CLAIMERS, claim_or_report))
        assignments = results[1:]
        # A claim saw the job either before it left CLAIMED (the replay) or after (the next job).
        assert {a.job_id for a in assignments} <= {current.pk, jobs[round_no + 1].pk}
        current.refresh_from_db()
        assert current.status == JobStatus.RECEIVED
        assert PrintJobEvent.objects.filter(job=current, type="CLAIMED").count() == 1
        # Whoever got here first, the next job is claimed exactly once, by now or by this claim.
        nxt = claim_next_job(device.pk)
        assert nxt.job_id == jobs[round_no + 1].pk
        assert PrintJobEvent.objects.filter(job_id=nxt.job_id, type="CLAIMED").count() == 1
        fresh = {a.claim_id for a in assignments if a.job_id == nxt.job_id}
        assert fresh <= {nxt.claim_id}
