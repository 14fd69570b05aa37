"""The socket's upgrade under the throttle of failed authentications, and credentials that stop
working close the live socket (4001). In-process; across real nodes in
``test_security_cluster.py``."""

from __future__ import annotations

import json

import pytest
from django.db import connection

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


async def test_failed_upgrades_are_counted_then_wrong_tokens_refused_429_never_the_right_one(
    device_and_token, sockets, low_limit
):
    _, token = device_and_token
    for n in range(3):
        status, body = await upgrade_status(sockets, f"wrong-{n}", "127.0.0.9")
        assert status == 401 and body["error"] == "unauthorized"
    status, body = await upgrade_status(sockets, "wrong-again", "127.0.0.9")
    assert status == 429 and body["error"] == "rate_limited"
    # The device behind that address connects: a stranger's guesses never lock it out.
    assert (await upgrade_status(sockets, token, "127.0.0.9"))[0] == 101
    counted = await adb(lambda: AuthFailureCount.objects.get(scope="addr:127.0.0.9").failures)
    assert counted == 3


async def test_a_throttled_upgrade_without_the_extension_is_refused_as_a_wrong_token_never_500(
    device_and_token, sockets, low_limit
):
    _, token = device_and_token
    for n in range(3):
        await upgrade_status(sockets, f"wrong-{n}", "127.0.0.11")
    s = sockets("wrong-again")
    s.communicator.scope["client"] = ("127.0.0.11", 50000)
    connected, _ = await s.connect(timeout=1)  # closed before accept: Daphne answers 403
    assert not connected
    s = sockets(token)
    s.communicator.scope["client"] = ("127.0.0.11", 50000)
    connected, _ = await s.connect(timeout=1)
    assert connected
    await s.close()


async def test_the_upgrade_counts_the_client_behind_a_trusted_proxy(
    device_and_token, sockets, settings
):
    settings.QPRINT = {"AUTH_FAILURE_LIMIT": 3, "TRUSTED_PROXIES": ["127.0.0.0/8"]}
    for n in range(4):
        s = sockets(f"wrong-{n}")
        s.communicator.scope["client"] = ("127.0.0.1", 50000)
        s.communicator.scope["headers"].append(
            (b"x-forwarded-for", f"198.51.100.{n}, 203.0.113.9".encode())
        )
        s.communicator.scope["extensions"] = {"websocket.http.response": {}}
        await s.communicator.send_input({"type": "websocket.connect"})
        start = await s.communicator.receive_output(5)
        await s.communicator.receive_output(5)
        assert start["status"] == (401 if n < 3 else 429)
    scopes = await adb(lambda: set(AuthFailureCount.objects.values_list("scope", flat=True)))
    assert "addr:203.0.113.9" in scopes


async def test_revoking_the_token_closes_the_live_socket_4001(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await adb(api.rotate_device_token, device)
    assert await s.receive_close() == 4001
    assert (await upgrade_status(sockets, token, "127.0.0.12"))[0] == 401


@pytest.mark.parametrize("change", ["token_rotated", "disabled"])
async def test_a_printers_frame_after_the_credential_changed_is_refused_4001(
    device_and_token, sockets, change
):
    """Before any notice reaches the socket (written here without one), its next ``printers``
    frame is answered as the HTTP API would answer it now: nothing replaced, close 4001."""
    from qprint.domain import credentials
    from qprint.models import Device, DevicePrinter

    device, token = device_and_token
    await adb(api.replace_printers, device, [{"name": "laser"}])
    s = sockets(token)
    await s.hello_and_ready()
    values = (
        {"token_hash": credentials.hash_secret(credentials.new_secret())}
        if change == "token_rotated"
        else {"enabled": False}
    )
    await adb(lambda: Device.objects.filter(pk=device.pk).update(**values))
    await s.send({"type": "printers", "printers": [{"name": "stolen"}]})
    assert await s.receive_close() == 4001
    names = await adb(
        lambda: list(DevicePrinter.objects.filter(device=device).values_list("name", flat=True))
    )
    assert names == ["laser"]


async def test_a_cloudprnt_printer_token_opens_no_socket_refused_like_an_unknown_token(
    sockets, transactional_db
):
    _, token = await adb(api.create_device, "acme", "counter", kind="cloudprnt")
    status, body = await upgrade_status(sockets, token, "127.0.0.11")
    assert status == 401 and body["error"] == "unauthorized"
    counted = await adb(lambda: AuthFailureCount.objects.get(scope="addr:127.0.0.11").failures)
    assert counted == 1


async def test_the_http_api_and_the_socket_upgrade_come_in_through_one_door(
    device_and_token, sockets, monkeypatch
):
    """Both transports authenticate a device with ``credentials.authenticate_device``; the HTTP
    claim and event match a token in their own lock, and the socket's upgrade in the statement
    that takes the connection record (PostgreSQL), and come in through it for every token their
    statement does not match."""
    from django.test import Client
    from django.urls import reverse

    from qprint.domain import credentials

    came_in: list[str] = []
    real = credentials.authenticate_device

    def door(secret, **how):
        came_in.append(how.get("kind", "agent"))
        return real(secret, **how)

    monkeypatch.setattr(credentials, "authenticate_device", door)
    _, token = device_and_token

    def http():
        client, url = Client(), reverse("qprint:device-claim")
        printers = client.put(
            reverse("qprint:device-printers"),
            [],
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        matched = client.post(url, HTTP_AUTHORIZATION=f"Bearer {token}")
        unknown = client.post(url, HTTP_AUTHORIZATION="Bearer not-a-token")
        return printers.status_code, matched.status_code, unknown.status_code

    # The printers looked up at the door; the claim matched in its lock (authenticated, then
    # gated: not connected); a token the lock does not match comes in through the door.
    assert await adb(http) == (200, 409, 401)
    assert came_in == ["agent", "agent"]
    s = sockets(token)
    await s.hello_and_ready()
    await s.close()
    matched_in_statement = connection.vendor == "postgresql"
    assert came_in == (["agent"] * 2 if matched_in_statement else ["agent"] * 3)
    status, _ = await upgrade_status(sockets, "not-a-token", "127.0.0.12")
    assert status == 401
    assert came_in[-1] == "agent" and len(came_in) == (3 if matched_in_statement else 4)
