"""The tenant isolation matrix: for every endpoint, a key of another tenant (or another device)
gets exactly the answer, status and body, that the owner gets once the object does not exist.

So a stranger cannot even learn that an id or a name is taken. The test is parametrised over the
URL patterns of ``qprint.urls``: an endpoint added without a case here fails
``test_every_endpoint_has_a_case``. The socket's frames (``state``, ``ping``, ``printers``) name
no object of their own: a socket only ever reaches its own device's row.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

import qprint.urls
from qprint import api
from qprint.models import Device, DeviceCommand, DevicePrinter, PrintJob, WebhookEndpoint
from tests.qprint.factories import (
    DeviceWithToken,
    KeyWithSecret,
    connect,
    make_device,
    make_key,
    submitted_and_claimed,
)

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n%%EOF\n"


@dataclass
class World:
    client: Client
    owner_key: KeyWithSecret
    owner_dev: DeviceWithToken
    stranger_key: KeyWithSecret  # tenant "other", which has no device named "front-desk"
    stranger_dev: DeviceWithToken  # a device of tenant "other"
    job: dict
    assignment: dict
    command: DeviceCommand
    webhook: WebhookEndpoint


@pytest.fixture
def world(client) -> World:
    owner_key = make_key("acme")
    owner_dev = make_device("acme", "front-desk")
    connect(owner_dev.device)
    job, assignment = submitted_and_claimed(client, owner_key, owner_dev, PDF)
    command = api.send_command(owner_dev.device, "PING")
    stranger_dev = make_device("other", "desk-of-other")
    connect(stranger_dev.device)
    return World(
        client,
        owner_key,
        owner_dev,
        make_key("other"),
        stranger_dev,
        job,
        assignment,
        command,
        WebhookEndpoint.objects.create(
            tenant="acme", url="https://hooks.example.com/qprint", events=[], secret="s" * 40
        ),
    )


@dataclass
class Call:
    method: str
    url: str
    body: Any = None

    def send(self, client: Client, auth: dict[str, str]):
        kwargs: dict[str, Any] = dict(auth)
        if self.body is not None:
            kwargs.update(data=json.dumps(self.body), content_type="application/json")
        return getattr(client, self.method)(self.url, **kwargs)


def answer_of(response) -> tuple[int, Any]:
    body = response.json() if response.content else None
    return response.status_code, body


def remove_job(w: World) -> None:
    PrintJob.objects.filter(pk=w.job["id"]).delete()


def remove_device(w: World) -> None:
    Device.objects.filter(pk=w.owner_dev.device.pk).delete()


def webhook_url(w: World, name: str) -> str:
    return reverse(f"qprint:{name}", args=[w.webhook.pk])


def remove_webhook(w: World) -> None:
    WebhookEndpoint.objects.filter(pk=w.webhook.pk).delete()


def remove_command(w: World) -> None:
    DeviceCommand.objects.filter(pk=w.command.pk).delete()


@dataclass
class Case:
    """``call(w)``: the request; ``by``: "key" or "device"; ``remove(w)``: makes the object not
    exist for its owner. ``None`` for endpoints that name no object: then the stranger's answer
    is compared with the owner's answer when the owner has nothing (a list, a claim)."""

    call: Callable[[World], Call]
    by: str
    remove: Callable[[World], None] | None


def event_body(w: World) -> dict:
    return {
        "event_id": str(uuid.UUID(int=7)),
        "type": "RECEIVED",
        "claim_id": w.assignment["claim_id"],
        "occurred_at": "2026-01-01T10:00:00Z",
    }


def submission(w: World) -> dict:
    return {
        "device": "front-desk",
        "content_type": "application/pdf",
        "content_base64": base64.b64encode(PDF).decode(),
    }


def device_url(name: str) -> Callable[[World], Call]:
    return lambda w: Call(
        "post" if name in ("device-pause", "device-resume", "device-commands") else "get",
        reverse(f"qprint:{name}", args=["front-desk"]),
        {"type": "PING"} if name == "device-commands" else None,
    )


