"""Every error code of the device HTTP API (docs/API.md), produced by a request that should
produce it, answered as JSON ``{"error": code, "message": ...}``; the application API's are
``test_http_errors_application.py``."""

import uuid

import pytest
from django.urls import reverse

from qprint import api
from qprint.models import Device
from tests.qprint.factories import connect
from tests.qprint.views.errors import World, assert_error_answer, event_body, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(client) -> World:
    return make_world(client)


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
]


@pytest.mark.parametrize(
    ("request_", "status", "code"), CASES, ids=[case[0].__name__ for case in CASES]
)
def test_error_is_answered_with_its_status_and_json_code(world, request_, status, code):
    assert_error_answer(request_(world), status, code)


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
