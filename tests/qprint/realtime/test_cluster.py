"""Two real Daphne nodes (A, B) on PostgreSQL and a Redis of the test's own, with real devices.

The nodes and Redis start once per module; each test makes its own devices. Heartbeats are 1 s.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from qprint import api
from qprint.models import Device, PrintJob
from tests.processes import free_port
from tests.qprint.realtime.cluster import (
    Node,
    RealDevice,
    node_env,
    ready,
    row,
    upgrade_status,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEARTBEAT = 1.0


# -- wakeups and the claim gate across nodes ------------------------------------------------


async def test_job_accepted_on_a_wakes_device_connected_to_b(nodes, devices, http):
    a, b = nodes
    device, real = await devices("desk-wake")
    await real.connect(b.ws)
    await ready(device)
    submitted = await http.submit(a, "desk-wake")
    assert submitted.status_code == 201, submitted.text
    assert await real.frame("wake") == {"type": "wake"}


async def test_claim_on_a_is_accepted_for_device_connected_to_b(nodes, devices, http):
    a, b = nodes
    device, real = await devices("desk-claim")
    await real.connect(b.ws)
    await ready(device)
    job = (await http.submit(a, "desk-claim")).json()
    await real.frame("wake")
    claimed = await http.claim(a, real.token)
    assert claimed.status_code == 200, claimed.text
    assignment = claimed.json()
    assert assignment["job_id"] == job["id"]
    replay = await http.claim(b, real.token)
    assert replay.status_code == 200 and replay.json()["claim_id"] == assignment["claim_id"]


async def test_events_through_either_node_move_the_job(nodes, devices, http):
    a, b = nodes
    device, real = await devices("desk-events")
    await real.connect(a.ws)
    await ready(device)
    job = (await http.submit(b, "desk-events")).json()
    await real.frame("wake")
    assignment = (await http.claim(b, real.token)).json()
    for node, event in ((a, "RECEIVED"), (b, "SPOOLED"), (a, "PRINTED")):
        answer = await http.event(node, real.token, job["id"], assignment["claim_id"], event)
        assert answer.status_code == 201, answer.text
    status = await database_sync_to_async(lambda: PrintJob.objects.get(pk=job["id"]).status)()
    assert status == "PRINTED"


async def test_settings_change_closes_gate_on_both_nodes_until_applied(nodes, devices, http):
    a, b = nodes
    device, real = await devices("desk-settings", apply=False)
    await real.connect(b.ws)
    await ready(device)
    changed = await http.app("PUT", a, "devices/desk-settings/settings", json={"dpi": 600})
    assert changed.status_code == 200, changed.text
    settings = await real.frame("settings")
    assert settings["values"] == {"dpi": 600}
    for node in (a, b):
        refused = await http.claim(node, real.token)
        assert refused.status_code == 409 and refused.json()["error"] == "stale_settings"
    await real.send_state()
    await eventually(
        lambda: row(device.pk).settings_applied_revision == settings["revision"],
        10,
        "applied",
        database=True,
    )
    for node in (a, b):
        assert (await http.claim(node, real.token)).status_code == 204


async def test_pause_closes_gate_on_both_nodes_until_resumed_and_applied(nodes, devices, http):
    a, b = nodes
    device, real = await devices("desk-pause", apply=False)
    await real.connect(a.ws)
    await ready(device)
    assert (await http.app("POST", b, "devices/desk-pause/pause")).status_code == 200
    control = await real.frame("control")
    assert control["paused"] is True
    for node in (a, b):
        assert (await http.claim(node, real.token)).json()["error"] == "stale_control"
    await real.send_state()
    await eventually(
        lambda: row(device.pk).control_applied_revision == control["revision"],
        10,
        "",
        database=True,
    )
    for node in (a, b):
        assert (await http.claim(node, real.token)).json()["error"] == "paused"
    assert (await http.app("POST", a, "devices/desk-pause/resume")).status_code == 200
    resumed = await real.frame("control")
    await real.send_state()
    await eventually(
        lambda: row(device.pk).control_applied_revision == resumed["revision"],
        10,
        "",
        database=True,
    )
    for node in (a, b):
        assert (await http.claim(node, real.token)).status_code == 204


# -- the lease ------------------------------------------------------------------------------


async def test_pinging_renews_lease_past_its_first_expiry(nodes, devices):
    a, _ = nodes
    device, real = await devices("desk-renew")
    await real.connect(a.ws)
    await ready(device)
    first = (await database_sync_to_async(row)(device.pk)).connection_lease_expires_at
    # Wait until the database clock is past the first lease: still live, renewed by the pings.
    await eventually(
        lambda: Device.objects.filter(
            pk=device.pk,
            connection_lease_expires_at__gt=first + (first - first).__class__(seconds=3),
        ).exists(),
        15,
        "lease renewed",
        database=True,
    )
    assert not real.closed.is_set()


async def test_silent_device_loses_lease_and_row_and_claims_answer_not_connected(
    nodes, devices, http
):
    a, b = nodes
    device, real = await devices("desk-silent", ping=False)
    await real.connect(a.ws)
    await ready(device)
    assert await real.wait_closed(3 * HEARTBEAT + 5) == 4408
    d = await database_sync_to_async(row)(device.pk)
    assert d.connection_id is None
    refused = await http.claim(b, real.token)
    assert refused.status_code == 409 and refused.json()["error"] == "not_connected"


# -- replacement ----------------------------------------------------------------------------


async def replaced(device, first: RealDevice, on: Node, by_one_on: Node) -> RealDevice:
    """``first`` connects to ``on`` and is ready, then a second socket of the device connects
    to ``by_one_on``, and the first is closed 4000. The second is open (the caller closes it)."""
    await first.connect(on.ws)
    await ready(device)
    second = RealDevice(first.token)
    try:
        await second.connect(by_one_on.ws)
        assert await first.wait_closed(5) == 4000
    except BaseException:
        await second.close()
        raise
    return second


async def test_new_connection_on_b_replaces_one_on_a(nodes, devices):
    a, b = nodes
    device, first = await devices("desk-replace")
    second = await replaced(device, first, on=a, by_one_on=b)
    try:
        d = await database_sync_to_async(row)(device.pk)
        assert d.connection_node == "node-b"
        assert str(d.connection_id) == second.hello["connection_id"]
    finally:
        await second.close()


async def test_only_a_connection_that_displaces_another_publishes_replaced(nodes, devices, redis):
    """A device's first socket has no older one to close: nothing of it goes through Redis. The
    first ``replaced`` on the device's group is the second socket's."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from qprint.realtime.bus import device_group

    a, _ = nodes
    device, first = await devices("desk-quiet")
    listener = RedisPubSubChannelLayer(hosts=[redis.url])
    channel = await listener.new_channel()
    try:
        await listener.group_add(device_group(device.pk), channel)
        # Subscribed once a message sent to the group comes back.
        await listener.group_send(device_group(device.pk), {"type": "test.subscribed"})
        assert (await asyncio.wait_for(listener.receive(channel), 5))["type"] == "test.subscribed"
        second = await replaced(device, first, on=a, by_one_on=a)
        try:
            message = await asyncio.wait_for(listener.receive(channel), 5)
        finally:
            await second.close()
    finally:
        await listener.flush()
    assert message == {
        "type": "qprint.replaced",
        "device_id": device.pk,
        "connection_id": second.hello["connection_id"],
    }


