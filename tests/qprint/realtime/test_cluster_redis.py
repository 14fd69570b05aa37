"""Two real Daphne nodes (A, B) on PostgreSQL and a Redis of the test's own, with real devices,
while that Redis goes down and comes back: nothing depends on it for correctness (a replacement,
a job, the sockets themselves), and a restart reconciles every connection.

The nodes and Redis start once per module; each test makes its own devices. Heartbeats are 1 s.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from channels.db import database_sync_to_async

from tests.qprint.realtime.cluster import (
    RealDevice,
    bus_is_up,
    ready,
    row,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEARTBEAT = 1.0


async def test_replacement_with_redis_down_closes_old_socket_on_its_next_frame(
    nodes, devices, redis_restored
):
    a, b = nodes
    device, first = await devices("desk-replace-down")
    await first.connect(a.ws)
    await ready(device)
    redis_restored.stop()
    second = RealDevice(first.token)
    try:
        await second.connect(b.ws)
        assert await first.wait_closed(3 * HEARTBEAT + 3) == 4000
        d = await database_sync_to_async(row)(device.pk)
        assert str(d.connection_id) == second.hello["connection_id"]
        assert not second.closed.is_set()
    finally:
        await second.close()


# -- Redis outages ------------------------------------------------------------------------------


async def test_job_submitted_on_a_with_redis_down_is_found_on_next_heartbeat(
    nodes, devices, http, redis_restored
):
    a, b = nodes
    device, real = await devices("desk-nobus")
    await real.connect(b.ws)
    await ready(device)
    redis_restored.stop()
    submitted = await http.submit(a, "desk-nobus")
    assert submitted.status_code == 201
    started = time.monotonic()
    await real.frame("wake", timeout=10)
    # The bound: one heartbeat (the next ping), plus the time to answer it.
    assert time.monotonic() - started <= HEARTBEAT + 1.5
    assert (await http.claim(a, real.token)).json()["job_id"] == submitted.json()["id"]


async def test_redis_down_longer_than_ten_seconds_closes_no_socket(
    nodes, devices, http, redis_restored
):
    a, b = nodes
    reals = []
    for i, node in enumerate((a, b, a, b)):
        device, real = await devices(f"desk-outage-{i}")
        await real.connect(node.ws)
        await ready(device)
        reals.append((device, real))
    redis_restored.stop()
    await asyncio.sleep(11)  # the outage itself: what is tested is that nothing happens
    assert [r.close_code for _, r in reals] == [None] * 4
    assert not any(r.closed.is_set() for _, r in reals)
    redis_restored.start()
    # Wakeups flow again without reconnecting: a job on A wakes each device.
    for device, real in reals:
        assert (await http.submit(a, device.name)).status_code == 201
        await real.frame("wake")
    assert not any(r.closed.is_set() for _, r in reals)


async def test_redis_restart_reconciles_every_connection_on_each_node(
    nodes, devices, http, redis_restored
):
    a, b = nodes
    reals = []
    for i, node in enumerate((a, b)):
        device, real = await devices(f"desk-reconcile-{i}")
        await real.connect(node.ws)
        await ready(device)
        reals.append((device, real))
    # A previous outage may not be over for the nodes yet: start from a bus they see up.
    for node in (a, b):
        await eventually(
            lambda node=node: bus_is_up(node), 30, f"{node.node_id} bus up", database=True
        )
    mark = {n.node_id: len(n.log()) for n in (a, b)}
    redis_restored.stop()
    await eventually(
        lambda: all("bus_down" in n.log()[mark[n.node_id] :] for n in (a, b)),
        30,
        "bus_down",
        database=True,
    )
    redis_restored.start()
    await eventually(
        lambda: all("bus_up sockets=" in n.log()[mark[n.node_id] :] for n in (a, b)),
        30,
        "bus_up on both nodes",
        database=True,
    )
    # After the reconcile, wakeups cross the bus again.
    for device, real in reals:
        assert (await http.submit(b, device.name)).status_code == 201
        await real.frame("wake")
