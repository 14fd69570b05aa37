"""The device socket in-process (``WebsocketCommunicator``): every close code the server sends
and why (replaced, disabled, token rotated, silent, drained), and the client's own close.

Like ``test_consumer.py``, on the suite's database with the in-memory channel layer.
"""

from __future__ import annotations

import uuid

import pytest

from qprint import api
from qprint.domain import connection, wakeups
from qprint.realtime import bus, consumer, drain
from tests.qprint.realtime.conftest import adb, row, submit, wait_ready

# -- close codes ----------------------------------------------------------------------------


async def test_newer_connection_replaces_older_with_4000(device_and_token, sockets):
    device, token = device_and_token
    first = sockets(token)
    await first.hello_and_ready()
    second = sockets(token)
    hello = await second.hello_and_ready()
    assert await first.receive_close() == 4000
    await second.send({"type": "ping"})
    assert await second.nothing(0.3)
    d = await adb(row, device.pk)
    assert str(d.connection_id) == hello["connection_id"]


async def test_replaced_without_bus_message_closes_4000_on_next_frame(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    # Another node took the row and its `replaced` message was lost.
    await adb(connection.take, device.pk, uuid.uuid4(), "node-elsewhere", 20)
    await s.send({"type": "ping"})
    assert await s.receive_close() == 4000
    assert (await adb(row, device.pk)).connection_node == "node-elsewhere"


async def test_a_state_whose_row_another_connection_took_closes_4000(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.connect()
    hello = await s.receive()
    await adb(connection.take, device.pk, uuid.uuid4(), "node-elsewhere", 20)
    await s.report_state(hello)
    assert await s.receive_close() == 4000
    d = await adb(row, device.pk)
    assert d.connection_node == "node-elsewhere" and d.connection_ready is False


async def test_a_state_the_database_does_not_record_closes_1011(
    device_and_token, sockets, monkeypatch
):
    """The device reconnects and reports again; the row stays as the take left it."""
    from django.db import OperationalError

    device, token = device_and_token
    s = sockets(token)
    await s.connect()
    hello = await s.receive()

    def down(readies):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "mark_ready_many", down)
    await s.report_state(hello)
    assert await s.receive_close() == 1011
    assert (await adb(row, device.pk)).connection_ready is False


async def test_printers_the_database_does_not_record_close_1011(
    device_and_token, sockets, monkeypatch
):
    """As for ``state``: the device reconnects and reports its printers again."""
    from django.db import OperationalError

    from qprint.domain import devices

    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)

    def down(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(devices, "replace_printers", down)
    await s.send({"type": "printers", "printers": [{"name": "p"}]})
    assert await s.receive_close() == 1011


async def test_a_deleted_device_is_answered_as_http_answers_its_token(device_and_token, sockets):
    """Its token names no device: a claim frame is refused 401 ``unauthorized`` (as the HTTP
    claim answers it), and a printers frame closes 4001, never an error inside the consumer."""
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(lambda: type(device).objects.filter(pk=device.pk).delete())
    await s.send({"type": "claim", "request_id": "r"})
    refused = await s.receive()
    assert (refused["type"], refused["status"], refused["error"]) == (
        "refused",
        401,
        "unauthorized",
    )
    await s.send({"type": "printers", "printers": [{"name": "p"}]})
    assert await s.receive_close() == 4001


async def test_disabled_device_is_closed_4001(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(lambda: type(device).objects.filter(pk=device.pk).update(enabled=False))
    await s.send({"type": "ping"})
    assert await s.receive_close() == 4001


async def test_rotated_token_closes_4001(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(api.rotate_device_token, device.pk)
    await s.send({"type": "ping"})
    assert await s.receive_close() == 4001


async def test_silent_device_is_closed_4408_and_row_cleared(
    device_and_token, sockets, short_heartbeat
):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    assert await s.receive_close(timeout=5) == 4408
    from tests.waiting import wait_until

    await adb(
        lambda: wait_until(lambda: row(device.pk).connection_id is None, 5, message="cleared")
    )


async def test_pinging_device_is_not_closed(device_and_token, sockets, short_heartbeat):
    import asyncio

    _, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    for _ in range(8):  # 8 x 0.15 s = four lease lengths of 0.3 s heartbeats... pinging
        await s.send({"type": "ping"})
        await asyncio.sleep(0.15)
    assert await s.nothing(0.1)


async def test_client_close_clears_row(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await s.close()
    d = await adb(row, device.pk)
    assert d.connection_id is None and d.connection_ready is False


async def test_draining_node_closes_sockets_4003_and_refuses_new(
    device_and_token, sockets, monkeypatch, settings
):
    settings.QPRINT = {"DRAIN_SPREAD_SECONDS": 0.2}
    _device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    status = {"value": "UP"}
    monkeypatch.setattr(
        drain.cluster, "node_is_draining", lambda node: status["value"] in ("DRAINING", "STOPPED")
    )
    status["value"] = "DRAINING"
    await drain.current().check()
    assert await s.receive_close() == 4003
    with pytest.raises(consumer.UpgradeFailed, match="draining"):
        await sockets(token).connect(timeout=0.5)
    status["value"] = "UP"
    await drain.current().check()
    connected, _ = await sockets(token).connect()
    assert connected


async def test_bus_coming_back_reconciles_every_socket(device_factory, sockets):
    pairs = [await adb(device_factory) for _ in range(3)]
    opened = []
    for device, token in pairs:
        s = sockets(token)
        await s.hello_and_ready()
        await wait_ready(device.pk)
        opened.append(s)
    previous = wakeups.set_publisher(wakeups.RecordingPublisher())  # the outage loses wakeups
    try:
        for device, _ in pairs:
            await adb(submit, device)
        device_bus = bus.current()
        device_bus._set_down("test")
        device_bus._set_up()
        for s in opened:
            assert await s.receive() == {"type": "wake"}
    finally:
        wakeups.set_publisher(previous)
