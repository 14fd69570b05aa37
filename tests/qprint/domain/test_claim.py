"""The claim on one node: the gate, the replay, the order of jobs. The same code runs on SQLite
(the embedded default) and PostgreSQL; the races are in ``test_claim_concurrency.py``."""

from datetime import timedelta

import pytest
from django.db.models import F
from django.db.models.functions import Now

from qprint import api
from qprint.core.errors import Disabled, GateClosed
from qprint.core.states import JobStatus
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import Device, PrintJob, PrintJobEvent
from qprint.models.serializers import assignment_body
from tests.qprint.helpers import connect, event, make_device, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def device():
    return connect(make_device().device)


def test_nothing_to_print_answers_none(device):
    assert claim_next_job(device.pk) is None


def test_claim_hands_out_the_job_and_records_who_claimed_it(device):
    job = submit(device, title="Invoice 42", options={"copies": 2}, printer="Laser")
    assignment = claim_next_job(device.pk, node="node-a")
    job.refresh_from_db()
    assert assignment.job_id == job.pk
    assert assignment.claim_id == job.claim_id
    assert (assignment.title, assignment.printer, assignment.options) == (
        "Invoice 42",
        "Laser",
        {"copies": 2},
    )
    assert (assignment.size, assignment.sha256) == (job.size, job.sha256)
    assert job.status == JobStatus.CLAIMED
    assert (job.claim_node, job.attempts) == ("node-a", 1)
    assert job.claimed_at is not None
    assert list(job.events.values_list("type", "source")) == [
        ("QUEUED", "SERVER"),
        ("CLAIMED", "SERVER"),
    ]
    body = assignment_body(assignment)
    assert body["job_id"] == str(job.pk) and body["claim_id"] == str(job.claim_id)


def test_every_later_claim_replays_the_same_assignment_until_the_job_leaves_claimed(device):
    first, second = submit(device), submit(device)
    a1 = claim_next_job(device.pk, node="node-a")
    a2 = claim_next_job(device.pk, node="node-b")
    assert a1 == a2
    assert a1.job_id == first.pk
    second.refresh_from_db()
    assert (second.status, second.claim_id) == (JobStatus.QUEUED, None)
    first.refresh_from_db()
    assert first.attempts == 1
    assert first.events.filter(type="CLAIMED").count() == 1


def test_a_job_that_left_claimed_is_never_handed_out_again(device):
    first, second = submit(device), submit(device)
    a1 = claim_next_job(device.pk)
    record_device_event(device, first.pk, event(a1.claim_id, "RECEIVED"))
    a2 = claim_next_job(device.pk)
    assert a2.job_id == second.pk
    record_device_event(device, second.pk, event(a2.claim_id, "FAILED"))
    assert claim_next_job(device.pk) is None
    assert PrintJobEvent.objects.filter(job=first, type="CLAIMED").count() == 1


def test_higher_priority_first_then_oldest_first(device):
    low = submit(device, priority=0)
    high = submit(device, priority=5)
    low2 = submit(device, priority=0)
    order = []
    for _ in range(3):
        a = claim_next_job(device.pk)
        order.append(a.job_id)
        record_device_event(device, a.job_id, event(a.claim_id, "PRINTED"))
    assert order == [high.pk, low.pk, low2.pk]


def test_an_expired_job_is_not_handed_out(device):
    stale = submit(device)
    fresh = submit(device)
    PrintJob.objects.filter(pk=stale.pk).update(expires_at=Now() - timedelta(seconds=1))
    assert claim_next_job(device.pk).job_id == fresh.pk


def test_a_job_that_never_expires_is_handed_out(device):
    job = submit(device, expires_in=None)
    assert job.expires_at is None
    assert claim_next_job(device.pk).job_id == job.pk


def test_a_cancelled_job_is_skipped(device):
    cancelled, kept = submit(device), submit(device)
    api.cancel_job(cancelled)
    assert claim_next_job(device.pk).job_id == kept.pk


