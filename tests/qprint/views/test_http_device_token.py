"""The claim, the download and the event of the device HTTP API match the presented token in their
own statement
(``credentials.PresentedToken``; docs/PERFORMANCE.md, "Round trips") and answer exactly as the
lookup before the view did (docs/SECURITY.md): an unknown token 401, counted by the throttle of
failed authentications (429 once throttled), a disabled device 403, a CloudPRNT printer's token
401 as an unknown one, and the device's standing before the body or the job (422, 404)."""

import uuid

import pytest
from django.test import override_settings
from django.urls import reverse

from qprint import api
from qprint.domain import claim as claim_module
from qprint.domain import credentials
from qprint.domain import events as events_module
from qprint.domain import jobs as jobs_module
from qprint.domain.claim import claim_next_job
from qprint.models import AuthFailureCount, PrintJob, PrintJobEvent
from tests.qprint.factories import connect, make_device
from tests.qprint.helpers import PDF, documents_in_a_storage, event, submit

pytestmark = pytest.mark.django_db

ADDRESS = "10.9.8.7"


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}", "REMOTE_ADDR": ADDRESS}


def claim(client, secret: str):
    return client.post(reverse("qprint:device-claim"), **bearer(secret))


def report(client, secret: str, job_id, body, content_type="application/json"):
    return client.post(
        reverse("qprint:device-job-events", args=[job_id]),
        body,
        content_type=content_type,
        **bearer(secret),
    )


def download(client, secret: str, job_id):
    return client.get(reverse("qprint:device-job-document", args=[job_id]), **bearer(secret))


def failures() -> int:
    """The failed authentications counted against the test's client address."""
    row = AuthFailureCount.objects.filter(scope=f"addr:{ADDRESS}").first()
    return row.failures if row else 0


def device_events(job_id) -> int:
    return PrintJobEvent.objects.filter(job_id=job_id, source="DEVICE").count()


@pytest.fixture
def held():
    """A connected agent device holding a claimed job: ``(device_with_token, assignment)``."""
    made = make_device()
    connect(made.device)
    submit(made.device)
    return made, claim_next_job(made.device.pk)


def assert_refused(answer, status: int, code: str) -> None:
    assert answer.status_code == status, answer.content
    assert answer.json()["error"] == code
    if status == 401:
        assert answer["WWW-Authenticate"].startswith("Bearer")


def test_an_unknown_token_is_401_and_counted_by_the_throttle(client, held):
    _, assignment = held
    wrong = credentials.new_secret()
    assert_refused(claim(client, wrong), 401, "unauthorized")
    assert failures() == 1
    # An event naming a real job (another device's) with an unknown token: 401, never 404.
    answer = report(client, wrong, assignment.job_id, event(assignment.claim_id, "RECEIVED"))
    assert_refused(answer, 401, "unauthorized")
    assert failures() == 2
    assert device_events(assignment.job_id) == 0
    assert PrintJob.objects.get(pk=assignment.job_id).status == "CLAIMED"


@override_settings(QPRINT={"AUTH_FAILURE_LIMIT": 2})
def test_wrong_tokens_are_429_once_throttled_and_the_right_one_still_gets_in(client, held):
    made, assignment = held
    body = event(assignment.claim_id, "RECEIVED")
    assert_refused(claim(client, credentials.new_secret()), 401, "unauthorized")
    answer = report(client, credentials.new_secret(), assignment.job_id, body)
    assert_refused(answer, 401, "unauthorized")
    assert failures() == 2

    throttled = claim(client, credentials.new_secret())
    assert_refused(throttled, 429, "rate_limited")
    assert int(throttled["Retry-After"]) >= 1
    answer = report(client, credentials.new_secret(), assignment.job_id, body)
    assert_refused(answer, 429, "rate_limited")
    assert failures() == 2  # a throttled attempt is refused, not counted

    # The device behind the same address is never refused for what others did.
    assert claim(client, made.token).json()["job_id"] == str(assignment.job_id)
    assert report(client, made.token, assignment.job_id, body).status_code == 201


def test_a_disabled_device_is_403_for_its_claim_and_its_events(client, held):
    made, assignment = held
    api.disable_device(made.device)
    assert_refused(claim(client, made.token), 403, "disabled")
    body = event(assignment.claim_id, "RECEIVED")
    assert_refused(report(client, made.token, assignment.job_id, body), 403, "disabled")
    # Its standing comes before the body and the job, as for a right token.
    assert_refused(report(client, made.token, assignment.job_id, "{no"), 403, "disabled")
    assert_refused(report(client, made.token, uuid.uuid4(), body), 403, "disabled")
    assert failures() == 0  # a right token is not a failed authentication
    assert device_events(assignment.job_id) == 0
    assert PrintJob.objects.get(pk=assignment.job_id).status == "CLAIMED"


def test_a_cloudprnt_printers_token_is_an_unknown_token_for_claim_and_events(client):
    printer, token = api.create_device("acme", "counter", kind="cloudprnt")
    connect(printer)
    job, _ = api.submit_job("acme", "counter", b"receipt", "text/plain")
    assignment = claim_next_job(printer.pk)  # a CloudPRNT poll's claim (by the device's id)
    assert assignment.job_id == job.pk
    submit_second, _ = api.submit_job("acme", "counter", b"another", "text/plain")

    assert_refused(claim(client, token), 401, "unauthorized")
    answer = report(client, token, job.pk, event(assignment.claim_id, "RECEIVED"))
    assert_refused(answer, 401, "unauthorized")
    assert failures() == 2
    assert device_events(job.pk) == 0
    assert PrintJob.objects.get(pk=job.pk).status == "CLAIMED"
    assert PrintJob.objects.get(pk=submit_second.pk).status == "QUEUED"


