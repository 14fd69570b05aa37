"""What one ``POST api/v1/jobs`` can cost a real node's memory: the worst body it accepts (a
document of ``MAX_DOCUMENT_BYTES`` as base64 JSON, the fields beside it as large as allowed) and
bodies built to exhaust it (70 MB of ``[[],[],...]``, inside a field or as the whole body, or
nested) keep the Daphne process's peak resident memory (``VmHWM``) within the bound
docs/SECURITY.md states over the idle node: ``3 x MAX_DOCUMENT_BYTES + 64 MiB`` for a refused
body, ``4 x MAX_DOCUMENT_BYTES + 64 MiB`` for the worst accepted one (with the default 50 MiB:
264 MiB over an idle node of about 90 MiB, inside the 512 Mi the shipped pod may use)."""

from __future__ import annotations

import base64
import json
import os
import random
from pathlib import Path

import httpx
import pytest

from qprint import api
from qprint.views.uploads import envelope_limit, json_body_limit
from tests.processes import daphne_node, free_port, port_open
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MiB = 1024 * 1024
MAX_DOCUMENT_BYTES = int(os.environ.get("QPRINT_TEST_MAX_DOCUMENT_BYTES") or 50 * MiB)


def peak_rss(pid: int) -> int:
    """The process's peak resident set so far (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.fixture
def node(subprocess_env):
    port = free_port()
    env = {
        **subprocess_env,
        "DJANGO_SETTINGS_MODULE": "tests.qprint.views.node_settings",
        "QQQ_NODE_ID": "memory",
        "QPRINT_TEST_MAX_DOCUMENT_BYTES": str(MAX_DOCUMENT_BYTES),
    }
    process = daphne_node("memory", port, env).start()
    try:
        wait_until(lambda: port_open(port) or not process.alive(), 30, message="node listening")
        assert process.alive(), process.log()
        yield f"http://127.0.0.1:{port}/qprint/api/v1/jobs", process
    finally:
        process.stop()


def post(url: str, key: str, body: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return httpx.post(url, content=body, headers=headers, timeout=300)


def full_options() -> dict:
    """Options as large as ``MAX_DETAIL_BYTES`` allows, within the item and depth limits."""
    options, size = {}, 2
    while True:
        entry = f"o{len(options)}"
        value = "x" * 200
        if size + len(entry) + len(value) + 6 > 64 * 1024 or len(options) >= 300:
            return options
        options[entry] = value
        size += len(entry) + len(value) + 6


def test_the_worst_bodies_keep_the_node_within_its_memory_bound(node, transactional_db):
    url, process = node
    _, key = api.create_application_key("acme", "memory")
    api.create_device("acme", "front-desk")
    small = {"device": "front-desk", "content_type": "application/octet-stream"}
    warm = post(url, key, json.dumps({**small, "content_base64": "QQ=="}).encode())
    assert warm.status_code == 201, warm.text
    idle = peak_rss(process.pid)
    refused_bound = 3 * MAX_DOCUMENT_BYTES + 64 * MiB
    bound = 4 * MAX_DOCUMENT_BYTES + 64 * MiB
    largest = json_body_limit(MAX_DOCUMENT_BYTES)

    # Built to exhaust the node: each as large as the body may be, each refused.
    pairs = (largest - 2) // 3
    hostile = {
        "a list of empty lists": b"[" + b"[]," * (pairs - 1) + b"[]]",
        "empty lists in a field": (
            b'{"device":"front-desk","options":{"a":['
            + b"[]," * (pairs - 40)
            + b'[]]},"content_base64":"QQ=="}'
        ),
        "nested": b"[" * (largest // 2) + b"]" * (largest // 2),
    }
    for name, body in hostile.items():
        assert len(body) <= largest, name
        refused = post(url, key, body)
        assert refused.status_code in (413, 422), (name, refused.text)
        assert refused.headers["content-type"] == "application/json"
        del body
    after_hostile = peak_rss(process.pid)
    assert after_hostile - idle <= refused_bound, after_hostile - idle

    # The worst accepted: the largest document, the fields beside it as large as allowed.
    document = random.Random(7).randbytes(MAX_DOCUMENT_BYTES)
    body = json.dumps(
        {**small, "title": "t" * 255, "options": full_options(), "content_base64": ""}
    ).encode()
    assert len(body) <= envelope_limit()
    body = body.replace(
        b'"content_base64": ""', b'"content_base64": "%s"' % base64.b64encode(document)
    )
    del document
    accepted = post(url, key, body)
    assert accepted.status_code == 201, accepted.text[:500]
    del body
    worst = peak_rss(process.pid)
    print(
        f"\nidle {idle / MiB:.0f} MiB, after hostile +{(after_hostile - idle) / MiB:.0f} MiB, "
        f"after the worst accepted +{(worst - idle) / MiB:.0f} MiB (bound {bound / MiB:.0f} MiB)"
    )
    assert worst - idle <= bound
    assert process.alive()
