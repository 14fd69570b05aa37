"""A job submission matches the application key it presents in the statement that reads the
device (``credentials.PresentedKey``; docs/PERFORMANCE.md, "The application key in the
submission's statement") and answers exactly as when the key was looked up before the view
(docs/SECURITY.md): an unknown or revoked key 401, counted by the throttle of failed
authentications (429 once throttled), the key's standing before the body (422, 415) and before
the device (404); a body larger than the device API's JSON bodies is read only after its key."""

import base64

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from qprint.core import executor
from qprint.domain import credentials
from qprint.models import AuthFailureCount, PrintJob
from qprint.views.http import MAX_JSON_BODY_BYTES
from tests.qprint.factories import make_device, make_key
from tests.qprint.helpers import PDF

pytestmark = pytest.mark.django_db

ADDRESS = "10.9.8.6"


def submit(client, secret: str, device: str = "front-desk", **fields):
    body = {
        "device": device,
        "content_type": "application/pdf",
        "content_base64": base64.b64encode(PDF).decode(),
        **fields,
    }
    return client.post(
        reverse("qprint:jobs"),
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        REMOTE_ADDR=ADDRESS,
    )


def failures() -> int:
    row = AuthFailureCount.objects.filter(scope=f"addr:{ADDRESS}").first()
    return row.failures if row else 0


def assert_refused(answer, status: int, code: str) -> None:
    assert answer.status_code == status, answer.content
    assert answer.json()["error"] == code
    if status == 401:
        assert answer["WWW-Authenticate"].startswith("Bearer")


@pytest.fixture
def key():
    make_device()
    return make_key()


def test_a_submission_is_made_by_the_keys_tenant_and_names_the_key(client, key):
    make_device("other", "front-desk")  # the same name in another tenant
    answer = submit(client, key.secret)
    assert answer.status_code == 201, answer.content
    job = PrintJob.objects.get(pk=answer.json()["id"])
    assert (job.tenant, job.device.tenant, job.submitted_by) == ("acme", "acme", "key:backend")
    key.key.refresh_from_db()
    assert key.key.last_used_at is not None
    assert failures() == 0


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_the_key_is_matched_in_the_devices_statement(client, key, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement submission is PostgreSQL's")
    monkeypatch.setattr(executor.http, "inline", True)  # the view's statements on this thread
    assert submit(client, key.secret).status_code == 201  # the key's first use is written
    with CaptureQueriesContext(connection) as captured:
        assert submit(client, key.secret).status_code == 201
    sent = [q["sql"] for q in captured.captured_queries]
    # The device with the key's columns, then the job's one statement: no lookup of the key.
    assert len(sent) == 2, sent
    assert '"qprint_application_key"' in sent[0] and '"qprint_device"' in sent[0], sent[0]
    assert sent[1].lstrip().startswith("WITH job AS"), sent[1]


def test_an_unknown_or_revoked_key_is_401_counted_and_submits_nothing(client, key):
    assert_refused(submit(client, credentials.new_secret()), 401, "unauthorized")
    key.key.revoked = True
    key.key.save()
    assert_refused(submit(client, key.secret), 401, "unauthorized")
    assert failures() == 2
    assert not PrintJob.objects.exists()


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 2})
def test_wrong_keys_are_429_once_throttled_and_the_right_one_still_gets_in(client, key):
    for _ in range(2):
        assert_refused(submit(client, credentials.new_secret()), 401, "unauthorized")
    throttled = submit(client, credentials.new_secret())
    assert_refused(throttled, 429, "rate_limited")
    assert int(throttled["Retry-After"]) >= 1
    assert failures() == 2
    assert submit(client, key.secret).status_code == 201


def test_the_keys_standing_comes_before_the_body_and_the_device(client, key):
    wrong = credentials.new_secret()
    assert_refused(submit(client, wrong, device=""), 401, "unauthorized")
    assert_refused(submit(client, wrong, device="nowhere"), 401, "unauthorized")
    assert_refused(submit(client, wrong, priority="high"), 401, "unauthorized")
    assert failures() == 3
    # The right key: the body's and the device's own answers.
    assert_refused(submit(client, key.secret, device=""), 422, "invalid")
    assert_refused(submit(client, key.secret, priority="high"), 422, "invalid")
    assert_refused(submit(client, key.secret, device="nowhere"), 404, "unknown_device")
    assert failures() == 3
    assert not PrintJob.objects.exists()


def test_a_key_of_another_tenant_does_not_find_the_device(client, key):
    other = make_key("other", "backend")
    assert_refused(submit(client, other.secret), 404, "unknown_device")
    assert failures() == 0


def test_a_large_body_is_read_only_after_its_key(client, key, monkeypatch):
    """Over the device API's JSON bodies, the key is looked up before the body is read: a
    client without a key cannot make the node read a large document."""
    from qprint.views import application_api

    read: list[int] = []
    real = application_api.read_submission

    def counting(request):
        read.append(1)
        return real(request)

    monkeypatch.setattr(application_api, "read_submission", counting)
    large = {"title": "x" * (MAX_JSON_BODY_BYTES + 1)}
    assert_refused(submit(client, credentials.new_secret(), **large), 401, "unauthorized")
    assert read == []
    # A small one is read first; its key is still refused.
    assert_refused(submit(client, credentials.new_secret()), 401, "unauthorized")
    assert read == [1]
    # A body of no declared length (chunked) has its key looked up first too.
    answer = client.generic(
        "POST",
        reverse("qprint:jobs"),
        b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {credentials.new_secret()}",
        REMOTE_ADDR=ADDRESS,
        CONTENT_LENGTH="",
    )
    assert_refused(answer, 401, "unauthorized")
    assert read == [1]
