"""The socket's upgrade under the throttle of failed authentications, and credentials that stop
working close the live socket (4001). In-process; across real nodes in
``test_security_cluster.py``."""

from __future__ import annotations

import json

import pytest

from qprint import api
from qprint.models import AuthFailureCount
from tests.qprint.realtime.conftest import adb


async def upgrade_status(sockets, token: str, address: str) -> tuple[int, dict]:
    s = sockets(token)
    s.communicator.scope["client"] = (address, 50000)
    s.communicator.scope["extensions"] = {"websocket.http.response": {}}
    await s.communicator.send_input({"type": "websocket.connect"})
    start = await s.communicator.receive_output(5)
    if start["type"] == "websocket.accept":
        await s.close()
        return 101, {}
    body = await s.communicator.receive_output(5)
    return start["status"], json.loads(body["body"])


@pytest.fixture
def low_limit(settings):
    settings.QPRINT = {"AUTH_FAILURE_LIMIT": 3}


async def test_failed_upgrades_are_counted_and_then_refused_429_even_with_the_right_token(
    device_and_token, sockets, low_limit
):
    _, token = device_and_token
    for n in range(3):
        status, body = await upgrade_status(sockets, f"wrong-{n}", "127.0.0.9")
        assert status == 401 and body["error"] == "unauthorized"
    status, body = await upgrade_status(sockets, token, "127.0.0.9")
    assert status == 429 and body["error"] == "rate_limited"
    # Another address connects.
    assert (await upgrade_status(sockets, token, "127.0.0.10"))[0] == 101
    counted = await adb(lambda: AuthFailureCount.objects.get(scope="addr:127.0.0.9").failures)
    assert counted == 3


async def test_a_throttled_upgrade_without_the_extension_fails_the_handshake_never_403(
    device_and_token, sockets, low_limit
):
    from qprint.realtime import consumer

    _, token = device_and_token
    for n in range(3):
        await upgrade_status(sockets, f"wrong-{n}", "127.0.0.11")
    s = sockets(token)
    s.communicator.scope["client"] = ("127.0.0.11", 50000)
    with pytest.raises(consumer.UpgradeFailed, match="rate_limited"):
        await s.connect(timeout=1)


async def test_revoking_the_token_closes_the_live_socket_4001(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await adb(api.rotate_device_token, device)
    assert await s.receive_close() == 4001
    assert (await upgrade_status(sockets, token, "127.0.0.12"))[0] == 401


async def test_a_cloudprnt_printer_token_opens_no_socket_refused_like_an_unknown_token(
    sockets, transactional_db
):
    _, token = await adb(api.create_device, "acme", "counter", kind="cloudprnt")
    status, body = await upgrade_status(sockets, token, "127.0.0.11")
    assert status == 401 and body["error"] == "unauthorized"
    counted = await adb(lambda: AuthFailureCount.objects.get(scope="addr:127.0.0.11").failures)
    assert counted == 1