# -- upgrade answers ------------------------------------------------------------------------------


async def test_upgrade_answers_under_daphne(nodes, devices):
    a, _ = nodes
    device, real = await devices("desk-upgrade")
    assert await upgrade_status(a.ws, real.token) == 101
    assert await upgrade_status(a.ws, real.token, subprotocols=()) == 403
    assert await upgrade_status(a.ws, "wrong-token") == 403
    assert await upgrade_status(a.ws, None) == 403
    await database_sync_to_async(api.disable_device)(device.pk)
    assert await upgrade_status(a.ws, real.token) == 403


@pytest.fixture
def node_without_database(redis):
    dead_db = f"postgres://postgres@127.0.0.1:{free_port()}/nowhere"
    node = Node("node-nodb", node_env(dead_db, redis.url, "node-nodb")).start()
    yield node
    node.stop()


async def test_node_whose_database_is_unreachable_fails_handshake_with_500_not_403(
    node_without_database, devices
):
    _, real = await devices("desk-nodb")
    assert await upgrade_status(node_without_database.ws, real.token) == 500
    # One line for the refusal, no traceback; the database's own error, not the pool's timeout.
    await eventually(
        lambda: "database_unreachable" in node_without_database.log(), 10, "the cause logged"
    )
    log = node_without_database.log()
    assert "socket_refused status=503 code=unavailable" in log
    assert "Traceback" not in log and "Exception inside application" not in log
    assert "database_unreachable alias=default error=connection failed" in log, log


async def test_a_socket_url_without_a_route_is_one_log_line_not_a_traceback(nodes, devices):
    a, _ = nodes
    _, real = await devices("desk-noroute")
    assert await upgrade_status(f"ws://127.0.0.1:{a.port}/elsewhere/ws/device/", real.token) == 500
    await eventually(lambda: "socket_no_route" in a.log(), 10, "the missing route logged")
    assert "No route found for path 'elsewhere/ws/device/'" in a.log()
    assert "Exception inside application: No route found" not in a.log()


