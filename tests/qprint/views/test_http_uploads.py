"""Document uploads: the limit is ``QPRINT["MAX_DOCUMENT_BYTES"]``, not Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``; a document at the limit is accepted, one byte more is 413; and a
real 50 MiB JSON upload goes through Daphne."""

import base64
import hashlib
import json
import os

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.urls import reverse

from qprint.documents import open_document
from qprint.models import PrintJob
from tests.processes import daphne_node, free_port, port_open
from tests.qprint.factories import connect, make_device, make_key
from tests.waiting import wait_until


def post_json(client, key, content: bytes):
    body = {
        "device": "front-desk",
        "content_type": "application/octet-stream",
        "content_base64": base64.b64encode(content).decode(),
    }
    return client.post(reverse("qprint:jobs"), body, content_type="application/json", **key.auth)


def post_json_mime(client, key, content: bytes):
    """``content_base64`` with MIME line breaks (``\\r\\n`` after every 76 characters), as Java's
    MIME encoder and PHP's ``chunk_split`` write it."""
    encoded = base64.b64encode(content).decode()
    lines = "\r\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    body = {"device": "front-desk", "content_type": "application/octet-stream"}
    body["content_base64"] = lines
    return client.post(reverse("qprint:jobs"), body, content_type="application/json", **key.auth)


def post_multipart(client, key, content: bytes):
    document = SimpleUploadedFile("doc.bin", content, content_type="application/octet-stream")
    return client.post(
        reverse("qprint:jobs"), {"device": "front-desk", "document": document}, **key.auth
    )


@pytest.mark.django_db
@pytest.mark.parametrize("post", [post_json, post_multipart], ids=["json", "multipart"])
@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1024, FILE_UPLOAD_MAX_MEMORY_SIZE=1024)
def test_document_larger_than_djangos_upload_limits_is_accepted(client, post):
    key = make_key()
    make_device()
    content = os.urandom(200 * 1024)
    answer = post(client, key, content)
    assert answer.status_code == 201, answer.content
    job = PrintJob.objects.get(pk=answer.json()["id"])
    assert open_document(job) == content
    assert job.sha256 == hashlib.sha256(content).hexdigest()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "post", [post_json, post_json_mime, post_multipart], ids=["json", "json-mime", "multipart"]
)
def test_document_at_the_limit_is_accepted_and_one_byte_more_is_413(client, post):
    key = make_key()
    make_device()
    with override_settings(QPRINT={"MAX_DOCUMENT_BYTES": 4096}):
        at_limit = post(client, key, b"a" * 4096)
        over = post(client, key, b"b" * 4097)
    assert at_limit.status_code == 201, at_limit.content
    assert over.status_code == 413
    assert over.json()["error"] == "document_too_large"
    assert PrintJob.objects.count() == 1


@pytest.fixture
def daphne(subprocess_env):
    port = free_port()
    node = daphne_node("uploads", port, subprocess_env).start()
    try:
        wait_until(lambda: port_open(port), 30, message="daphne to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        node.stop()


@pytest.mark.services
@pytest.mark.slow
def test_50_mib_document_goes_up_and_down_through_daphne(daphne):
    key = make_key()
    dev = make_device()
    content = os.urandom(50 * 1024 * 1024)
    body = json.dumps(
        {
            "device": "front-desk",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(content).decode(),
        }
    )
    headers = {"Authorization": f"Bearer {key.secret}", "Content-Type": "application/json"}
    answer = httpx.post(f"{daphne}/qprint/api/v1/jobs", content=body, headers=headers, timeout=120)
    assert answer.status_code == 201, answer.text[:500]
    job = answer.json()
    assert job["size"] == len(content)
    assert job["sha256"] == hashlib.sha256(content).hexdigest()

    connect(dev.device)
    device_headers = {"Authorization": f"Bearer {dev.token}"}
    claim = httpx.post(f"{daphne}/qprint/api/v1/device/claim", headers=device_headers, timeout=30)
    assert claim.status_code == 200, claim.text
    assignment = claim.json()
    assert assignment["document_url"].startswith(daphne)
    download = httpx.get(assignment["document_url"], headers=device_headers, timeout=120)
    assert download.status_code == 200
    assert download.headers["Content-Length"] == str(len(content))
    assert download.headers["ETag"] == f'"{job["sha256"]}"'
    assert hashlib.sha256(download.content).hexdigest() == job["sha256"]


@pytest.mark.services
@pytest.mark.slow
def test_through_daphne_a_multipart_body_reaches_qprint_unparsed_by_twisted(daphne):
    """Twisted no longer parses form bodies for Daphne (``qprint.views.web_server``): a multipart
    submission is read once, by qprint, and one that the ``email`` parser cannot read gets
    qprint's JSON error instead of Twisted's HTML 400 and a closed connection."""
    key = make_key()
    dev = make_device()
    connect(dev.device)
    url = f"{daphne}/qprint/api/v1/jobs"
    headers = {"Authorization": f"Bearer {key.secret}"}
    with httpx.Client(timeout=30) as client:
        sent = client.post(
            url,
            data={"device": "front-desk"},
            files={"document": ("doc.bin", b"%PDF-1.4 through daphne", "application/pdf")},
            headers=headers,
        )
        assert sent.status_code == 201, sent.text
        assert open_document(PrintJob.objects.get(pk=sent.json()["id"])) == (
            b"%PDF-1.4 through daphne"
        )

        unreadable = client.post(
            url,
            content=b"no parts in here",
            headers={**headers, "Content-Type": "multipart/form-data; boundary=BoUnDaRy"},
        )
    assert unreadable.headers["content-type"].startswith("application/json"), unreadable.text
    assert unreadable.status_code in (400, 422) and "error" in unreadable.json(), unreadable.text
