"""Several events of one job in one HTTP request (docs/API.md, "Several events of a job at once"):
a JSON list on the job's events endpoint, each event answered in order as it would have been
alone, the device's standing answering the whole request."""

import uuid

import pytest
from django.urls import reverse

from qprint.metrics import instruments
from qprint.models import Device, PrintJob, PrintJobEvent
from tests.qprint.factories import connect, make_device
from tests.qprint.helpers import event, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(client):
    """A connected device holding a claimed job it has RECEIVED: ``(device, assignment)``."""
    made = make_device()
    connect(made.device)
    submit(made.device)
    assignment = client.post(reverse("qprint:device-claim"), **made.auth).json()
    assert post(client, made, assignment["job_id"], event(assignment["claim_id"], "RECEIVED"))
    return made, assignment


def post(client, made, job_id, body, **headers):
    return client.post(
        reverse("qprint:device-job-events", args=[job_id]),
        body,
        content_type="application/json",
        **{**made.auth, **headers},
    )


def device_events(job_id) -> list[tuple[str, str]]:
    rows = PrintJobEvent.objects.filter(job_id=job_id, source="DEVICE").order_by("pk")
    return [(row.type, str(row.event_id)) for row in rows]


def test_a_jobs_spooled_and_printed_in_one_request_are_each_answered_and_recorded(client, held):
    made, assignment = held
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]
    sent = [event(claim_id, "SPOOLED"), event(claim_id, "PRINTED", message="done")]

    answer = post(client, made, job_id, sent)

    assert answer.status_code == 200, answer.content
    results = answer.json()["results"]
    assert [r["status"] for r in results] == [201, 201]
    assert [r["event"]["type"] for r in results] == ["SPOOLED", "PRINTED"]
    assert [r["event"]["event_id"] for r in results] == [e["event_id"] for e in sent]
    # Each answer is the job as it stood after its own event, as alone.
    assert [r["event"]["job_status"] for r in results] == ["SPOOLED", "PRINTED"]
    assert all(r["event"]["job_id"] == job_id for r in results)
    assert device_events(job_id)[1:] == [(e["type"], e["event_id"]) for e in sent]
    job = PrintJob.objects.get(pk=job_id)
    assert job.status == "PRINTED" and job.finished_at is not None

    # Sent again (the answer was lost): each a replay, nothing written.
    again = post(client, made, job_id, sent)
    assert again.status_code == 200
    assert [r["status"] for r in again.json()["results"]] == [200, 200]
    assert [r["event"]["event_id"] for r in again.json()["results"]] == [
        e["event_id"] for e in sent
    ]
    assert len(device_events(job_id)) == 3


def test_a_refused_event_in_a_list_stops_nothing_else(client, held):
    made, assignment = held
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]
    spooled = event(claim_id, "SPOOLED")
    sent = [
        spooled,
        event(claim_id, "RECEIVED"),  # backwards after SPOOLED: 409
        event(str(uuid.uuid4()), "PRINTED"),  # another claim: 409 stale_claim
        {**spooled, "message": "other"},  # the same id, other content: 409 event_conflict
        event(claim_id, "PRINTED"),
    ]

    results = post(client, made, job_id, sent).json()["results"]

    assert [(r["status"], r.get("error")) for r in results] == [
        (201, None),
        (409, "backwards"),
        (409, "stale_claim"),
        (409, "event_conflict"),
        (201, None),
    ]
    assert all(r["message"] for r in results if r["status"] >= 400)
    assert [t for t, _ in device_events(job_id)] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert PrintJob.objects.get(pk=job_id).status == "PRINTED"


@pytest.mark.parametrize("job", ["another_devices", "unknown", "not_a_uuid"])
def test_a_list_about_a_job_not_the_devices_is_404_whole(client, held, job):
    made, assignment = held
    other = make_device(name="other")
    connect(other.device)
    sent = [event(assignment["claim_id"], "SPOOLED"), event(assignment["claim_id"], "PRINTED")]
    who, job_id = {
        "another_devices": (other, assignment["job_id"]),
        "unknown": (made, str(uuid.uuid4())),
        "not_a_uuid": (made, "job-1"),
    }[job]

    answer = post(client, who, job_id, sent)

    assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    assert PrintJob.objects.get(pk=assignment["job_id"]).status == "RECEIVED"


@pytest.mark.parametrize("count", [0, 21])
def test_an_empty_or_too_long_list_is_refused_whole(client, held, count):
    made, assignment = held
    sent = [event(assignment["claim_id"], "PROGRESS") for _ in range(count)]

    answer = post(client, made, assignment["job_id"], sent)

    assert answer.status_code == 422
    assert answer.json()["error"] == "invalid" and "20" in answer.json()["message"]
    assert len(device_events(assignment["job_id"])) == 1


