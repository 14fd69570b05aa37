"""Device events: validated, recorded once per event id, forward only, refused as in docs/API.md."""

import collections
import itertools
import uuid

import pytest
from django.db import connection

from qprint import api
from qprint.core.errors import EventRejected, Invalid, NotFound
from qprint.core.states import RANK, JobStatus, is_final
from qprint.domain.claim import claim_next_job
from qprint.domain.credentials import PresentedToken
from qprint.domain.events import (
    EventReport,
    record_device_event,
    record_events_together,
    record_presented_events,
)
from qprint.domain.wakeups import JOB_RELEASED, JOB_RELEASED_NOTHING_QUEUED
from qprint.models import PrintJob, PrintJobEvent, WebhookEndpoint
from qprint.signals import job_finished
from tests.qprint.helpers import connect, event, make_device, recording_wakeups, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def device():
    return connect(make_device().device)


@pytest.fixture
def woken():
    yield from recording_wakeups()


@pytest.fixture
def claimed(device):
    job = submit(device)
    claim_next_job(device.pk)
    job.refresh_from_db()
    return job


def _walk(device, job, *types):
    for t in types:
        record_device_event(device, job.pk, event(job, t))
    job.refresh_from_db()
    return job


def test_received_event_moves_the_job_and_records_it(device, claimed):
    body = event(claimed, "RECEIVED", message="downloaded", detail={"bytes": 10})
    outcome = record_device_event(device, claimed.pk, body)
    assert outcome.created is True
    assert outcome.job.status == JobStatus.RECEIVED
    assert outcome.job.received_at is not None
    row = PrintJobEvent.objects.get(event_id=body["event_id"])
    assert (row.source, row.type, row.device_id, row.message, row.detail) == (
        "DEVICE",
        "RECEIVED",
        device.pk,
        "downloaded",
        {"bytes": 10},
    )
    assert len(row.fingerprint) == 64


def test_a_replay_answers_as_the_first_delivery_and_changes_nothing(device, claimed):
    body = event(claimed, "RECEIVED")
    first = record_device_event(device, claimed.pk, body)
    _walk(device, claimed, "SPOOLED")
    again = record_device_event(device, claimed.pk, dict(body))
    assert (first.created, again.created) == (True, False)
    assert again.event.pk == first.event.pk
    claimed.refresh_from_db()
    assert claimed.status == JobStatus.SPOOLED
    assert PrintJobEvent.objects.filter(event_id=body["event_id"]).count() == 1


def test_a_different_event_under_the_same_id_is_an_event_conflict(device, claimed):
    body = event(claimed, "RECEIVED")
    record_device_event(device, claimed.pk, body)
    with pytest.raises(EventRejected) as refused:
        record_device_event(device, claimed.pk, {**body, "type": "PRINTED"})
    assert (refused.value.code, refused.value.status) == ("event_conflict", 409)
    claimed.refresh_from_db()
    assert claimed.status == JobStatus.RECEIVED


def test_an_event_of_an_older_claim_is_stale(device, claimed):
    with pytest.raises(EventRejected) as refused:
        record_device_event(device, claimed.pk, event(uuid.uuid4(), "RECEIVED"))
    assert refused.value.code == "stale_claim"
    claimed.refresh_from_db()
    assert claimed.status == JobStatus.CLAIMED


def test_the_same_step_reported_again_under_a_new_id_is_recorded_without_a_move(device, claimed):
    _walk(device, claimed, "RECEIVED")
    outcome = record_device_event(device, claimed.pk, event(claimed, "RECEIVED"))
    assert outcome.created and outcome.job.status == JobStatus.RECEIVED


def test_progress_is_recorded_and_changes_nothing(device, claimed):
    outcome = record_device_event(device, claimed.pk, event(claimed, "PROGRESS", detail={"p": 1}))
    assert outcome.created
    claimed.refresh_from_db()
    assert claimed.status == JobStatus.CLAIMED


