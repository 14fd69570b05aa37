"""The world the HTTP error tests build (a connected device, an application key) and the one
shape every error answer has: shared by ``test_http_errors.py`` (the device API) and
``test_http_errors_application.py`` (the application API)."""

import base64
import uuid
from dataclasses import dataclass

from django.test import Client
from django.urls import reverse

from tests.qprint.factories import DeviceWithToken, KeyWithSecret, connect, make_device, make_key

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


def make_world(client: Client) -> World:
    """A connected device and an application key, seen through ``client``."""
    dev = make_device()
    connect(dev.device)
    return World(client=client, key=make_key(), dev=dev)


def assert_error_answer(answer, status: int, code: str) -> None:
    """``answer`` is ``status`` with JSON ``{"error": code, "message": ...}`` (and, for 401 and
    405, the header that goes with it)."""
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/json"
    body = answer.json()
    assert body["error"] == code
    assert isinstance(body["message"], str) and body["message"]
    if status == 401:
        assert answer["WWW-Authenticate"].startswith("Bearer")
    if status == 405:
        assert answer["Allow"]
