"""The delivery guarantee's rules 1 and 3 (docs/JOBS.md) on PostgreSQL with real concurrency:
claims race through two service instances (threads with their own connections, each half naming
a different node)."""

import pytest

from qprint.core.states import JobStatus
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import PrintJob, PrintJobEvent
from tests.qprint.helpers import (
    connect,
    event,
    make_device,
    run_concurrently,
    sessions_waiting_on_a_lock,
    submit,
    values,
)

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


@pytest.mark.parametrize("raise_priority", [False, True], ids=["same-candidate", "other-candidate"])
def test_a_claim_whose_lock_waited_on_another_claim_replays_it(raise_priority, caplog):
    """The claim's one statement reads with the snapshot it started with, before its lock waited:
    another node's claim committed meanwhile is not seen by its subqueries. The job that claim
    took fails the UPDATE's own check (``same-candidate``), or, when the statement's candidate
    is another job (``other-candidate``: the other transaction raised a job's priority, then
    claimed it), the one-CLAIMED-job constraint fails the whole statement. Either way nothing is
    written twice: the claim takes the transaction's way and replays the other's assignment."""
    import threading

    from django.db import connection, transaction

    from tests.processes import wait_until

    device = connect(make_device().device)
    first, second = submit(device, priority=5), submit(device)
    holding, release = threading.Event(), threading.Event()
    held = {}

    def other_node():
        try:
            with transaction.atomic():
                if raise_priority:
                    PrintJob.objects.filter(pk=second.pk).update(priority=10)
                held["assignment"] = claim_next_job(device.pk, node="node-b")
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=other_node, daemon=True)
    thread.start()
    assert holding.wait(30), "the other node did not claim"
    waited = {}

    def claim_here():
        try:
            waited["assignment"] = claim_next_job(device.pk, node="node-a")
        except BaseException as exc:  # reported to the test below
            waited["error"] = exc
        finally:
            connection.close()

    caplog.set_level("DEBUG", logger="qprint.claim")
    mine = threading.Thread(target=claim_here, daemon=True)
    mine.start()

    wait_until(
        lambda: sessions_waiting_on_a_lock("WITH gate AS%") == 1,
        30,
        message="the claim's statement waiting on the device's lock",
    )
    release.set()
    thread.join(30)
    mine.join(30)
    assert "error" not in waited, waited
    taken = held["assignment"]
    assert taken.job_id == (second.pk if raise_priority else first.pk)
    assert waited["assignment"] == taken
    assert PrintJob.objects.filter(device=device, status=JobStatus.CLAIMED).count() == 1
    assert PrintJobEvent.objects.filter(job__device=device, type="CLAIMED").count() == 1
    assert PrintJob.objects.get(pk=taken.job_id).attempts == 1
    raced = [r for r in caplog.records if r.getMessage().startswith("claim_at_once_raced")]
    assert len(raced) == (1 if raise_priority else 0)
