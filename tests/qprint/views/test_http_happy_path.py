"""The whole life of a job over HTTP: submit, claim, download, events, and the job as the
application sees it."""

import base64
import hashlib
import uuid

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.qprint.factories import connect, make_device, make_key

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n% a tiny test document\n%%EOF\n"


def submit_json(client, key, device="front-desk", content=PDF, **fields):
    body = {
        "device": device,
        "content_type": "application/pdf",
        "content_base64": base64.b64encode(content).decode(),
        **fields,
    }
    return client.post(reverse("qprint:jobs"), body, content_type="application/json", **key.auth)


def event(client, dev, job_id, claim_id, type_, event_id=None):
    body = {
        "event_id": str(event_id or uuid.uuid4()),
        "type": type_,
        "claim_id": claim_id,
        "occurred_at": "2026-01-01T10:00:00Z",
    }
    return client.post(
        reverse("qprint:device-job-events", args=[job_id]),
        body,
        content_type="application/json",
        **dev.auth,
    )


def test_job_submitted_as_json_is_claimed_downloaded_and_printed(client):
    key = make_key()
    dev = make_device()
    connect(dev.device)

    submitted = submit_json(client, key, title="Invoice 42", options={"copies": 2}, priority=5)
    assert submitted.status_code == 201, submitted.content
    job = submitted.json()
    assert job["status"] == "QUEUED"
    assert job["device"] == "front-desk"
    assert job["size"] == len(PDF)
    assert job["sha256"] == hashlib.sha256(PDF).hexdigest()
    assert job["options"] == {"copies": 2}

    claimed = client.post(reverse("qprint:device-claim"), **dev.auth)
    assert claimed.status_code == 200, claimed.content
    assignment = claimed.json()
    assert assignment["job_id"] == job["id"]
    assert assignment["title"] == "Invoice 42"
    assert assignment["priority"] == 5
    assert set(assignment) == {
        "job_id",
        "claim_id",
        "printer",
        "title",
        "content_type",
        "size",
        "sha256",
        "options",
        "priority",
        "document_url",
        "created_at",
    }
    assert assignment["document_url"] == (
        f"http://testserver/qprint/api/v1/device/jobs/{job['id']}/document"
    )

    download = client.get(assignment["document_url"], **dev.auth)
    assert download.status_code == 200
    assert download.content == PDF
    assert download["Content-Type"] == "application/pdf"
    assert download["Content-Length"] == str(len(PDF))
    assert download["ETag"] == f'"{job["sha256"]}"'

    for type_ in ("RECEIVED", "SPOOLED", "PRINTED"):
        answer = event(client, dev, job["id"], assignment["claim_id"], type_)
        assert answer.status_code == 201, answer.content
        assert answer.json()["job_status"] == type_

    seen = client.get(reverse("qprint:job-detail", args=[job["id"]]), **key.auth)
    assert seen.status_code == 200
    body = seen.json()
    assert body["status"] == "PRINTED"
    assert body["finished_at"] is not None
    device_types = [e["type"] for e in body["events"] if e["source"] == "DEVICE"]
    assert device_types == ["RECEIVED", "SPOOLED", "PRINTED"]
    recorded = [e["recorded_at"] for e in body["events"]]
    assert recorded == sorted(recorded)

    assert client.post(reverse("qprint:device-claim"), **dev.auth).status_code == 204


def test_job_submitted_as_multipart_keeps_its_bytes_and_fields(client):
    key = make_key()
    dev = make_device()
    connect(dev.device)
    from django.core.files.uploadedfile import SimpleUploadedFile

    document = SimpleUploadedFile("label.pdf", PDF, content_type="application/pdf")
    answer = client.post(
        reverse("qprint:jobs"),
        {
            "device": "front-desk",
            "document": document,
            "options": '{"duplex": true}',
            "priority": "3",
        },
        **key.auth,
    )
    assert answer.status_code == 201, answer.content
    job = answer.json()
    assert job["title"] == "label.pdf"
    assert job["content_type"] == "application/pdf"
    assert job["options"] == {"duplex": True}
    assert job["priority"] == 3

    assignment = client.post(reverse("qprint:device-claim"), **dev.auth).json()
    download = client.get(assignment["document_url"], **dev.auth)
    assert download.content == PDF


def test_claim_replays_the_same_assignment_until_the_job_moves_on(client):
    key = make_key()
    dev = make_device()
    connect(dev.device)
    first_job = submit_json(client, key).json()
    submit_json(client, key, content=b"second").json()

    claimed = client.post(reverse("qprint:device-claim"), **dev.auth)
    first = claimed.json()
    again = client.post(reverse("qprint:device-claim"), **dev.auth).json()
    assert again["claim_id"] == first["claim_id"]
    assert again["job_id"] == first_job["id"]
    # The second job waits behind the first: the device will claim again after it.
    assert claimed.headers["Qprint-More-Queued"] == "true"
    assert "more_queued" not in first  # the assignment body is the same either way

    event(client, dev, first["job_id"], first["claim_id"], "RECEIVED")
    claimed = client.post(reverse("qprint:device-claim"), **dev.auth)
    assert claimed.json()["job_id"] != first["job_id"]
    assert claimed.headers["Qprint-More-Queued"] == "false"


