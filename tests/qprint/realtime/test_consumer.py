"""The device socket in-process (``WebsocketCommunicator``): every frame, close code and bad frame.

These run on the suite's database (SQLite or PostgreSQL) with the in-memory channel layer; the
multi-node behaviour over Redis is in ``test_cluster.py``, the close codes in
``test_consumer_closes.py``.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.db import OperationalError, connections
from django.db.models.functions import Now

from qprint import api
from qprint.core.errors import GateClosed
from qprint.domain import connection, credentials, wakeups
from qprint.domain.claim import claim_next_job
from qprint.models import CommandStatus, Device, DeviceCommand, DevicePrinter
from qprint.realtime import bus, consumer, pings
from tests.qprint.realtime.conftest import adb, observe_statements, row, submit, wait_ready

# -- the upgrade -----------------------------------------------------------------------------


async def test_upgrade_without_subprotocol_is_refused(device_and_token, sockets):
    _, token = device_and_token
    connected, _ = await sockets(token, subprotocols=()).connect()
    assert not connected


async def test_upgrade_with_unknown_token_is_refused(device_and_token, sockets):
    connected, _ = await sockets("not-a-token").connect()
    assert not connected


async def test_upgrade_without_token_is_refused(device_and_token, sockets):
    connected, _ = await sockets(None).connect()
    assert not connected


async def test_upgrade_of_disabled_device_is_refused_and_row_untouched(device_and_token, sockets):
    device, token = device_and_token
    await adb(lambda: type(device).objects.filter(pk=device.pk).update(enabled=False))
    connected, _ = await sockets(token).connect()
    assert not connected
    assert (await adb(row, device.pk)).connection_id is None


def database_down(monkeypatch, error: Exception) -> None:
    """The upgrade's statements fail with ``error``: the one that takes the record by the token
    (PostgreSQL) and the token's lookup of the full way."""

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(connection, "take_presented", broken)
    monkeypatch.setattr(credentials, "device_for_token", broken)


async def test_database_error_at_upgrade_fails_handshake_not_403(
    device_and_token, sockets, monkeypatch
):
    _, token = device_and_token
    database_down(monkeypatch, OperationalError("connection refused"))
    with pytest.raises(consumer.UpgradeFailed, match="unavailable"):
        await sockets(token).connect(timeout=0.5)


async def test_database_error_at_upgrade_answers_503_with_http_response_extension(
    device_and_token, sockets, monkeypatch
):
    _, token = device_and_token
    database_down(monkeypatch, OperationalError("down"))
    s = sockets(token)
    s.communicator.scope["extensions"] = {"websocket.http.response": {}}
    await s.communicator.send_input({"type": "websocket.connect"})
    start = await s.communicator.receive_output(5)
    body = await s.communicator.receive_output(5)
    assert start["type"] == "websocket.http.response.start" and start["status"] == 503
    assert json.loads(body["body"])["error"] == "unavailable"


async def test_bad_token_answers_401_with_http_response_extension(device_and_token, sockets):
    s = sockets("wrong")
    s.communicator.scope["extensions"] = {"websocket.http.response": {}}
    await s.communicator.send_input({"type": "websocket.connect"})
    start = await s.communicator.receive_output(5)
    assert start["status"] == 401


