"""``GET api/v1/jobs/<id>?wait=`` answers when the job's status moves, woken by the after-commit
notice, not by the end of the wait."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from qprint import api
from qprint.domain import events
from qprint.domain.claim import claim_next_job
from qprint.webhooks import notify
from tests.qprint.factories import connect, make_device, make_key
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PDF = b"%PDF-1.4\n%%EOF\n"


def report(device, job, type_, claim_id):
    events.record_device_event(
        device,
        job.pk,
        {
            "event_id": str(uuid.uuid4()),
            "type": type_,
            "claim_id": str(claim_id),
            "occurred_at": "2026-01-01T00:00:00Z",
        },
    )


def spooled_job():
    device = connect(make_device().device)
    job, _ = api.submit_job("acme", device.name, PDF, "application/pdf")
    claim = claim_next_job(device.pk)
    report(device, job, "RECEIVED", claim.claim_id)
    report(device, job, "SPOOLED", claim.claim_id)
    return device, job, claim


def test_wait_answers_when_the_job_is_printed_well_before_the_wait_ends():
    key = make_key()
    device, job, claim = spooled_job()
    answers: list = []

    def wait():
        answer = Client().get(
            reverse("qprint:job-detail", args=[job.pk]), {"wait": "30"}, **key.auth
        )
        answers.append((time.monotonic(), answer))

    started = time.monotonic()
    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(
        lambda: notify.job_key(job.pk) in notify._callbacks, 10, message="the request waiting"
    )
    report(device, job, "PRINTED", claim.claim_id)
    committed = time.monotonic()
    waiter.join(35)
    answered, answer = answers[0]
    assert answer.status_code == 200
    assert answer.json()["status"] == "PRINTED"
    assert [e["type"] for e in answer.json()["events"]][-1] == "PRINTED"
    # Woken by the change: a wait of 30 s answered within a few seconds of the commit.
    assert answered - committed < 5 < 30 - (answered - started)


def test_wait_with_a_status_already_left_answers_at_once():
    key = make_key()
    _device, job, _claim = spooled_job()
    answer = Client().get(
        reverse("qprint:job-detail", args=[job.pk]),
        {"wait": "30", "status": "QUEUED"},
        **key.auth,
    )
    assert answer.status_code == 200 and answer.json()["status"] == "SPOOLED"


def test_wait_without_a_change_answers_the_job_as_it_is_when_the_time_is_up():
    key = make_key()
    _device, job, _claim = spooled_job()
    answer = Client().get(reverse("qprint:job-detail", args=[job.pk]), {"wait": "0.3"}, **key.auth)
    assert answer.status_code == 200 and answer.json()["status"] == "SPOOLED"
    plain = Client().get(reverse("qprint:job-detail", args=[job.pk]), **key.auth)
    assert plain.json() == answer.json()


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"wait": "31"}, 422),
        ({"wait": "soon"}, 422),
        ({"wait": "1", "status": "LOST"}, 422),
        ({"wait": "1", "status": ""}, 422),  # an empty parameter is not the default
    ],
)
def test_a_bad_wait_is_refused(params, code):
    key = make_key()
    _device, job, _claim = spooled_job()
    answer = Client().get(reverse("qprint:job-detail", args=[job.pk]), params, **key.auth)
    assert answer.status_code == code and answer.json()["error"] == "invalid"


def test_waiting_on_another_tenants_job_is_404():
    other = make_key("globex", name="other")
    _device, job, _claim = spooled_job()
    answer = Client().get(reverse("qprint:job-detail", args=[job.pk]), {"wait": "5"}, **other.auth)
    assert answer.status_code == 404
    unauthenticated = Client().get(reverse("qprint:job-detail", args=[job.pk]), {"wait": "5"})
    assert unauthenticated.status_code == 401


def test_a_job_nobody_waits_on_sends_no_notice_and_a_watched_one_does(monkeypatch):
    """The notice that wakes ``?wait`` requests goes out (to Redis, across nodes) only for a job
    a request watches; every other move of every job sends nothing."""
    sent: list[str] = []
    monkeypatch.setattr(notify, "publish_job", lambda job_id: sent.append(str(job_id)))
    device = connect(make_device().device)
    quiet, _ = api.submit_job("acme", device.name, PDF, "application/pdf")
    claim = claim_next_job(device.pk)
    report(device, quiet, "RECEIVED", claim.claim_id)
    report(device, quiet, "PRINTED", claim.claim_id)
    assert sent == []

    watched, _ = api.submit_job("acme", device.name, PDF, "application/pdf")
    from qprint.domain import jobs

    jobs.watch(watched.pk, 30)  # what a ?wait request does before it reads the job
    claim = claim_next_job(device.pk)
    report(device, watched, "RECEIVED", claim.claim_id)
    report(device, watched, "PRINTED", claim.claim_id)
    assert sent == [str(watched.pk)] * 3  # CLAIMED, RECEIVED, PRINTED


def test_wait_on_a_job_already_final_answers_at_once():
    """A final job never moves again: ``?wait=30`` answers it now, not in 30 s."""
    key = make_key()
    device, job, claim = spooled_job()
    report(device, job, "PRINTED", claim.claim_id)
    answers: list = []
    waiter = threading.Thread(
        target=lambda: answers.append(
            Client().get(reverse("qprint:job-detail", args=[job.pk]), {"wait": "30"}, **key.auth)
        )
    )
    waiter.start()
    waiter.join(10)  # well inside the 30 s a waiting request would take
    assert answers, "the wait on a final job was not answered at once"
    assert answers[0].status_code == 200 and answers[0].json()["status"] == "PRINTED"
    assert notify.job_key(job.pk) not in notify._callbacks


def test_one_key_holds_at_most_its_limit_of_waits_on_a_node(settings):
    limit = 2
    settings.QPRINT = {"MAX_WAITS_PER_KEY": limit}
    key, other = make_key(), make_key(name="other")
    device, job, claim = spooled_job()
    url = reverse("qprint:job-detail", args=[job.pk])
    answers: list = []
    waiters = [
        threading.Thread(
            target=lambda: answers.append(Client().get(url, {"wait": "30"}, **key.auth))
        )
        for _ in range(limit)
    ]
    for waiter in waiters:
        waiter.start()
    wait_until(
        lambda: len(notify._callbacks.get(notify.job_key(job.pk), ())) == limit,
        10,
        message="the key's waits in flight",
    )
    refused = Client().get(url, {"wait": "30"}, **key.auth)
    assert refused.status_code == 429 and refused.json()["error"] == "too_many_waits"
    assert refused["Retry-After"] == "1"
    assert Client().get(url, {"wait": "0"}, **other.auth).status_code == 200  # another key's
    report(device, job, "PRINTED", claim.claim_id)
    for waiter in waiters:
        waiter.join(35)
    assert [a.json()["status"] for a in answers] == ["PRINTED"] * limit
    assert Client().get(url, {"wait": "0"}, **key.auth).status_code == 200  # released