CASES: dict[str, list[Case]] = {
    "device-claim": [
        Case(lambda w: Call("post", reverse("qprint:device-claim")), "device", remove_job)
    ],
    "device-job-document": [
        Case(
            lambda w: Call("get", reverse("qprint:device-job-document", args=[w.job["id"]])),
            "device",
            remove_job,
        )
    ],
    "device-job-events": [
        Case(
            lambda w: Call(
                "post", reverse("qprint:device-job-events", args=[w.job["id"]]), event_body(w)
            ),
            "device",
            remove_job,
        )
    ],
    "device-command-result": [
        Case(
            lambda w: Call(
                "post",
                reverse("qprint:device-command-result", args=[w.command.pk]),
                {"status": "DONE"},
            ),
            "device",
            remove_command,
        )
    ],
    "device-printers": [],  # names no object: covered by test_printers_of_a_device_are_its_own
    "jobs": [
        Case(lambda w: Call("get", reverse("qprint:jobs")), "key", remove_job),
        Case(
            lambda w: Call("get", reverse("qprint:jobs") + "?device=front-desk"), "key", remove_job
        ),
        Case(lambda w: Call("post", reverse("qprint:jobs"), submission(w)), "key", remove_device),
    ],
    "job-detail": [
        Case(
            lambda w: Call("get", reverse("qprint:job-detail", args=[w.job["id"]])),
            "key",
            remove_job,
        )
    ],
    "job-cancel": [
        Case(
            lambda w: Call("post", reverse("qprint:job-cancel", args=[w.job["id"]])),
            "key",
            remove_job,
        )
    ],
    "job-preview": [
        Case(
            lambda w: Call("get", reverse("qprint:job-preview", args=[w.job["id"]])),
            "key",
            remove_job,
        )
    ],
    "job-reprint": [
        Case(
            lambda w: Call("post", reverse("qprint:job-reprint", args=[w.job["id"]])),
            "key",
            remove_job,
        )
    ],
    "devices": [Case(lambda w: Call("get", reverse("qprint:devices")), "key", remove_device)],
    "device-detail": [Case(device_url("device-detail"), "key", remove_device)],
    "device-pause": [Case(device_url("device-pause"), "key", remove_device)],
    "device-resume": [Case(device_url("device-resume"), "key", remove_device)],
    "device-settings": [
        Case(
            lambda w: Call(
                "put", reverse("qprint:device-settings", args=["front-desk"]), {"dpi": 300}
            ),
            "key",
            remove_device,
        )
    ],
    "device-commands": [Case(device_url("device-commands"), "key", remove_device)],
    "webhooks": [Case(lambda w: Call("get", reverse("qprint:webhooks")), "key", remove_webhook)],
    "webhook-detail": [
        Case(lambda w: Call("get", webhook_url(w, "webhook-detail")), "key", remove_webhook),
        Case(lambda w: Call("delete", webhook_url(w, "webhook-detail")), "key", remove_webhook),
    ],
    "webhook-deliveries": [
        Case(lambda w: Call("get", webhook_url(w, "webhook-deliveries")), "key", remove_webhook)
    ],
    "webhook-test": [
        Case(lambda w: Call("post", webhook_url(w, "webhook-test")), "key", remove_webhook)
    ],
    "webhook-rotate-secret": [
        Case(lambda w: Call("post", webhook_url(w, "webhook-rotate-secret")), "key", remove_webhook)
    ],
    # The CloudPRNT endpoint takes only CloudPRNT devices' Basic credentials: an agent's token,
    # the owner's or a stranger's, is refused alike. A printer reaching another device's job is
    # tests/qprint/cloudprnt/test_endpoint.py's "another printer's job" test.
    "cloudprnt": [
        Case(
            lambda w: Call(
                "get",
                reverse("qprint:cloudprnt")
                + f"?mac=00:11:62:00:00:01&type=application/pdf&token={w.assignment['claim_id']}",
            ),
            "device",
            remove_job,
        )
    ],
}


def url_names() -> list[str]:
    return [p.name for p in qprint.urls.urlpatterns]


def test_every_endpoint_has_a_case():
    assert sorted(CASES) == sorted(url_names())


PARAMS = [(name, i) for name in url_names() for i in range(len(CASES.get(name, [])))]


@pytest.mark.parametrize(("name", "index"), PARAMS, ids=[f"{n}-{i}" for n, i in PARAMS])
def test_a_stranger_gets_the_answer_for_an_object_that_does_not_exist(world, name, index):
    case = CASES[name][index]
    stranger = world.stranger_dev if case.by == "device" else world.stranger_key
    owner = world.owner_dev if case.by == "device" else world.owner_key
    before = snapshot(world)
    as_stranger = answer_of(case.call(world).send(world.client, stranger.auth))
    assert snapshot(world) == before, "a stranger changed the owner's rows"
    case.remove(world)
    if name == "devices" or (name == "jobs" and case.call(world).method == "get"):
        # A list: the stranger sees its own tenant's rows only, never the owner's.
        as_stranger = strip_own(as_stranger, world)
    as_owner = answer_of(case.call(world).send(world.client, owner.auth))
    assert as_stranger == as_owner


def strip_own(answer: tuple[int, Any], w: World) -> tuple[int, Any]:
    """The stranger's list without its own tenant's rows (its device), which the owner would
    not see either."""
    status, body = answer
    if isinstance(body, dict) and "results" in body:
        body = {
            **body,
            "results": [r for r in body["results"] if r.get("name") != "desk-of-other"],
        }
    return status, body


def snapshot(w: World) -> dict:
    device = Device.objects.filter(pk=w.owner_dev.device.pk).first()
    return {
        "device": device
        and (device.paused, device.control_revision, device.settings_revision, device.settings),
        "jobs": sorted(PrintJob.objects.filter(tenant="acme").values_list("id", "status")),
        "commands": sorted(
            DeviceCommand.objects.filter(device__tenant="acme").values_list("id", "status")
        ),
        "printers": sorted(
            DevicePrinter.objects.filter(device__tenant="acme").values_list("name", flat=True)
        ),
        "webhooks": sorted(
            WebhookEndpoint.objects.filter(tenant="acme").values_list("id", "secret")
        ),
    }


def test_printers_of_a_device_are_its_own(world):
    api.replace_printers(world.owner_dev.device, [{"name": "laser"}])
    answer = world.client.put(
        reverse("qprint:device-printers"),
        [{"name": "stranger's"}],
        content_type="application/json",
        **world.stranger_dev.auth,
    )
    assert answer.status_code == 200
    assert list(
        DevicePrinter.objects.filter(device=world.owner_dev.device).values_list("name", flat=True)
    ) == ["laser"]