async def test_hello_names_connection_and_row_takes_it_not_ready(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    connected, subprotocol = await s.connect()
    assert connected and subprotocol == "qprint.v1"
    hello = await s.receive()
    assert hello["type"] == "hello"
    assert hello["control"] == {"revision": 1, "paused": False}
    assert hello["settings"] == {"revision": 1, "values": {}}
    assert hello["heartbeat_seconds"] == 20
    d = await adb(row, device.pk)
    assert str(d.connection_id) == hello["connection_id"]
    assert d.connection_node == hello["node"]
    assert d.connection_ready is False
    assert d.connection_lease_expires_at is not None


async def test_hello_lists_the_devices_received_and_spooled_jobs_for_reconciling(
    device_and_token, sockets
):
    device, token = device_and_token
    _queued, received, spooled, printed = [await adb(submit, device) for _ in range(4)]
    claims = {job.pk: uuid.uuid4() for job in (received, spooled, printed)}

    def move():
        from qprint.models import PrintJob

        for job, status in ((received, "RECEIVED"), (spooled, "SPOOLED"), (printed, "PRINTED")):
            PrintJob.objects.filter(pk=job.pk).update(status=status, claim_id=claims[job.pk])

    await adb(move)
    s = sockets(token)
    await s.connect()
    hello = await s.receive()
    assert sorted(hello["active_jobs"], key=lambda j: j["status"]) == [
        {"job_id": str(received.pk), "claim_id": str(claims[received.pk]), "status": "RECEIVED"},
        {"job_id": str(spooled.pk), "claim_id": str(claims[spooled.pk]), "status": "SPOOLED"},
    ]


# -- frames in ------------------------------------------------------------------------------


async def test_state_marks_connection_ready_with_applied_revisions(device_and_token, sockets):
    device, token = device_and_token
    await sockets(token).hello_and_ready()
    d = await adb(row, device.pk)
    for _ in range(50):
        if d.connection_ready:
            break
        d = await adb(row, device.pk)
    assert d.connection_ready is True
    assert (d.control_applied_revision, d.settings_applied_revision) == (1, 1)


#: The device's row read by this connection (:func:`qprint.domain.connection.read`).
GUARDED_READ = "WHERE id = %s AND connection_id = %s"


def _reads(statements: list[str]) -> list[str]:
    return [q for q in statements if q.lstrip().startswith("SELECT") and GUARDED_READ in q]


async def wait_idle(s, device_id: int) -> None:
    """Wait until the socket has handled everything sent so far: it handles one message at a
    time, so once the rows of a ``printers`` frame sent last exist, the frames before it (and
    the statements they led to) are done."""
    from tests.waiting import wait_until

    marker = f"idle-{uuid.uuid4().hex[:12]}"  # a new one each time: the list is replaced
    await s.send({"type": "printers", "printers": [{"name": marker}]})
    await adb(
        lambda: wait_until(
            lambda: DevicePrinter.objects.filter(device_id=device_id, name=marker).exists(),
            5,
            message="idle",
        )
    )


async def test_idle_ping_sends_nothing_and_renews_lease(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    before = (await adb(row, device.pk)).connection_lease_expires_at
    await s.send({"type": "ping"})
    assert await s.nothing(0.5)
    after = (await adb(row, device.pk)).connection_lease_expires_at
    assert after > before


async def test_a_state_sent_before_the_subscription_is_the_only_read_of_the_row(
    device_and_token, sockets, monkeypatch
):
    """The device reports its ``state`` at once, while the node's subscription to its group is
    still on its way (here 0.3 s). The state is handled once the subscription is made, so its
    statement reads the row after any wakeup the subscription could have missed, and the
    reconcile the subscription asks for reads nothing more: no ``SELECT`` of the row at all."""
    import asyncio

    from channels.layers import InMemoryChannelLayer

    from tests.waiting import eventually

    subscribe = InMemoryChannelLayer.group_add

    async def slow_subscribe(self, group, channel):
        await asyncio.sleep(0.3)
        await subscribe(self, group, channel)

    monkeypatch.setattr(InMemoryChannelLayer, "group_add", slow_subscribe)
    device, token = device_and_token
    statements = observe_statements(monkeypatch)
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await eventually(lambda: device.pk in bus.current().subscribed, 5, message="subscribed")
    await wait_idle(s, device.pk)  # the subscription's reconcile came before this marker
    assert _reads(statements) == []
    assert len(statements) >= 2  # the upgrade's take and the state's statement were observed


async def test_ping_is_one_statement(device_and_token, sockets, monkeypatch):
    # No bus for this socket: its reconcile after subscribing would be a statement of its own.
    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_idle(s, device.pk)
    statements = observe_statements(monkeypatch)
    await s.send({"type": "ping"})
    assert await s.nothing(0.5)
    assert len(statements) == 1
    assert "UPDATE" in statements[0].upper()


async def test_pings_of_several_sockets_are_renewed_in_one_statement(
    device_factory, sockets, monkeypatch
):
    # No bus: its reconcile after subscribing would be a statement of its own.
    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    monkeypatch.setattr(pings, "WINDOW_SECONDS", 0.5)  # all three arrive in it, however slow
    made = [await adb(device_factory) for _ in range(3)]
    socks = [sockets(token) for _, token in made]
    for (device, _), s in zip(made, socks, strict=True):
        await s.hello_and_ready()
        await wait_idle(s, device.pk)
    before = [(await adb(row, device.pk)).connection_lease_expires_at for device, _ in made]
    statements = observe_statements(monkeypatch)
    for s in socks:  # within the window of the first
        await s.send({"type": "ping"})
    for s in socks:
        assert await s.nothing(0.7)
    assert len(statements) == (1 if connections["default"].vendor == "postgresql" else 3)
    after = [(await adb(row, device.pk)).connection_lease_expires_at for device, _ in made]
    assert all(a > b for a, b in zip(after, before, strict=True))


async def test_a_ping_does_not_hold_up_the_frames_behind_it(device_and_token, sockets, monkeypatch):
    from tests.waiting import wait_until

    monkeypatch.setattr(pings, "WINDOW_SECONDS", 5)  # the ping's answer comes 5 s later
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    before = (await adb(row, device.pk)).connection_lease_expires_at
    await s.send({"type": "ping"})
    await s.send({"type": "printers", "printers": [{"name": "behind-the-ping"}]})
    await adb(
        lambda: wait_until(
            lambda: DevicePrinter.objects.filter(device_id=device.pk).exists(),
            2,
            message="printers",
        )
    )
    assert (await adb(row, device.pk)).connection_lease_expires_at == before  # not yet renewed


async def test_a_replaced_socket_among_pings_renewed_together_closes_4000_alone(
    device_factory, sockets
):
    made = [await adb(device_factory) for _ in range(2)]
    socks = [sockets(token) for _, token in made]
    for (device, _), s in zip(made, socks, strict=True):
        await s.hello_and_ready()
        await wait_ready(device.pk)
    (taken, _), (kept, _) = made
    # Another node took the first device and its `replaced` message was lost.
    await adb(connection.take, taken.pk, uuid.uuid4(), "node-elsewhere", 20)
    before = (await adb(row, kept.pk)).connection_lease_expires_at
    for s in socks:
        await s.send({"type": "ping"})
    assert await socks[0].receive_close() == 4000
    assert await socks[1].nothing(0.3)
    assert (await adb(row, kept.pk)).connection_lease_expires_at > before
    assert (await adb(row, taken.pk)).connection_node == "node-elsewhere"


def test_ping_statement_renews_and_reports_in_one_query(device_and_token):
    from django.db import connection as db
    from django.test.utils import CaptureQueriesContext

    device, _ = device_and_token
    cid = uuid.uuid4()
    connection.take(device.pk, cid, "node-a", 20)
    submit(device)
    api.send_command(device, "REFRESH", {})
    with CaptureQueriesContext(db) as queries:
        state = connection.ping(device.pk, cid, 20)
    assert len(queries) == 1
    assert state.job_queued and state.command_pending and state.claimed_job_id is None
    assert (state.control_revision, state.settings_revision) == (1, 1)


def test_ping_many_answers_each_connection_with_its_own_row(device_factory):
    from django.db import connection as db
    from django.test.utils import CaptureQueriesContext

    (busy, _), (idle, _), (gone, _) = device_factory(), device_factory(), device_factory()
    cids = {d.pk: uuid.uuid4() for d in (busy, idle, gone)}
    for d in (busy, idle, gone):
        connection.take(d.pk, cids[d.pk], "node-a", 20)
    connection.take(gone.pk, uuid.uuid4(), "node-b", 20)  # replaced
    submit(busy)
    old_lease = row(idle.pk).connection_lease_expires_at
    pings = [
        (busy.pk, cids[busy.pk], 20),
        (gone.pk, cids[gone.pk], 20),
        (idle.pk, cids[idle.pk], 60),
    ]
    with CaptureQueriesContext(db) as queries:
        busy_state, gone_state, idle_state = connection.ping_many(pings)
    assert len(queries) == (1 if db.vendor == "postgresql" else 3)
    assert gone_state is None
    assert busy_state.job_queued and busy_state.connection_live
    assert not idle_state.job_queued and idle_state.connection_live
    assert row(idle.pk).connection_lease_expires_at > old_lease
    assert row(gone.pk).connection_node == "node-b"


def test_mark_ready_many_records_each_connection_with_its_own_row(device_factory):
    from django.db import connection as db
    from django.test.utils import CaptureQueriesContext

    (first, _), (second, _), (gone, _) = device_factory(), device_factory(), device_factory()
    cids = {d.pk: uuid.uuid4() for d in (first, second, gone)}
    for d in (first, second, gone):
        connection.take(d.pk, cids[d.pk], "node-a", 20)
    connection.take(gone.pk, uuid.uuid4(), "node-b", 20)  # replaced
    api.send_command(second, "REFRESH", {})
    readies = [
        (first.pk, cids[first.pk], 1, 1, 20),
        (gone.pk, cids[gone.pk], 1, 1, 20),
        (second.pk, cids[second.pk], 0, 1, 60),
    ]
    with CaptureQueriesContext(db) as queries:
        first_state, gone_state, second_state = connection.mark_ready_many(readies)
    assert len(queries) == (1 if db.vendor == "postgresql" else 3)
    assert gone_state is None and row(gone.pk).connection_ready is False
    assert first_state.connection_ready and not first_state.command_open
    assert second_state.connection_ready and second_state.command_open
    recorded = {d.pk: row(d.pk) for d in (first, second)}
    assert (
        recorded[first.pk].control_applied_revision,
        recorded[first.pk].settings_applied_revision,
    ) == (1, 1)
    assert (
        recorded[second.pk].control_applied_revision,
        recorded[second.pk].settings_applied_revision,
    ) == (0, 1)
    assert (  # three heartbeats of each connection's own
        recorded[second.pk].connection_lease_expires_at
        > recorded[first.pk].connection_lease_expires_at + timedelta(seconds=100)
    )


async def test_states_that_arrive_while_one_is_recorded_are_recorded_together(
    device_factory, sockets, monkeypatch
):
    """A connect burst: the first socket's ``state`` is recorded at once, alone; those that
    arrive while its statement is on its way are recorded together in the next one, and each
    socket goes on with its own row."""
    import asyncio
    import threading

    from qprint.realtime import gathered
    from tests.waiting import eventually

    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    made = [await adb(device_factory) for _ in range(3)]
    socks = [sockets(token) for _, token in made]
    hellos = []
    for s in socks:
        await s.connect()
        hellos.append(await s.receive())
    held, release = threading.Event(), threading.Event()
    batches: list[list[int]] = []
    record = connection.mark_ready_many

    def held_first(many):
        batches.append([device_id for device_id, *_ in many])
        if len(batches) == 1:
            held.set()
            release.wait(10)
        return record(many)

    monkeypatch.setattr(connection, "mark_ready_many", held_first)

    await socks[0].report_state(hellos[0])
    assert await asyncio.to_thread(held.wait, 10)
    for s, hello in zip(socks[1:], hellos[1:], strict=True):
        await s.report_state(hello)
    waiting = gathered._gathered("readies")
    await eventually(lambda: len(waiting.pending) == 2, 5, message="two states waiting")
    release.set()
    for device, _ in made:
        await wait_ready(device.pk)
    ids = [device.pk for device, _ in made]
    assert batches == [ids[:1], ids[1:]]


async def test_upgrades_that_arrive_while_one_is_taken_are_taken_together(
    device_factory, sockets, monkeypatch
):
    """A connect burst: the first socket's upgrade takes its row at once, alone; those that
    arrive while its statement is on its way take theirs together in the next one, and each
    socket opens with its own device's hello."""
    import asyncio
    import threading

    from qprint.domain import device_operations
    from qprint.realtime import gathered
    from tests.waiting import eventually

    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    made = [await adb(device_factory) for _ in range(3)]
    socks = [sockets(token) for _, token in made]
    held, release = threading.Event(), threading.Event()
    batches: list[list[str]] = []
    open_sockets = device_operations.open_sockets

    def held_first(upgrades):
        batches.append([presented.token_hash for presented, *_ in upgrades])
        if len(batches) == 1:
            held.set()
            release.wait(10)
        return open_sockets(upgrades)

    monkeypatch.setattr(device_operations, "open_sockets", held_first)
    # The upgrades sent, then their answers read one socket after the other: a test
    # communicator's calls must not overlap (each patches Channels' close_old_connections).
    upgrade = {"type": "websocket.connect"}
    await socks[0].communicator.send_input(upgrade)
    assert await asyncio.to_thread(held.wait, 10)
    for s in socks[1:]:
        await s.communicator.send_input(upgrade)
    waiting = gathered._gathered("upgrades")
    await eventually(lambda: len(waiting.pending) == 2, 5, message="two upgrades waiting")
    release.set()
    for s in socks:
        assert (await s.communicator.receive_output(5))["type"] == "websocket.accept"
        await s.report_state(await s.receive())
    for device, _ in made:
        await wait_ready(device.pk)  # each socket's own row, taken, then marked ready
    hashes = [device.token_hash for device, _ in made]
    assert batches == [hashes[:1], hashes[1:]]


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "[1, 2]",
        json.dumps({"no": "type"}),
        json.dumps({"type": 7}),
        json.dumps({"type": "launch"}),
        json.dumps({"type": "hello"}),
    ],
    ids=["not-json", "not-object", "no-type", "type-not-string", "unknown-type", "server-frame"],
)
async def test_malformed_frame_closes_4400_and_changes_nothing(device_and_token, sockets, frame):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await s.send(frame)
    error = await s.receive()
    assert error["type"] == "error" and error["code"] == "protocol_error"
    assert await s.receive_close() == 4400
    d = await adb(row, device.pk)
    assert d.connection_id is None  # the closed socket no longer holds the row
    assert (d.control_applied_revision, d.settings_applied_revision) == (1, 1)