def test_other_devices_jobs_are_not_handed_out(device):
    other = connect(make_device(name="other").device)
    submit(other)
    assert claim_next_job(device.pk) is None


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"connection_id": None}, "not_connected"),
        ({"connection_lease_expires_at": Now() - timedelta(seconds=1)}, "not_connected"),
        ({"connection_ready": False}, "not_ready"),
        ({"control_revision": F("control_revision") + 1}, "stale_control"),
        ({"settings_revision": F("settings_revision") + 1}, "stale_settings"),
    ],
)
def test_the_gate_refuses_with_the_reason(device, change, code):
    job = submit(device)
    Device.objects.filter(pk=device.pk).update(**change)
    with pytest.raises(GateClosed) as refused:
        claim_next_job(device.pk)
    assert (refused.value.code, refused.value.status) == (code, 409)
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def test_a_paused_device_that_applied_the_pause_is_refused_as_paused(device):
    submit(device)
    api.pause_device(device)
    with pytest.raises(GateClosed) as refused:
        claim_next_job(device.pk)
    assert refused.value.code == "stale_control"  # the device has not applied the pause yet
    Device.objects.filter(pk=device.pk).update(control_applied_revision=F("control_revision"))
    with pytest.raises(GateClosed) as refused:
        claim_next_job(device.pk)
    assert refused.value.code == "paused"


def test_a_disabled_device_is_refused_with_403(device):
    api.disable_device(device)
    with pytest.raises(Disabled) as refused:
        claim_next_job(device.pk)
    assert (refused.value.code, refused.value.status) == ("disabled", 403)


def test_the_lease_is_judged_on_the_database_clock(device):
    """A lease in the past by the database clock closes the gate, whatever Python's clock says."""
    Device.objects.filter(pk=device.pk).update(
        connection_lease_expires_at=Now() - timedelta(milliseconds=5)
    )
    with pytest.raises(GateClosed):
        claim_next_job(device.pk)
    Device.objects.filter(pk=device.pk).update(
        connection_lease_expires_at=Now() + timedelta(seconds=30)
    )
    assert claim_next_job(device.pk) is None


def test_an_unknown_device_is_not_found():
    from qprint.core.errors import NotFound

    with pytest.raises(NotFound):
        claim_next_job(987654)


@pytest.mark.parametrize("way", ["one statement", "transaction"])
def test_a_claim_says_whether_another_job_waits_behind_the_one_it_hands_out(device, way):
    if way == "transaction":  # a tenant with webhook endpoints: the claim's transaction
        from qprint.models import WebhookEndpoint

        WebhookEndpoint.objects.create(
            tenant=device.tenant, url="https://hooks.example.com/q", secret="whsec_x"
        )
    first, second = submit(device), submit(device)
    submit(connect(make_device(name="other").device))  # another device's job is not counted

    a1 = claim_next_job(device.pk)
    assert (a1.job_id, a1.more_queued) == (first.pk, True)
    assert claim_next_job(device.pk).more_queued is True  # the replay says it again
    record_device_event(device, first.pk, event(a1.claim_id, "RECEIVED"))

    a2 = claim_next_job(device.pk)
    assert (a2.job_id, a2.more_queued) == (second.pk, False)
    third = submit(device)
    assert claim_next_job(device.pk).more_queued is True  # the held job's replay sees the third
    record_device_event(device, second.pk, event(a2.claim_id, "RECEIVED"))
    a3 = claim_next_job(device.pk)
    assert (a3.job_id, a3.more_queued) == (third.pk, False)


def test_an_expired_or_cancelled_job_behind_the_claimed_one_does_not_count(device):
    submit(device)
    expired, cancelled = submit(device), submit(device)
    PrintJob.objects.filter(pk=expired.pk).update(expires_at=Now() - timedelta(seconds=1))
    api.cancel_job(cancelled)
    assert claim_next_job(device.pk).more_queued is False


def test_a_pushed_claim_does_not_read_what_waits_behind_its_job(device):
    # The socket that pushes claims the next job itself once this one leaves CLAIMED.
    submit(device), submit(device)
    assert claim_next_job(device.pk, inline_max=4096, for_push=True).more_queued is None


def test_a_claim_that_asks_for_its_document_inline_still_says_what_waits(device):
    # A device claiming for itself, with its document in the answer, claims the next job itself.
    submit(device), submit(device)
    assert claim_next_job(device.pk, inline_max=4096).more_queued is True