# -- drain ----------------------------------------------------------------------------------------


@pytest.fixture
def node_c(redis, database_url):
    node = Node("node-c", node_env(database_url, redis.url, "node-c")).start()
    yield node
    node.stop()


async def test_draining_node_hands_devices_to_other_node_with_no_job_lost(
    nodes, node_c, devices, http
):
    from qcluster.models import ClusterNode

    _, b = nodes
    c = node_c
    await database_sync_to_async(ClusterNode.objects.create)(node_id="node-c", status="UP")
    pairs = [await devices(f"desk-drain-{i}") for i in range(4)]
    for device, real in pairs:
        await real.connect(c.ws)
        await ready(device)
    jobs = [(await http.submit(b, d.name, f"before-{d.name}")).json()["id"] for d, _ in pairs]
    await database_sync_to_async(
        lambda: ClusterNode.objects.filter(node_id="node-c").update(status="DRAINING")
    )()
    for _, real in pairs:
        assert await real.wait_closed(15) == 4003
    assert await upgrade_status(c.ws, pairs[0][1].token) == 500
    await eventually(lambda: "code=draining" in c.log(), 10, "the drain refusal logged")
    assert "socket_refused status=503 code=draining" in c.log()
    assert "Exception inside application: draining" not in c.log()  # one line, no traceback
    # The devices come back through the other node; every job is claimed and printed there.
    for device, old in pairs:
        real = RealDevice(old.token)
        await real.connect(b.ws)
        await ready(device)
        jobs.append((await http.submit(c, device.name, f"during-{device.name}")).json()["id"])
        for _ in range(2):
            claimed = await http.claim(b, real.token)
            assert claimed.status_code == 200, claimed.text
            assignment = claimed.json()
            claim_id = assignment["claim_id"]
            for event in ("RECEIVED", "PRINTED"):
                answer = await http.event(b, real.token, assignment["job_id"], claim_id, event)
                assert answer.status_code == 201, answer.text
        await real.close()
    statuses = await database_sync_to_async(
        lambda: sorted(PrintJob.objects.filter(pk__in=jobs).values_list("status", flat=True))
    )()
    assert statuses == ["PRINTED"] * 8


# -- concurrency of the socket path ----------------------------------------------------------


async def test_200_devices_are_served_while_the_shared_sync_thread_is_blocked(nodes, devices, http):
    """The socket path has threads of its own: with Django's one sync thread of node A stuck in
    a claim waiting on a row lock, 200 devices still connect, report state and ping on A."""
    from django.db import connection as db

    a, _ = nodes
    blocker, blocker_socket = await devices("desk-blocker")
    await blocker_socket.connect(a.ws)
    await ready(blocker)
    pairs = [await devices(f"desk-many-{i}") for i in range(200)]

    lock_taken = asyncio.Event()
    release = asyncio.Event()

    def hold_row_lock():
        from django.db import transaction

        with transaction.atomic():
            Device.objects.select_for_update().get(pk=blocker.pk)
            loop.call_soon_threadsafe(lock_taken.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result(60)
        db.close()

    loop = asyncio.get_running_loop()
    holder = loop.run_in_executor(None, hold_row_lock)
    await lock_taken.wait()
    stuck_claim = asyncio.ensure_future(http.claim(a, blocker_socket.token))
    try:
        await asyncio.sleep(0.2)
        assert not stuck_claim.done()
        await asyncio.gather(*(real.connect(a.ws) for _, real in pairs))
        ids = [d.pk for d, _ in pairs]
        await eventually(
            lambda: Device.objects.filter(pk__in=ids, connection_ready=True).count() == 200,
            30,
            "200 devices ready while the sync thread is blocked",
            database=True,
        )
        assert not stuck_claim.done()
    finally:
        release.set()
        await holder
    assert (await stuck_claim).status_code == 204


async def test_device_of_a_dead_node_takes_the_row_elsewhere_at_once(nodes, node_c, devices, http):
    _, b = nodes
    device, first = await devices("desk-orphan")
    await first.connect(node_c.ws)
    await ready(device)
    node_c.process.kill()  # the node dies without a word; its lease is still live
    second = RealDevice(first.token)
    try:
        await second.connect(b.ws)
        await ready(device)
        d = await database_sync_to_async(row)(device.pk)
        assert d.connection_node == "node-b"
        # The claim gate opens at once, without waiting for the dead node's lease.
        assert (await http.claim(b, second.token)).status_code == 204
    finally:
        await second.close()
