"""Every error code of the device and application HTTP APIs (docs/API.md), produced by a
request that should produce it, answered as JSON ``{"error": code, "message": ...}``."""

import base64
import uuid
from dataclasses import dataclass

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from qprint import api
from qprint.models import Device
from tests.qprint.factories import DeviceWithToken, KeyWithSecret, connect, make_device, make_key

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n%%EOF\n"


@dataclass
class World:
    client: Client
    key: KeyWithSecret
    dev: DeviceWithToken

    def submit(self, content=PDF, **fields):
        body = {
            "device": self.dev.device.name,
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(content).decode(),
            **fields,
        }
        return self.client.post(
            reverse("qprint:jobs"), body, content_type="application/json", **self.key.auth
        )

    def claim(self):
        return self.client.post(reverse("qprint:device-claim"), **self.dev.auth)

    def claimed_job(self) -> dict:
        job = self.submit().json()
        assignment = self.claim().json()
        assert assignment["job_id"] == job["id"]
        return assignment

    def event(self, job_id, body):
        return self.client.post(
            reverse("qprint:device-job-events", args=[job_id]),
            body,
            content_type="application/json",
            **self.dev.auth,
        )


def event_body(claim_id, type_="RECEIVED", event_id=None, **extra):
    return {
        "event_id": str(event_id or uuid.uuid4()),
        "type": type_,
        "claim_id": str(claim_id),
        "occurred_at": "2026-01-01T10:00:00Z",
        **extra,
    }


@pytest.fixture
def world(client) -> World:
    dev = make_device()
    connect(dev.device)
    return World(client=client, key=make_key(), dev=dev)


# --- device API --------------------------------------------------------------------------------


def claim_without_token(w):
    return w.client.post(reverse("qprint:device-claim"))


def claim_with_unknown_token(w):
    return w.client.post(reverse("qprint:device-claim"), HTTP_AUTHORIZATION="Bearer nope")


def claim_when_disabled(w):
    api.disable_device(w.dev.device)
    return w.claim()


def claim_when_not_connected(w):
    Device.objects.filter(pk=w.dev.device.pk).update(connection_id=None)
    return w.claim()


def claim_when_lease_expired(w):
    from datetime import timedelta

    from django.db.models.functions import Now

    Device.objects.filter(pk=w.dev.device.pk).update(
        connection_lease_expires_at=Now() - timedelta(seconds=1)
    )
    return w.claim()


def claim_when_not_ready(w):
    Device.objects.filter(pk=w.dev.device.pk).update(connection_ready=False)
    return w.claim()


def claim_with_stale_control(w):
    api.pause_device(w.dev.device)
    api.resume_device(w.dev.device)
    return w.claim()


def claim_with_stale_settings(w):
    api.update_settings(w.dev.device, {"dpi": 300})
    return w.claim()


def claim_when_paused(w):
    api.pause_device(w.dev.device)
    connect(w.dev.device)  # the device applied the pause
    return w.claim()


def download_of_a_queued_job(w):
    job = w.submit().json()
    return w.client.get(reverse("qprint:device-job-document", args=[job["id"]]), **w.dev.auth)


def download_of_a_finished_job(w):
    a = w.claimed_job()
    w.event(a["job_id"], event_body(a["claim_id"], "PRINTED"))
    return w.client.get(a["document_url"], **w.dev.auth)


def event_with_a_conflicting_replay(w):
    a = w.claimed_job()
    event_id = uuid.uuid4()
    assert w.event(a["job_id"], event_body(a["claim_id"], event_id=event_id)).status_code == 201
    return w.event(a["job_id"], event_body(a["claim_id"], event_id=event_id, message="other"))


def event_going_backwards(w):
    a = w.claimed_job()
    assert w.event(a["job_id"], event_body(a["claim_id"], "SPOOLED")).status_code == 201
    return w.event(a["job_id"], event_body(a["claim_id"], "RECEIVED"))


def event_after_the_application_cancelled(w):
    a = w.claimed_job()
    api.cancel_job(a["job_id"])
    return w.event(a["job_id"], event_body(a["claim_id"], "RECEIVED"))


def event_with_a_stale_claim(w):
    a = w.claimed_job()
    return w.event(a["job_id"], event_body(uuid.uuid4(), "RECEIVED"))


def event_of_unknown_type(w):
    a = w.claimed_job()
    return w.event(a["job_id"], event_body(a["claim_id"], "EXPLODED"))


def event_without_event_id(w):
    a = w.claimed_job()
    body = event_body(a["claim_id"])
    del body["event_id"]
    return w.event(a["job_id"], body)


def event_that_is_not_json(w):
    a = w.claimed_job()
    return w.client.post(
        reverse("qprint:device-job-events", args=[a["job_id"]]),
        "{not json",
        content_type="application/json",
        **w.dev.auth,
    )


def event_sent_as_form_data(w):
    a = w.claimed_job()
    return w.client.post(
        reverse("qprint:device-job-events", args=[a["job_id"]]), {"type": "x"}, **w.dev.auth
    )