def test_skipping_forward_is_allowed(device, claimed):
    job = _walk(device, claimed, "FAILED")
    assert job.status == JobStatus.FAILED
    assert job.finished_at is not None


DEVICE_STATUSES = ["RECEIVED", "SPOOLED", "PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED"]
PATHS = {
    "RECEIVED": ["RECEIVED"],
    "SPOOLED": ["RECEIVED", "SPOOLED"],
    "PRINTED": ["RECEIVED", "SPOOLED", "PRINTED"],
    "FAILED": ["FAILED"],
    "OUTCOME_UNKNOWN": ["RECEIVED", "OUTCOME_UNKNOWN"],
    "CANCELLED": ["RECEIVED", "CANCELLED"],
}
BACKWARDS = [
    (reached, reported)
    for reached, reported in itertools.product(DEVICE_STATUSES, DEVICE_STATUSES)
    if RANK[reported] < RANK[reached] or is_final(reached)
]


@pytest.mark.parametrize(("reached", "reported"), BACKWARDS)
def test_every_backwards_event_is_refused_and_a_final_job_never_changes(
    device, claimed, reached, reported
):
    job = _walk(device, claimed, *PATHS[reached])
    before = PrintJob.objects.values().get(pk=job.pk)
    with pytest.raises(EventRejected) as refused:
        record_device_event(device, job.pk, event(job, reported))
    assert refused.value.code == "backwards"
    assert PrintJob.objects.values().get(pk=job.pk) == before


def test_an_event_after_the_application_cancelled_answers_job_cancelled(device, claimed):
    api.cancel_job(claimed)
    with pytest.raises(EventRejected) as refused:
        record_device_event(device, claimed.pk, event(claimed, "RECEIVED"))
    assert refused.value.code == "job_cancelled"


def test_the_device_reports_the_outcome_of_a_requested_cancel(device, claimed):
    _walk(device, claimed, "RECEIVED", "SPOOLED")
    api.cancel_job(claimed)
    job = _walk(device, claimed, "CANCELLED")
    assert job.status == JobStatus.CANCELLED and job.finished_at is not None


def test_another_devices_job_is_not_found(device, claimed):
    other = connect(make_device(name="other").device)
    with pytest.raises(NotFound):
        record_device_event(other, claimed.pk, event(claimed, "RECEIVED"))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"event_id": "nope"}, "event_id"),
        ({"event_id": None}, "event_id"),
        ({"type": "EXPLODED"}, "type"),
        ({"type": "QUEUED"}, "type"),
        ({"claim_id": 5}, "claim_id"),
        ({"occurred_at": "yesterday"}, "occurred_at"),
        ({"message": 12}, "message"),
        ({"detail": [1]}, "detail"),
    ],
)
def test_an_invalid_body_is_refused_naming_the_field(device, claimed, change, field):
    with pytest.raises(Invalid) as refused:
        record_device_event(device, claimed.pk, {**event(claimed, "RECEIVED"), **change})
    assert refused.value.status == 422
    assert f"'{field}'" in refused.value.message
    assert not PrintJobEvent.objects.filter(source="DEVICE").exists()