def test_an_event_for_another_devices_job_is_404_after_a_right_token(client, held):
    _, assignment = held
    made = make_device(name="back-office")
    connect(made.device)
    answer = report(client, made.token, assignment.job_id, event(assignment.claim_id, "RECEIVED"))
    assert_refused(answer, 404, "not_found")
    assert failures() == 0
    assert device_events(assignment.job_id) == 0
    assert PrintJob.objects.get(pk=assignment.job_id).status == "CLAIMED"


@pytest.mark.parametrize(
    ("job_id", "body", "content_type", "status", "code"),
    [
        ("job", "{not json", "application/json", 422, "invalid"),
        (
            "job",
            {"type": "x"},
            "multipart/form-data; boundary=BoUnDaRy",
            415,
            "unsupported_media_type",
        ),
        ("job", {"type": "RECEIVED"}, "application/json", 422, "invalid"),
        ("not-a-uuid", "event", "application/json", 404, "not_found"),
        ("unknown", "event", "application/json", 404, "not_found"),
    ],
    ids=["not-json", "form-data", "no-event-id", "bad-job-id", "unknown-job"],
)
def test_the_devices_standing_is_answered_before_the_body_and_the_job(
    client, held, job_id, body, content_type, status, code
):
    made, assignment = held
    job_id = {"job": assignment.job_id, "unknown": uuid.uuid4()}.get(job_id, job_id)
    if body == "event":
        body = event(assignment.claim_id, "RECEIVED")
    assert_refused(
        report(client, credentials.new_secret(), job_id, body, content_type), 401, "unauthorized"
    )
    assert failures() == 1
    assert_refused(report(client, made.token, job_id, body, content_type), status, code)
    assert failures() == 1
    assert device_events(assignment.job_id) == 0


class MatchesNothing:
    """A lock that matched no row although the token is right (whatever the reason)."""

    def first(self, **values):
        return None


def test_a_right_token_the_lock_did_not_match_is_served_the_full_way(client, held, monkeypatch):
    made, assignment = held
    monkeypatch.setattr(claim_module, "_LOCK_DEVICE_BY_TOKEN", MatchesNothing())
    monkeypatch.setattr(events_module, "_LOCK_JOB_BY_TOKEN", MatchesNothing())
    answer = claim(client, made.token)
    assert answer.status_code == 200 and answer.json()["job_id"] == str(assignment.job_id)
    recorded = report(client, made.token, assignment.job_id, event(assignment.claim_id, "RECEIVED"))
    assert recorded.status_code == 201 and recorded.json()["job_status"] == "RECEIVED"
    assert failures() == 0
    assert_refused(claim(client, credentials.new_secret()), 401, "unauthorized")
    assert failures() == 1


def test_the_download_answers_as_the_lookup_did_its_token_matched_in_its_statement(client, held):
    made, assignment = held
    answer = download(client, made.token, assignment.job_id)
    assert answer.status_code == 200 and answer.content == PDF
    assert answer["ETag"] == f'"{assignment.sha256}"'
    again = client.get(
        reverse("qprint:device-job-document", args=[assignment.job_id]),
        HTTP_IF_NONE_MATCH=answer["ETag"],
        **bearer(made.token),
    )
    assert again.status_code == 304

    wrong = credentials.new_secret()
    assert_refused(download(client, wrong, assignment.job_id), 401, "unauthorized")
    assert_refused(download(client, wrong, "not-a-uuid"), 401, "unauthorized")
    assert failures() == 2
    other = make_device(name="back-office")
    assert_refused(download(client, other.token, assignment.job_id), 404, "not_found")
    assert_refused(download(client, made.token, uuid.uuid4()), 404, "not_found")
    assert_refused(download(client, made.token, "not-a-uuid"), 404, "not_found")
    assert failures() == 2  # right tokens are not failed authentications

    api.disable_device(made.device)
    assert_refused(download(client, made.token, assignment.job_id), 403, "disabled")
    assert_refused(download(client, made.token, uuid.uuid4()), 403, "disabled")
    assert_refused(download(client, made.token, "not-a-uuid"), 403, "disabled")


def test_a_cloudprnt_printers_token_downloads_nothing(client):
    printer, token = api.create_device("acme", "counter", kind="cloudprnt")
    connect(printer)
    api.submit_job("acme", "counter", b"receipt", "text/plain")
    assignment = claim_next_job(printer.pk)
    assert_refused(download(client, token, assignment.job_id), 401, "unauthorized")
    assert failures() == 1


def test_a_right_token_the_download_did_not_match_is_served_the_full_way(client, held, monkeypatch):
    made, assignment = held
    monkeypatch.setattr(
        jobs_module, "_DOWNLOADABLE_BY_TOKEN", {False: MatchesNothing(), True: MatchesNothing()}
    )
    answer = download(client, made.token, assignment.job_id)
    assert answer.status_code == 200 and answer.content == PDF
    assert failures() == 0


def test_a_document_kept_in_a_django_storage_is_read_after_the_job(client, settings, tmp_path):
    documents_in_a_storage(settings, tmp_path)
    made = make_device()
    connect(made.device)
    submit(made.device)
    assignment = claim_next_job(made.device.pk)
    answer = download(client, made.token, assignment.job_id)
    assert answer.status_code == 200 and answer.content == PDF
    (tmp_path / "qprint" / str(assignment.job_id)).unlink()
    assert_refused(download(client, made.token, assignment.job_id), 404, "not_found")