def claim(client, dev, inline_max=None):
    headers = {} if inline_max is None else {"Qprint-Inline-Max-Bytes": str(inline_max)}
    return client.post(reverse("qprint:device-claim"), headers=headers, **dev.auth)


def test_a_claim_that_asks_carries_a_small_enough_document_inline(client):
    key = make_key()
    dev = make_device()
    connect(dev.device)
    submit_json(client, key)

    asked = claim(client, dev, inline_max=len(PDF)).json()
    assert base64.b64decode(asked["document_base64"]) == PDF
    assert asked["sha256"] == hashlib.sha256(PDF).hexdigest()
    # The replay of the same claim, asking less than the document's size or nothing: the
    # document is downloaded from document_url.
    for smaller in (claim(client, dev, inline_max=len(PDF) - 1), claim(client, dev)):
        replay = smaller.json()
        assert "document_base64" not in replay
        assert replay["claim_id"] == asked["claim_id"]
    assert client.get(replay["document_url"], **dev.auth).content == PDF


def test_the_inline_document_a_claim_asks_for_is_capped_by_the_setting(client):
    key = make_key()
    dev = make_device()
    connect(dev.device)
    submit_json(client, key)
    with override_settings(QPRINT={"INLINE_DOCUMENT_MAX_BYTES": len(PDF) - 1}):
        assert "document_base64" not in claim(client, dev, inline_max=10**6).json()
    with override_settings(QPRINT={"INLINE_DOCUMENT_MAX_BYTES": len(PDF)}):
        assert "document_base64" in claim(client, dev, inline_max=10**6).json()
        assert "document_base64" in claim(client, dev, inline_max="9" * 40).json()


@pytest.mark.parametrize("asked", ["-1", "1.5", "many", "", "\u00b2", "1e6"])
def test_an_inline_limit_that_is_not_a_byte_count_is_refused_and_claims_nothing(client, asked):
    key = make_key()
    dev = make_device()
    connect(dev.device)
    job = submit_json(client, key).json()
    answer = claim(client, dev, inline_max=asked)
    assert answer.status_code == 422
    assert answer.json() == {
        "error": "invalid",
        "message": "'Qprint-Inline-Max-Bytes' must be a non-negative integer.",
    }
    assert client.get(reverse("qprint:job-detail", args=[job["id"]]), **key.auth).json()[
        "status"
    ] == ("QUEUED")


def test_a_malformed_inline_limit_with_a_bad_token_is_refused_for_the_token_first(client):
    # As for a malformed event: the device's standing is answered before what the request says.
    dev = make_device()
    connect(dev.device)
    headers = {"Qprint-Inline-Max-Bytes": "-1"}
    wrong = {"HTTP_AUTHORIZATION": "Bearer qpd_not_a_token"}
    answer = client.post(reverse("qprint:device-claim"), headers=headers, **wrong)
    assert (answer.status_code, answer.json()["error"]) == (401, "unauthorized")
    dev.device.enabled = False
    dev.device.save(update_fields=["enabled"])
    answer = client.post(reverse("qprint:device-claim"), headers=headers, **dev.auth)
    assert (answer.status_code, answer.json()["error"]) == (403, "disabled")


def test_claim_with_nothing_to_print_answers_204_without_body(client):
    dev = make_device()
    connect(dev.device)
    answer = client.post(reverse("qprint:device-claim"), **dev.auth)
    assert answer.status_code == 204
    assert answer.content == b""


def test_document_can_be_fetched_again_after_received_and_revalidated_by_etag(client):
    key = make_key()
    dev = make_device()
    connect(dev.device)
    submit_json(client, key)
    assignment = client.post(reverse("qprint:device-claim"), **dev.auth).json()
    event(client, dev, assignment["job_id"], assignment["claim_id"], "RECEIVED")

    again = client.get(assignment["document_url"], **dev.auth)
    assert again.status_code == 200
    assert again.content == PDF
    cached = client.get(assignment["document_url"], HTTP_IF_NONE_MATCH=again["ETag"], **dev.auth)
    assert cached.status_code == 304
    assert cached.content == b""


def test_base64_with_line_breaks_is_accepted(client):
    key = make_key()
    make_device()
    content = bytes(range(256)) * 4
    wrapped = base64.encodebytes(content).decode()  # 76-character lines, as `base64` writes
    answer = client.post(
        reverse("qprint:jobs"),
        {"device": "front-desk", "content_type": "application/pdf", "content_base64": wrapped},
        content_type="application/json",
        **key.auth,
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["sha256"] == hashlib.sha256(content).hexdigest()