def command_result_with_bad_status(w):
    command = api.send_command(w.dev.device, "PING")
    return w.client.post(
        reverse("qprint:device-command-result", args=[command.pk]),
        {"status": "MAYBE"},
        content_type="application/json",
        **w.dev.auth,
    )


def command_result_of_unknown_command(w):
    return w.client.post(
        reverse("qprint:device-command-result", args=[uuid.uuid4()]),
        {"status": "DONE"},
        content_type="application/json",
        **w.dev.auth,
    )


def printers_not_a_list(w):
    return w.client.put(
        reverse("qprint:device-printers"),
        {"printers": "HP"},
        content_type="application/json",
        **w.dev.auth,
    )


def claim_with_get(w):
    return w.client.get(reverse("qprint:device-claim"), **w.dev.auth)


# --- application API ---------------------------------------------------------------------------


def jobs_without_key(w):
    return w.client.get(reverse("qprint:jobs"))


def jobs_with_revoked_key(w):
    api.revoke_application_key(w.key.key.tenant, w.key.key.name)
    return w.client.get(reverse("qprint:jobs"), **w.key.auth)


def jobs_with_a_device_token(w):
    return w.client.get(reverse("qprint:jobs"), **w.dev.auth)


def submit_with_reused_idempotency_key(w):
    first = w.client.post(
        reverse("qprint:jobs"),
        _json_submission(w, PDF),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="order-1",
        **w.key.auth,
    )
    assert first.status_code == 201
    return w.client.post(
        reverse("qprint:jobs"),
        _json_submission(w, b"another document"),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="order-1",
        **w.key.auth,
    )


def _json_submission(w, content):
    return {
        "device": w.dev.device.name,
        "content_type": "application/pdf",
        "content_base64": base64.b64encode(content).decode(),
    }


def submit_to_unknown_device(w):
    return w.submit(device="nowhere")


def submit_too_large_json(w):
    with override_settings(QPRINT={"MAX_DOCUMENT_BYTES": 10}):
        return w.submit(content=b"x" * 11)


def submit_too_large_multipart(w):
    from django.core.files.uploadedfile import SimpleUploadedFile

    document = SimpleUploadedFile("big.pdf", b"x" * 5000, content_type="application/pdf")
    with override_settings(QPRINT={"MAX_DOCUMENT_BYTES": 1000}):
        return w.client.post(
            reverse("qprint:jobs"),
            {"device": w.dev.device.name, "document": document},
            **w.key.auth,
        )


def submit_with_declared_length_over_the_limit(w):
    with override_settings(QPRINT={"MAX_DOCUMENT_BYTES": 10}):
        return w.client.post(
            reverse("qprint:jobs"),
            b"{}",
            content_type="application/json",
            CONTENT_LENGTH="999999999",
            **w.key.auth,
        )


def submit_as_plain_text(w):
    return w.client.post(reverse("qprint:jobs"), "hello", content_type="text/plain", **w.key.auth)


def submit_unsupported_document_type(w):
    return w.submit(content_type="video/mp4")


def submit_bad_base64(w):
    body = _json_submission(w, PDF)
    body["content_base64"] = "%%%not base64%%%"
    return w.client.post(
        reverse("qprint:jobs"), body, content_type="application/json", **w.key.auth
    )


def submit_with_text_priority(w):
    return w.submit(priority="high")


def submit_with_unknown_field(w):
    return w.submit(colour="blue")


def submit_without_device(w):
    body = _json_submission(w, PDF)
    del body["device"]
    return w.client.post(
        reverse("qprint:jobs"), body, content_type="application/json", **w.key.auth
    )


def get_unknown_job(w):
    return w.client.get(reverse("qprint:job-detail", args=[uuid.uuid4()]), **w.key.auth)


def get_job_with_a_malformed_id(w):
    return w.client.get(reverse("qprint:job-detail", args=["not-a-uuid"]), **w.key.auth)


def download_with_a_malformed_id(w):
    return w.client.get(reverse("qprint:device-job-document", args=["x"]), **w.dev.auth)


def cancel_a_final_job(w):
    job = w.submit().json()
    api.cancel_job(job["id"])
    return w.client.post(reverse("qprint:job-cancel", args=[job["id"]]), **w.key.auth)


def reprint_twice(w):
    job = w.submit().json()
    url = reverse("qprint:job-reprint", args=[job["id"]])
    assert w.client.post(url, **w.key.auth).status_code == 201
    return w.client.post(url, **w.key.auth)


def get_unknown_device(w):
    return w.client.get(reverse("qprint:device-detail", args=["nowhere"]), **w.key.auth)


def pause_unknown_device(w):
    return w.client.post(reverse("qprint:device-pause", args=["nowhere"]), **w.key.auth)


