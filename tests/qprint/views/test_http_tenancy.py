"""A key sees only its tenant, a device only its own jobs: everything else is 404, never the job.

Each endpoint is called by a stranger (a key of another tenant, or another device) on an object
that exists; the answer must be 404 and must not carry the object.
"""

import base64
import uuid

import pytest
from django.urls import reverse

from qprint import api
from qprint.models import DeviceCommand, PrintJob
from tests.qprint.factories import connect, make_device, make_key, submitted_and_claimed

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n%%EOF\n"


@pytest.fixture
def owned(client):
    """A job CLAIMED by acme's device, a command for it, and strangers from tenant ``other``
    (with a device of the same name) and from acme (a second device)."""
    owner_key = make_key("acme")
    owner_dev = make_device("acme", "front-desk")
    connect(owner_dev.device)
    job, assignment = submitted_and_claimed(client, owner_key, owner_dev, PDF)
    command = api.send_command(owner_dev.device, "PING")
    other_dev = make_device("other", "front-desk")
    connect(other_dev.device)
    return {
        "job": job,
        "assignment": assignment,
        "command": command,
        "owner_key": owner_key,
        "owner_dev": owner_dev,
        "other_key": make_key("other"),
        "other_dev": other_dev,
        "sibling_dev": make_device("acme", "back-office"),
    }


def application_calls(o):
    job_id = o["job"]["id"]
    yield "get job", "get", reverse("qprint:job-detail", args=[job_id]), None
    yield "cancel job", "post", reverse("qprint:job-cancel", args=[job_id]), None
    yield "reprint job", "post", reverse("qprint:job-reprint", args=[job_id]), None
    yield "preview job", "get", reverse("qprint:job-preview", args=[job_id]), None


def test_key_of_another_tenant_gets_404_for_every_job_endpoint(client, owned):
    for label, method, url, _ in application_calls(owned):
        answer = getattr(client, method)(url, **owned["other_key"].auth)
        assert answer.status_code == 404, label
        assert answer.json()["error"] == "not_found", label
        assert owned["job"]["id"] not in answer.content.decode(), label
    job = PrintJob.objects.get(pk=owned["job"]["id"])
    assert job.status == "CLAIMED"
    assert not PrintJob.objects.filter(reprint_of=job).exists()


def test_key_of_another_tenant_does_not_see_or_steer_the_device(client, owned):
    """``other`` has its own ``front-desk``: the key reaches that one, never acme's."""
    other = owned["other_key"].auth
    listed = client.get(reverse("qprint:jobs"), **other).json()
    assert listed["results"] == []
    devices = client.get(reverse("qprint:devices"), **other).json()["results"]
    assert [d["name"] for d in devices] == ["front-desk"]
    assert devices[0]["queue_depth"] == 0

    client.post(reverse("qprint:device-pause", args=["front-desk"]), **other)
    owned["owner_dev"].device.refresh_from_db()
    assert owned["owner_dev"].device.paused is False
    answer = client.get(reverse("qprint:device-detail", args=["back-office"]), **other)
    assert answer.status_code == 404
    assert answer.json()["error"] == "unknown_device"


def test_submission_by_another_tenant_cannot_target_the_device(client, owned):
    make_key("third")
    answer = client.post(
        reverse("qprint:jobs"),
        {
            "device": "back-office",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(PDF).decode(),
        },
        content_type="application/json",
        **owned["other_key"].auth,
    )
    assert answer.status_code == 404
    assert answer.json()["error"] == "unknown_device"
    assert PrintJob.objects.filter(device=owned["sibling_dev"].device).count() == 0


@pytest.mark.parametrize("stranger", ["other_dev", "sibling_dev"])
def test_another_device_gets_404_for_the_job_and_command_endpoints(client, owned, stranger):
    dev = owned[stranger]
    connect(dev.device)
    a = owned["assignment"]
    download = client.get(a["document_url"], **dev.auth)
    assert download.status_code == 404
    assert download.json()["error"] == "not_found"
    assert PDF not in download.content

    event = client.post(
        reverse("qprint:device-job-events", args=[a["job_id"]]),
        {
            "event_id": str(uuid.uuid4()),
            "type": "RECEIVED",
            "claim_id": a["claim_id"],
            "occurred_at": "2026-01-01T10:00:00Z",
        },
        content_type="application/json",
        **dev.auth,
    )
    assert event.status_code == 404
    assert event.json()["error"] == "not_found"

    result = client.post(
        reverse("qprint:device-command-result", args=[owned["command"].pk]),
        {"status": "DONE", "result": {}},
        content_type="application/json",
        **dev.auth,
    )
    assert result.status_code == 404

    claim = client.post(reverse("qprint:device-claim"), **dev.auth)
    assert claim.status_code == 204

    assert PrintJob.objects.get(pk=a["job_id"]).status == "CLAIMED"
    assert DeviceCommand.objects.get(pk=owned["command"].pk).status == "PENDING"


def test_owner_reaches_what_strangers_cannot(client, owned):
    """The control case of the tests above: the same calls by the owners succeed."""
    a = owned["assignment"]
    assert client.get(a["document_url"], **owned["owner_dev"].auth).status_code == 200
    url = reverse("qprint:job-detail", args=[owned["job"]["id"]])
    assert client.get(url, **owned["owner_key"].auth).status_code == 200


DEVICE_CALLS = [
    ("get", "qprint:device-detail", None),
    ("post", "qprint:device-pause", None),
    ("post", "qprint:device-resume", None),
    ("put", "qprint:device-settings", {"dpi": 600}),
    ("post", "qprint:device-commands", {"type": "PING"}),
]


@pytest.mark.parametrize(
    ("method", "route", "body"), DEVICE_CALLS, ids=[c[1] for c in DEVICE_CALLS]
)
def test_key_of_another_tenant_cannot_reach_a_device_by_name(client, owned, method, route, body):
    """``back-office`` exists only in acme: for ``other``'s key it does not exist at all."""
    device = owned["sibling_dev"].device
    before = (device.paused, device.control_revision, device.settings_revision, device.settings)
    kwargs = {"content_type": "application/json", "data": body} if body else {}
    answer = getattr(client, method)(
        reverse(route, args=["back-office"]), **kwargs, **owned["other_key"].auth
    )
    assert answer.status_code == 404
    assert answer.json()["error"] == "unknown_device"
    device.refresh_from_db()
    after = (device.paused, device.control_revision, device.settings_revision, device.settings)
    assert after == before
    assert not DeviceCommand.objects.filter(device=device).exists()