async def test_binary_frame_closes_4400(device_and_token, sockets):
    _, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await s.communicator.send_to(bytes_data=b"\x00\x01")
    assert await s.receive_close() == 4400


async def test_oversized_frame_closes_4400(device_and_token, sockets, settings):
    settings.QPRINT = {"MAX_FRAME_BYTES": 200}
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    big = [{"name": f"printer-{i}"} for i in range(20)]
    await s.send({"type": "printers", "printers": big})
    assert await s.receive_close() == 4400
    assert await adb(lambda: DevicePrinter.objects.filter(device_id=device.pk).count()) == 0


async def test_ping_before_state_closes_4400(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.connect()
    await s.receive()
    await s.send({"type": "ping"})
    assert await s.receive_close() == 4400
    assert (await adb(row, device.pk)).connection_ready is False


async def test_state_above_sent_revisions_closes_4400_and_records_nothing(
    device_and_token, sockets
):
    device, token = device_and_token
    s = sockets(token)
    await s.connect()
    await s.receive()
    await s.send({"type": "state", "control_revision": 2, "settings_revision": 1})
    assert await s.receive_close() == 4400
    d = await adb(row, device.pk)
    assert (d.control_applied_revision, d.settings_applied_revision) == (0, 0)
    assert d.connection_ready is False


async def test_state_with_non_integer_revision_closes_4400(device_and_token, sockets):
    _, token = device_and_token
    s = sockets(token)
    await s.connect()
    await s.receive()
    await s.send({"type": "state", "control_revision": "1", "settings_revision": 1})
    assert await s.receive_close() == 4400


async def test_printers_frame_replaces_printer_list(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await s.send(
        {"type": "printers", "printers": [{"name": "HP", "is_default": True}, {"name": "Zebra"}]}
    )
    await s.send({"type": "ping"})
    assert await s.nothing(0.5)
    names = await adb(
        lambda: sorted(DevicePrinter.objects.filter(device_id=device.pk).values_list("name"))
    )
    assert names == [("HP",), ("Zebra",)]


async def test_bad_printers_frame_closes_4400_and_keeps_printers(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await s.send({"type": "printers", "printers": [{"name": "HP"}]})
    await s.send({"type": "ping"})
    assert await s.nothing(0.5)
    await s.send({"type": "printers", "printers": [{"status": "no name"}]})
    assert await s.receive_close() == 4400
    assert await adb(lambda: DevicePrinter.objects.filter(device_id=device.pk).count()) == 1


# -- frames out -----------------------------------------------------------------------------


async def test_job_submitted_wakes_ready_device(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(submit, device)
    assert await s.receive() == {"type": "wake"}


async def test_job_queued_before_connect_wakes_on_ready(device_and_token, sockets):
    device, token = device_and_token
    await adb(submit, device)
    s = sockets(token)
    await s.hello_and_ready()
    assert await s.receive() == {"type": "wake"}


async def test_a_socket_not_ready_reads_nothing_on_a_wakeup_and_its_state_frame_finds_the_job(
    device_and_token, sockets, monkeypatch
):
    device, token = device_and_token
    s = sockets(token)
    connected, _ = await s.connect()
    assert connected
    hello = await s.receive()
    statements = observe_statements(monkeypatch)
    await adb(submit, device)  # its wakeup reaches a socket that has not reported its state
    assert await s.nothing(0.3)
    assert not [q for q in statements if "qprint_device" in q], statements
    await s.report_state(hello)
    assert (await s.receive())["type"] == "wake"


async def test_lost_wakeup_is_found_by_next_ping(device_and_token, sockets, monkeypatch):
    # No bus: its reconcile after subscribing would find the job before the ping does.
    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    previous = wakeups.set_publisher(wakeups.RecordingPublisher())  # drops every wakeup
    try:
        await adb(submit, device)
        assert await s.nothing(0.3)
        await s.send({"type": "ping"})
        assert await s.receive() == {"type": "wake"}
    finally:
        wakeups.set_publisher(previous)


async def test_no_wake_once_a_read_of_the_row_finds_the_lease_lapsed(device_and_token, sockets):
    """The socket decides ``wake`` with the claim's own gate, for the last row it read: a queued
    job's wakeup wakes the device from that row; the claim judges the row on the database's
    clock and refuses ``not_connected`` when the lease lapsed since (here behind the socket's
    back: its pings would have renewed it). Once a read of the row finds the lease lapsed (here
    the settings' wakeup), a queued job's wakeup reads the row again and sends no wake."""
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(
        lambda: Device.objects.filter(pk=device.pk).update(
            connection_lease_expires_at=Now() - timedelta(seconds=1)
        )
    )
    await adb(submit, device)
    assert await s.receive() == {"type": "wake"}  # the last row read: the lease was live
    with pytest.raises(GateClosed) as refused:
        await adb(claim_next_job, device.pk)
    assert refused.value.code == "not_connected"
    await adb(api.update_settings, device.pk, {"tray": 2})
    # The settings frame is the next frame: no wake for the read of the row.
    assert await s.receive() == {"type": "settings", "revision": 2, "values": {"tray": 2}}
    await adb(submit, device)  # read for: the last row said the lease had lapsed
    await wait_idle(s, device.pk)
    assert await s.nothing(0.1)


async def test_pause_sends_control_and_closes_gate(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(api.pause_device, device.pk)
    control = await s.receive()
    assert control == {"type": "control", "revision": 2, "paused": True}
    await adb(submit, device)
    await s.send({"type": "state", "control_revision": 2, "settings_revision": 1})
    assert await s.nothing(0.5)  # paused: no wake
    await adb(api.resume_device, device.pk)
    assert await s.receive() == {"type": "control", "revision": 3, "paused": False}
    await s.send({"type": "state", "control_revision": 3, "settings_revision": 1})
    assert await s.receive() == {"type": "wake"}


async def test_a_queued_jobs_wakeup_wakes_the_device_without_reading_its_row(
    device_and_token, sockets, monkeypatch
):
    """The gate was open for the last row the socket read: the wakeup of a job queued for its
    device is answered from it."""
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_idle(s, device.pk)
    statements = observe_statements(monkeypatch)
    await adb(submit, device)
    assert await s.receive() == {"type": "wake"}
    await wait_idle(s, device.pk)
    assert _reads(statements) == []


async def test_a_queued_jobs_wakeup_is_read_for_when_the_gate_was_closed(
    device_and_token, sockets, monkeypatch
):
    """Paused, and the pause applied by the device: the socket's last row said the gate was
    closed, so a queued job's wakeup reads the row (no wake); once resumed, it wakes again."""
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(api.pause_device, device.pk)
    assert await s.receive() == {"type": "control", "revision": 2, "paused": True}
    await s.send({"type": "state", "control_revision": 2, "settings_revision": 1})
    await wait_idle(s, device.pk)
    statements = observe_statements(monkeypatch)
    await adb(submit, device)
    await wait_idle(s, device.pk)  # the wakeup came before the marker: handled
    assert len(_reads(statements)) == 1
    assert await s.nothing(0.1)
    await adb(api.resume_device, device.pk)
    assert await s.receive() == {"type": "control", "revision": 3, "paused": False}
    await s.send({"type": "state", "control_revision": 3, "settings_revision": 1})
    assert await s.receive() == {"type": "wake"}


async def test_settings_change_sends_settings_frame(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    await adb(api.update_settings, device.pk, {"dpi": 300})
    assert await s.receive() == {"type": "settings", "revision": 2, "values": {"dpi": 300}}


async def test_a_new_connection_gets_the_commands_an_earlier_one_was_given_again(
    device_and_token, sockets
):
    device, token = device_and_token
    first = sockets(token)
    await first.hello_and_ready()
    await wait_ready(device.pk)
    command = await adb(api.send_command, device.pk, "REFRESH", {})
    assert (await first.receive())["command_id"] == str(command.pk)
    await first.close()  # lost before its result
    second = sockets(token)
    await second.hello_and_ready()
    frame = await second.receive()
    assert (frame["type"], frame["command_id"]) == ("command", str(command.pk))


async def test_a_connection_without_open_commands_hands_out_none_without_a_statement(
    device_and_token, sockets, monkeypatch
):
    # No bus: its reconcile after subscribing would be a statement of its own.
    monkeypatch.setattr(bus.DeviceBus, "_start", lambda self: None)
    device, token = device_and_token
    done = await adb(api.send_command, device.pk, "REFRESH", {})
    await adb(lambda: DeviceCommand.objects.filter(pk=done.pk).update(status=CommandStatus.DONE))
    statements = observe_statements(monkeypatch)
    s = sockets(token)
    await s.hello_and_ready()
    await wait_idle(s, device.pk)
    assert not [q for q in statements if "qprint_device_command" in q.split("RETURNING")[0]]
    assert await s.nothing(0.3)


async def test_command_is_sent_and_marked_delivered(device_and_token, sockets):
    device, token = device_and_token
    s = sockets(token)
    await s.hello_and_ready()
    await wait_ready(device.pk)
    command = await adb(api.send_command, device.pk, "REFRESH", {"full": True})
    frame = await s.receive()
    assert frame == {
        "type": "command",
        "command_id": str(command.pk),
        "command_type": "REFRESH",
        "payload": {"full": True},
    }
    status = await adb(lambda: DeviceCommand.objects.get(pk=command.pk).status)
    assert status == CommandStatus.DELIVERED
