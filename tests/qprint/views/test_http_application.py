"""The application HTTP API beyond the happy path: idempotent submission, lists and their pages,
steering devices, and the device's own reports (printers, command results)."""

import base64
import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from qprint.domain.wakeups import RecordingPublisher, set_publisher
from qprint.models import Device, DeviceCommand, PrintJob
from tests.qprint.factories import connect, make_device, make_key

PDF = b"%PDF-1.4\n%%EOF\n"


def submission(content=PDF, device="front-desk", **fields):
    return {
        "device": device,
        "content_type": "application/pdf",
        "content_base64": base64.b64encode(content).decode(),
        **fields,
    }


def post_job(client, key, body, idempotency_key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": idempotency_key} if idempotency_key else {}
    return client.post(
        reverse("qprint:jobs"), body, content_type="application/json", **headers, **key.auth
    )


@pytest.fixture
def wakeups():
    publisher = RecordingPublisher()
    previous = set_publisher(publisher)
    yield publisher.recorded
    set_publisher(previous)


@pytest.mark.django_db
def test_replayed_submission_answers_200_with_the_same_job(client):
    key = make_key()
    make_device()
    first = post_job(client, key, submission(title="A"), "order-7")
    replay = post_job(client, key, submission(title="A"), "order-7")
    assert first.status_code == 201
    assert replay.status_code == 200
    assert replay.json() == first.json()
    assert PrintJob.objects.count() == 1


@pytest.mark.django_db
def test_same_idempotency_key_with_another_body_is_refused_and_creates_nothing(client):
    key = make_key()
    make_device()
    post_job(client, key, submission(title="A"), "order-7")
    answer = post_job(client, key, submission(title="B"), "order-7")
    assert answer.status_code == 409
    assert answer.json()["error"] == "idempotency_conflict"
    assert PrintJob.objects.count() == 1


@pytest.mark.django_db
def test_idempotency_keys_are_per_tenant(client):
    make_device("acme")
    make_device("other")
    a = post_job(client, make_key("acme"), submission(), "order-7")
    b = post_job(client, make_key("other"), submission(), "order-7")
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


@pytest.mark.services
def test_six_concurrent_submissions_with_one_key_make_one_job(transactional_db):
    key = make_key()
    make_device()
    rounds, threads = 5, 6
    for round_ in range(rounds):
        barrier = threading.Barrier(threads)
        answers: list = [None] * threads

        def submit(i, round_=round_, barrier=barrier, answers=answers):
            try:
                barrier.wait(timeout=10)
                answers[i] = post_job(Client(), key, submission(), f"race-{round_}")
            finally:
                connection.close()

        workers = [threading.Thread(target=submit, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=30)
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200] * (threads - 1) + [201], [a.content for a in answers]
        assert len({a.json()["id"] for a in answers}) == 1
        assert PrintJob.objects.filter(idempotency_key=f"race-{round_}").count() == 1


@pytest.mark.django_db
def test_jobs_are_listed_newest_first_in_pages_without_gaps_or_repeats(client):
    key = make_key()
    make_device()
    made = [
        post_job(client, key, submission(content=bytes([i]) * 3)).json()["id"] for i in range(7)
    ]
    seen, cursor, pages = [], None, 0
    while True:
        url = reverse("qprint:jobs") + "?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(url, **key.auth).json()
        seen += [j["id"] for j in page["results"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert pages == 3
    assert sorted(seen) == sorted(made)
    assert len(seen) == len(set(seen))
    created = [PrintJob.objects.get(pk=j).created_at for j in seen]
    assert created == sorted(created, reverse=True)


@pytest.mark.django_db
def test_jobs_list_filters_by_device_and_status(client):
    key = make_key()
    make_device(name="a")
    make_device(name="b")
    post_job(client, key, submission(device="a"))
    job_b = post_job(client, key, submission(device="b")).json()
    client.post(reverse("qprint:job-cancel", args=[job_b["id"]]), **key.auth)
    by_device = client.get(reverse("qprint:jobs") + "?device=b", **key.auth).json()
    assert [j["id"] for j in by_device["results"]] == [job_b["id"]]
    queued = client.get(reverse("qprint:jobs") + "?status=QUEUED", **key.auth).json()
    assert [j["device"] for j in queued["results"]] == ["a"]


@pytest.mark.django_db
def test_devices_are_listed_by_name_with_their_state(client):
    key = make_key()
    for name in ("c", "a", "b"):
        make_device(name=name)
    online = make_device(name="d").device
    connect(online, node="node-7")
    post_job(client, key, submission(device="d"))
    first = client.get(reverse("qprint:devices") + "?limit=2", **key.auth).json()
    rest = client.get(
        reverse("qprint:devices") + f"?limit=2&cursor={first['next_cursor']}", **key.auth
    ).json()
    assert [d["name"] for d in first["results"] + rest["results"]] == ["a", "b", "c", "d"]
    assert rest["next_cursor"] is None
    d = rest["results"][-1]
    assert (d["online"], d["ready"], d["node"], d["queue_depth"]) == (True, True, "node-7", 1)
    assert first["results"][0]["online"] is False


@pytest.mark.django_db
def test_pause_resume_settings_and_commands_bump_revisions_and_wake_the_device(
    client, wakeups, django_capture_on_commit_callbacks
):
    key = make_key()
    device = make_device().device
    base = (device.control_revision, device.settings_revision)
    with django_capture_on_commit_callbacks(execute=True):
        paused = client.post(reverse("qprint:device-pause", args=["front-desk"]), **key.auth)
    assert paused.status_code == 200
    assert paused.json()["paused"] is True
    with django_capture_on_commit_callbacks(execute=True):
        resumed = client.post(reverse("qprint:device-resume", args=["front-desk"]), **key.auth)
    assert resumed.json()["paused"] is False
    with django_capture_on_commit_callbacks(execute=True):
        settings = client.put(
            reverse("qprint:device-settings", args=["front-desk"]),
            {"dpi": 300},
            content_type="application/json",
            **key.auth,
        )
    assert settings.status_code == 200
    assert settings.json()["values"] == {"dpi": 300}
    with django_capture_on_commit_callbacks(execute=True):
        command = client.post(
            reverse("qprint:device-commands", args=["front-desk"]),
            {"type": "PRINT_TEST_PAGE", "payload": {"printer": "HP"}},
            content_type="application/json",
            **key.auth,
        )
    assert command.status_code == 201
    assert command.json()["status"] == "PENDING"
    device.refresh_from_db()
    assert (device.control_revision, device.settings_revision) == (base[0] + 2, base[1] + 1)
    assert DeviceCommand.objects.filter(device=device, type="PRINT_TEST_PAGE").count() == 1
    assert len([w for w in wakeups if w[1] == device.pk]) == 4


@pytest.mark.django_db
def test_device_reports_printers_and_command_results(client):
    dev = make_device()
    answer = client.put(
        reverse("qprint:device-printers"),
        [{"name": "HP", "is_default": True, "status": "idle"}, {"name": "Zebra"}],
        content_type="application/json",
        **dev.auth,
    )
    assert answer.status_code == 200
    assert [p["name"] for p in answer.json()["printers"]] == ["HP", "Zebra"]
    summary = client.get(
        reverse("qprint:device-detail", args=["front-desk"]), **make_key().auth
    ).json()
    assert {p["name"]: p["is_default"] for p in summary["printers"]} == {"HP": True, "Zebra": False}

    command = DeviceCommand.objects.create(device=dev.device, type="PING")
    result = client.post(
        reverse("qprint:device-command-result", args=[command.pk]),
        {"status": "DONE", "result": {"pong": True}},
        content_type="application/json",
        **dev.auth,
    )
    assert result.status_code == 200
    assert result.json()["status"] == "DONE"
    command.refresh_from_db()
    assert (command.status, command.result) == ("DONE", {"pong": True})


@pytest.mark.django_db
def test_reprint_with_force_makes_a_second_reprint(client):
    key = make_key()
    make_device()
    job = post_job(client, key, submission()).json()
    url = reverse("qprint:job-reprint", args=[job["id"]])
    first = client.post(url, **key.auth)
    forced = client.post(url, {"force": True}, content_type="application/json", **key.auth)
    assert (first.status_code, forced.status_code) == (201, 201)
    assert first.json()["reprint_of"] == forced.json()["reprint_of"] == job["id"]
    assert first.json()["sha256"] == job["sha256"]
    assert PrintJob.objects.filter(reprint_of_id=job["id"]).count() == 2


@pytest.mark.django_db
def test_cancel_of_a_queued_job_answers_the_cancelled_job(client):
    key = make_key()
    make_device()
    job = post_job(client, key, submission()).json()
    answer = client.post(reverse("qprint:job-cancel", args=[job["id"]]), **key.auth)
    assert answer.status_code == 200
    assert answer.json()["status"] == "CANCELLED"
    assert Device.objects.count() == 1