@pytest.mark.parametrize(
    "malformed",
    [
        pytest.param({"event_id": "not-a-uuid", "type": "PRINTED"}, id="field"),
        pytest.param("PRINTED", id="not_an_object"),
        pytest.param({"type": "PRINTED", "detail": {"\u0000": 1}}, id="nul"),
    ],
)
def test_a_list_with_a_malformed_event_is_refused_whole_naming_it(client, held, malformed):
    made, assignment = held
    good = event(assignment["claim_id"], "SPOOLED")
    if isinstance(malformed, dict):
        malformed = {**event(assignment["claim_id"], "PRINTED"), **malformed}

    answer = post(client, made, assignment["job_id"], [good, malformed])

    assert answer.status_code == 422, answer.content
    assert answer.json()["message"].startswith("Event 1: ")
    assert len(device_events(assignment["job_id"])) == 1  # not even the good one


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param("good", id="events"),
        pytest.param([], id="empty"),
        pytest.param([{"type": "PRINTED"}], id="malformed"),
    ],
)
@pytest.mark.parametrize(
    ("standing", "status", "error"),
    [("wrong_token", 401, "unauthorized"), ("disabled", 403, "disabled")],
)
def test_the_devices_standing_answers_the_whole_list_first(
    client, held, sent, standing, status, error
):
    made, assignment = held
    if sent == "good":
        sent = [event(assignment["claim_id"], t) for t in ("SPOOLED", "PRINTED")]
    headers = {}
    if standing == "wrong_token":
        headers["HTTP_AUTHORIZATION"] = "Bearer qpd_wrong"
    else:
        Device.objects.filter(pk=made.device.pk).update(enabled=False)

    answer = post(client, made, assignment["job_id"], sent, **headers)

    assert answer.status_code == status, answer.content
    assert answer.json()["error"] == error
    assert PrintJob.objects.get(pk=assignment["job_id"]).status == "RECEIVED"


def test_each_event_of_a_list_is_counted_as_alone(client, held):
    made, assignment = held
    job_id, claim_id = assignment["job_id"], assignment["claim_id"]

    def counted(status, answer):
        labels = {"status": status, "answer": answer, "path": "http"}
        return instruments.PROCESS.get_sample_value("qprint_events_total", labels) or 0.0

    before = counted("201", "created"), counted("409", "stale_claim"), counted("200", "replayed")
    sent = [event(claim_id, "SPOOLED"), event(str(uuid.uuid4()), "PRINTED")]
    post(client, made, job_id, sent)

    after = counted("201", "created"), counted("409", "stale_claim"), counted("200", "replayed")
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 0]


def test_an_event_the_database_did_not_record_is_answered_503_and_a_value_it_refused_422(
    client, held, monkeypatch
):
    """What the database raised for one event of a list is that event's answer: 503 (send it
    again) for an outage, 422 for a value it would not store; the others keep theirs."""
    from django.db import DataError, OperationalError

    from qprint.domain import events

    made, assignment = held
    answered = [OperationalError("the server closed the connection"), DataError("out of range")]
    monkeypatch.setattr(events, "record_presented_events", lambda *args: list(answered))
    sent = [event(assignment["claim_id"], t) for t in ("SPOOLED", "PRINTED")]

    results = post(client, made, assignment["job_id"], sent).json()["results"]

    assert [(r["status"], r["error"]) for r in results] == [(503, "unavailable"), (422, "invalid")]


def test_a_tenant_with_webhooks_gets_a_delivery_for_each_event_of_a_list(client, held):
    """A tenant with an endpoint has its events recorded in the move's transaction (the one
    statement writes nothing for it): each event of the list still moves the job and writes its
    delivery."""
    from qprint.models import WebhookDelivery, WebhookEndpoint

    made, assignment = held
    WebhookEndpoint.objects.create(
        tenant=made.device.tenant, url="https://hooks.example.com/q", secret="whsec_x"
    )
    sent = [event(assignment["claim_id"], t) for t in ("SPOOLED", "PRINTED")]

    results = post(client, made, assignment["job_id"], sent).json()["results"]

    assert [r["status"] for r in results] == [201, 201]
    assert PrintJob.objects.get(pk=assignment["job_id"]).status == "PRINTED"
    deliveries = WebhookDelivery.objects.filter(payload__data__job__id=assignment["job_id"])
    assert sorted(d.type for d in deliveries) == ["job.printed", "job.spooled"]
