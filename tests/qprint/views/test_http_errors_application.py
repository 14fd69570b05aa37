"""Every error code of the application HTTP API (docs/API.md), produced by a request that
should produce it, answered as JSON ``{"error": code, "message": ...}``."""

import base64
import uuid

import pytest
from django.test import override_settings
from django.urls import reverse

from qprint import api
from tests.qprint.views.errors import PDF, World, assert_error_answer, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(client) -> World:
    return make_world(client)


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
    assert_error_answer(request_(world), status, code)


def test_invalid_field_is_named_in_the_message(world):
    answer = world.submit(priority="high")
    assert answer.status_code == 422
    assert "priority" in answer.json()["message"]