def settings_not_an_object(w):
    return w.client.put(
        reverse("qprint:device-settings", args=[w.dev.device.name]),
        "[1, 2]",
        content_type="application/json",
        **w.key.auth,
    )


def command_without_type(w):
    return w.client.post(
        reverse("qprint:device-commands", args=[w.dev.device.name]),
        {"payload": {}},
        content_type="application/json",
        **w.key.auth,
    )


def list_with_a_bad_limit(w):
    return w.client.get(reverse("qprint:jobs") + "?limit=0", **w.key.auth)


def list_with_a_forged_cursor(w):
    return w.client.get(reverse("qprint:devices") + "?cursor=garbage", **w.key.auth)


def delete_a_job(w):
    job = w.submit().json()
    return w.client.delete(reverse("qprint:job-detail", args=[job["id"]]), **w.key.auth)


CASES = [
    (claim_without_token, 401, "unauthorized"),
    (claim_with_unknown_token, 401, "unauthorized"),
    (claim_when_disabled, 403, "disabled"),
    (claim_when_not_connected, 409, "not_connected"),
    (claim_when_lease_expired, 409, "not_connected"),
    (claim_when_not_ready, 409, "not_ready"),
    (claim_with_stale_control, 409, "stale_control"),
    (claim_with_stale_settings, 409, "stale_settings"),
    (claim_when_paused, 409, "paused"),
    (claim_with_get, 405, "method_not_allowed"),
    (download_of_a_queued_job, 404, "not_found"),
    (download_of_a_finished_job, 404, "not_found"),
    (event_with_a_conflicting_replay, 409, "event_conflict"),
    (event_going_backwards, 409, "backwards"),
    (event_after_the_application_cancelled, 409, "job_cancelled"),
    (event_with_a_stale_claim, 409, "stale_claim"),
    (event_of_unknown_type, 422, "invalid"),
    (event_without_event_id, 422, "invalid"),
    (event_that_is_not_json, 422, "invalid"),
    (event_sent_as_form_data, 415, "unsupported_media_type"),
    (command_result_with_bad_status, 422, "invalid"),
    (command_result_of_unknown_command, 404, "not_found"),
    (printers_not_a_list, 422, "invalid"),
    (jobs_without_key, 401, "unauthorized"),
    (jobs_with_revoked_key, 401, "unauthorized"),
    (jobs_with_a_device_token, 401, "unauthorized"),
    (submit_with_reused_idempotency_key, 409, "idempotency_conflict"),
    (submit_to_unknown_device, 404, "unknown_device"),
    (submit_too_large_json, 413, "document_too_large"),
    (submit_too_large_multipart, 413, "document_too_large"),
    (submit_with_declared_length_over_the_limit, 413, "document_too_large"),
    (submit_as_plain_text, 415, "unsupported_media_type"),
    (submit_unsupported_document_type, 415, "unsupported_content_type"),
    (submit_bad_base64, 422, "invalid"),
    (submit_with_text_priority, 422, "invalid"),
    (submit_with_unknown_field, 422, "invalid"),
    (submit_without_device, 422, "invalid"),
    (get_unknown_job, 404, "not_found"),
    (get_job_with_a_malformed_id, 404, "not_found"),
    (download_with_a_malformed_id, 404, "not_found"),
    (cancel_a_final_job, 409, "job_final"),
    (reprint_twice, 409, "already_reprinted"),
    (get_unknown_device, 404, "unknown_device"),
    (pause_unknown_device, 404, "unknown_device"),
    (settings_not_an_object, 422, "invalid"),
    (command_without_type, 422, "invalid"),
    (list_with_a_bad_limit, 422, "invalid"),
    (list_with_a_forged_cursor, 422, "invalid"),
    (delete_a_job, 405, "method_not_allowed"),
]


@pytest.mark.parametrize(
    ("request_", "status", "code"), CASES, ids=[case[0].__name__ for case in CASES]
)
def test_error_is_answered_with_its_status_and_json_code(world, request_, status, code):
    answer = request_(world)
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/json"
    body = answer.json()
    assert body["error"] == code
    assert isinstance(body["message"], str) and body["message"]
    if status == 401:
        assert answer["WWW-Authenticate"].startswith("Bearer")
    if status == 405:
        assert answer["Allow"]


def test_invalid_field_is_named_in_the_message(world):
    answer = world.submit(priority="high")
    assert answer.status_code == 422
    assert "priority" in answer.json()["message"]


def test_database_failure_is_503_json_never_401(client, monkeypatch):
    """An agent treats 401/403 as "ask a person"; a database outage must read as "retry"."""
    from django.db import OperationalError

    from qprint.domain import credentials

    def unreachable(token, **lookup):
        raise OperationalError("connection refused")

    monkeypatch.setattr(credentials, "device_for_token", unreachable)
    answer = client.post(reverse("qprint:device-claim"), HTTP_AUTHORIZATION="Bearer t")
    assert answer.status_code == 503
    assert answer.json()["error"] == "unavailable"
    assert answer["Retry-After"] == "5"
