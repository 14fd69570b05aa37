"""The delivery guarantee's rule 2 (docs/JOBS.md) on PostgreSQL with real concurrency: one event
delivered six times at once."""

import uuid

import pytest

from qprint.core.states import JobStatus
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import PrintJob, PrintJobEvent
from tests.qprint.helpers import connect, event, make_device, run_concurrently, submit, values

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

DELIVERIES = 6
ROUNDS = 5


def test_six_concurrent_deliveries_of_one_event_record_one_row_and_one_state_change():
    device = connect(make_device().device)
    jobs = [submit(device) for _ in range(ROUNDS)]
    for job in jobs:
        claim_next_job(device.pk)
        job.refresh_from_db()
        body = event(job, "RECEIVED", message="downloaded")

        outcomes = values(
            run_concurrently(
                DELIVERIES,
                lambda i, job=job, body=body: record_device_event(device, job.pk, dict(body)),
            )
        )

        assert sorted(o.created for o in outcomes) == [False] * (DELIVERIES - 1) + [True]
        assert {o.event.pk for o in outcomes} == {
            PrintJobEvent.objects.get(event_id=body["event_id"]).pk
        }
        assert PrintJobEvent.objects.filter(job=job, source="DEVICE").count() == 1
        job.refresh_from_db()
        assert job.status == JobStatus.RECEIVED
        assert job.received_at is not None


def test_concurrent_different_events_under_one_id_record_one_and_refuse_the_rest():
    device = connect(make_device().device)
    job = submit(device)
    claim_next_job(device.pk)
    job.refresh_from_db()
    event_id = uuid.uuid4()
    kinds = ["RECEIVED", "FAILED", "PRINTED", "OUTCOME_UNKNOWN", "SPOOLED", "PROGRESS"]

    results = run_concurrently(
        len(kinds),
        lambda i: record_device_event(device, job.pk, event(job, kinds[i], event_id=event_id)),
    )

    recorded = [r[1] for r in results if r[0] == "ok"]
    refused = [r[1] for r in results if r[0] == "error"]
    assert len(recorded) == 1 and recorded[0].created
    assert {getattr(e, "code", repr(e)) for e in refused} == {"event_conflict"}
    row = PrintJobEvent.objects.get(event_id=event_id)
    job.refresh_from_db()
    assert job.status == (row.type if row.type != "PROGRESS" else JobStatus.CLAIMED)
    assert PrintJob.objects.filter(pk=job.pk).count() == 1


def test_two_final_outcomes_reported_at_once_record_one_and_refuse_the_other():
    """PRINTED and FAILED of one job, each under its own id, at once, round after round: one is
    recorded and moves the job, the other is refused as going backwards (the one-statement event
    decides on the row it locked, as the transaction's way does)."""
    device = connect(make_device().device)
    kinds = ["PRINTED", "FAILED", "PRINTED", "FAILED"]
    for _ in range(ROUNDS):
        job = submit(device)
        claim_next_job(device.pk)
        job.refresh_from_db()
        results = run_concurrently(
            len(kinds), lambda i, job=job: record_device_event(device, job.pk, event(job, kinds[i]))
        )

        recorded = [r[1] for r in results if r[0] == "ok"]
        refused = [r[1] for r in results if r[0] == "error"]
        assert len(recorded) == 1 and recorded[0].created, results
        assert {getattr(e, "code", repr(e)) for e in refused} == {"backwards"}, refused
        rows = PrintJobEvent.objects.filter(job=job, source="DEVICE")
        assert [row.type for row in rows] == [recorded[0].event.type]
        job.refresh_from_db()
        assert job.status == recorded[0].event.type and job.finished_at is not None


def test_a_sockets_run_and_a_final_outcome_at_once_end_the_job_once():
    """A socket's SPOOLED and PRINTED of one job (one statement) while FAILED of the same job
    arrives three times at once, round after round: either the run is recorded whole and every
    FAILED refused, or one FAILED wins and the run's events are refused; never both, never half
    a run."""
    from qprint.domain.events import EventReport, record_events_together

    device = connect(make_device().device)
    for _ in range(ROUNDS):
        job = submit(device)
        claim_next_job(device.pk)
        job.refresh_from_db()
        record_device_event(device, job.pk, event(job, "RECEIVED"))
        run = [EventReport(job.pk, event(job, kind)) for kind in ("SPOOLED", "PRINTED")]

        def deliver(i, job=job, run=run):
            if i == 0:
                return record_events_together(device.pk, run, token_hash=device.token_hash)
            return record_device_event(device, job.pk, event(job, "FAILED"))

        results = run_concurrently(4, deliver)

        assert all(r[0] == "ok" or r[1].code == "backwards" for r in results[1:]), results
        socket = results[0][1]
        rows = list(PrintJobEvent.objects.filter(job=job, source="DEVICE").order_by("pk"))
        job.refresh_from_db()
        if job.status == JobStatus.PRINTED:
            assert all(o.created for o in socket), socket
            assert [r.type for r in rows] == ["RECEIVED", "SPOOLED", "PRINTED"]
            assert all(r[0] == "error" for r in results[1:]), results
        else:
            assert job.status == JobStatus.FAILED
            assert [getattr(o, "code", None) for o in socket] == ["backwards", "backwards"]
            assert [r.type for r in rows] == ["RECEIVED", "FAILED"]
            assert sum(r[0] == "ok" for r in results[1:]) == 1, results