def test_leaving_claimed_wakes_the_device_after_commit(
    device, claimed, woken, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        record_device_event(device, claimed.pk, event(claimed, "RECEIVED"))
        assert woken == collections.deque()  # not before the commit
    assert [w[:2] for w in woken] == [(device.tenant, device.pk)]
    assert woken[0][2] in (JOB_RELEASED, JOB_RELEASED_NOTHING_QUEUED)


def _record_release(way: str, job: PrintJob, token: str) -> None:
    """RECEIVED of ``job`` (claimed), recorded the ``way`` named."""
    device = job.device
    received = event(job, "RECEIVED")
    if way == "alone":
        record_device_event(device, job.pk, received)
    elif way == "http":
        record_presented_events(PresentedToken(token, "127.0.0.21"), job.pk, [received])
    elif way == "run":  # a socket's RECEIVED and SPOOLED, sent together
        spooled = event(job, "SPOOLED")
        reports = [EventReport(job.pk, received), EventReport(job.pk, spooled)]
        record_events_together(device.pk, reports, token_hash=device.token_hash)
    else:  # a tenant with webhooks: the move's transaction writes the delivery with it
        WebhookEndpoint.objects.create(
            tenant=device.tenant, url="https://hooks.example.com/q", secret="whsec_x"
        )
        record_device_event(device, job.pk, received)


@pytest.mark.parametrize("way", ["alone", "http", "run", "webhooks"])
@pytest.mark.parametrize("behind", [0, 1])
def test_a_release_says_in_its_wakeup_whether_another_job_waited(
    way, behind, woken, django_capture_on_commit_callbacks
):
    """The statement that moves a job out of CLAIMED reads whether another job of the device
    waits to be claimed; its wakeup says when none did, and a socket that only wakes its device
    then reads nothing for it (docs/REALTIME.md, "Wakeups"). Not read on SQLite: a plain
    release."""
    made = make_device()
    device = connect(made.device)
    job = submit(device)
    claim_next_job(device.pk)
    for _ in range(behind):
        submit(device)
    job.refresh_from_db()
    woken.clear()
    with django_capture_on_commit_callbacks(execute=True):
        _record_release(way, job, made.token)
    job.refresh_from_db()
    assert job.status in (JobStatus.RECEIVED, JobStatus.SPOOLED)
    read = connection.vendor == "postgresql"
    expected = JOB_RELEASED if behind or not read else JOB_RELEASED_NOTHING_QUEUED
    assert list(woken) == [(device.tenant, device.pk, expected)]


def test_a_move_that_is_not_a_release_wakes_nobody(
    device, claimed, woken, django_capture_on_commit_callbacks
):
    record_device_event(device, claimed.pk, event(claimed, "RECEIVED"))
    submit(device)  # waits; its own wakeup is recorded now
    woken.clear()
    with django_capture_on_commit_callbacks(execute=True):
        record_device_event(device, claimed.pk, event(claimed, "SPOOLED"))
        record_device_event(device, claimed.pk, event(claimed, "PRINTED"))
    assert list(woken) == []


def test_job_finished_is_sent_once_after_commit(
    device, claimed, django_capture_on_commit_callbacks
):
    received = []

    def on_finished(sender, job, status, **kwargs):
        received.append((job.pk, status))

    job_finished.connect(on_finished)
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            _walk(device, claimed, "RECEIVED")
            assert received == []
            _walk(device, claimed, "SPOOLED", "PRINTED")
            assert received == []  # not before the commit
        assert callbacks
        assert received == [(claimed.pk, "PRINTED")]
    finally:
        job_finished.disconnect(on_finished)


@pytest.mark.django_db(transaction=True)
def test_job_finished_waits_for_the_real_commit_and_not_for_a_rollback():
    from django.db import transaction

    device = connect(make_device().device)
    kept, rolled_back = submit(device), submit(device)
    received = []

    def on_finished(sender, job, status, **kwargs):
        received.append((job.pk, status))

    job_finished.connect(on_finished)
    try:
        with transaction.atomic():
            a = claim_next_job(device.pk)
            record_device_event(device, a.job_id, event(a.claim_id, "FAILED"))
            assert received == []
        assert received == [(kept.pk, "FAILED")]

        with pytest.raises(RuntimeError), transaction.atomic():
            b = claim_next_job(device.pk)
            record_device_event(device, b.job_id, event(b.claim_id, "PRINTED"))
            raise RuntimeError("the request failed after the event")
        assert received == [(kept.pk, "FAILED")]
        assert PrintJob.objects.get(pk=rolled_back.pk).status == JobStatus.QUEUED
    finally:
        job_finished.disconnect(on_finished)
