"""Idle cost and capacity of one node (benchmark 4 of docs/PERFORMANCE.md).

One Daphne node (PostgreSQL, a Redis of the bench's own, the default 20 s heartbeat) and
``IDLE`` devices connecting in batches of 50 from this process, then pinging on time:

- **connects per second**: devices connected and ready / time taken; the node's CPU per connect
  and its share of a core meanwhile (a node near a whole core is what bounds the connects), and
  this process's (the devices') CPU per connect;
- **statements per connect**: the statements run on the database while they connect
  (``pg_stat_statements`` on the private PostgreSQL, less this process's own polls) per device;
- **RSS per connection**: the slope of the node's RSS against the number of open sockets, from 0
  to ``IDLE`` (least squares over the batches);
- **CPU of the node** over two heartbeats of idle sockets, as a share of one core;
- **statements per ping**: the statements run on the database over those two heartbeats
  (``pg_stat_statements`` on the private PostgreSQL; only this node uses the benchmark's
  database, and this process reads nothing from it meanwhile) per ping sent, and the statements
  that ran, by calls; the node's own background statements (the drain watch every 2 s) are in
  the figure;
- **churn**: ``CHURN_ROUNDS`` times (``BENCH_CHURN_ROUNDS``, 10), a different fifth of the
  devices closes its socket and connects again (what devices behind a flaky network do): the
  node's CPU per reconnect, and how much its RSS grew (the closed sockets' objects hold
  reference cycles, which only the garbage collector frees: what it leaves uncollected shows
  here);
- **full collections** of the node's garbage collector in each phase (connecting, the ping
  window, the churn: how many, the longest pause, their CPU; ``tests/bench/gc_hook``): each one
  walks every object of the node's sockets and stops all of them meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import websockets
from channels.db import database_sync_to_async
from django.db import connection

from tests.bench.common import make_devices
from tests.bench.conftest import size
from tests.bench.deployed import gc_pauses
from tests.bench.machine import process_cpu_seconds, process_rss_bytes
from tests.bench.postgres import PrivatePostgres
from tests.bench.profile import PROFILE_DIR, profiler
from tests.processes import RedisServer
from tests.qprint.realtime.cluster import RealDevice, database_url_of

pytestmark = [pytest.mark.services, pytest.mark.slow]

IDLE = int(os.environ.get("BENCH_IDLE", 0)) or size(5000, 1000)
HEARTBEAT = 20
CHURN_ROUNDS = int(os.environ.get("BENCH_CHURN_ROUNDS", 0)) or 10
BATCH = 50  # more at once overflows the listen backlog: a refused connect, not a cost
WINDOW = 2 * HEARTBEAT


class CountingDevice(RealDevice):
    pings = 0

    async def send(self, frame):
        if isinstance(frame, dict) and frame.get("type") == "ping":
            CountingDevice.pings += 1
        await super().send(frame)


@pytest.fixture
def node(transactional_db):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    from tests.bench.deployed import DeployedNode, deployed_env

    a = DeployedNode("bench-a", deployed_env(url, redis.url, "bench-a"))  # as deployed
    try:
        a.start()
        yield a
    finally:
        a.stop()
        redis.stop()


def ready_count() -> int:
    from qprint.models import Device

    return Device.objects.filter(connection_ready=True).count()


async def connect(url: str, token: str) -> CountingDevice:
    """Connect as an agent does: a refused attempt is tried again shortly (three times)."""
    for attempt in range(3):
        try:
            return await CountingDevice(token).connect(url)
        except (OSError, websockets.exceptions.WebSocketException):
            if attempt == 2:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


def slope(points: list[tuple[int, int]]) -> float:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


async def test_idle_devices(node, bench_result):
    made = await database_sync_to_async(make_devices)(IDLE)
    pid = node.process.pid
    await asyncio.sleep(2)
    pg = PrivatePostgres.from_env()
    if pg is not None:
        await asyncio.to_thread(pg.reset_statements)
    rss = [(0, process_rss_bytes(pid))]
    devices: list[RealDevice] = []
    spy = profiler(pid, "idle-connects") if PROFILE_DIR else None
    started, node_cpu, own_cpu = time.monotonic(), process_cpu_seconds(pid), time.process_time()
    connecting_since = time.time()
    for start in range(0, IDLE, BATCH):
        batch = made[start : start + BATCH]
        devices += await asyncio.gather(*(connect(node.ws, t) for _, _, t in batch))
        rss.append((len(devices), process_rss_bytes(pid)))
    polls = 1
    while await database_sync_to_async(ready_count)() < IDLE:
        polls += 1
        await asyncio.sleep(0.1)
    connect_seconds = time.monotonic() - started
    node_cpu, own_cpu = process_cpu_seconds(pid) - node_cpu, time.process_time() - own_cpu
    connecting_gc = gc_pauses({pid}, connecting_since, time.time())
    if spy is not None:
        spy.stop()
    statements = None
    if pg is not None:  # less this process's own: the readiness polls
        counted = await asyncio.to_thread(pg.statements, connection.settings_dict["NAME"], 1, 1)
        statements = round((counted[-1]["calls_per_job"] - polls) / IDLE, 2)
    await asyncio.sleep(5)  # settled
    spy = profiler(pid, "idle-pings") if PROFILE_DIR else None

    if pg is not None:
        await asyncio.to_thread(pg.reset_statements)
    cpu0, pings0, t0 = process_cpu_seconds(pid), CountingDevice.pings, time.monotonic()
    window_since = time.time()
    await asyncio.sleep(WINDOW)
    cpu1, pings1, t1 = process_cpu_seconds(pid), CountingDevice.pings, time.monotonic()
    window_gc = gc_pauses({pid}, window_since, time.time())
    ran = None
    if pg is not None:  # pg_stat_statements counts a statement when it ends: nothing arrives late
        ran = await asyncio.to_thread(pg.statements, connection.settings_dict["NAME"], 1, 5)
    if spy is not None:
        spy.stop()
    pings = pings1 - pings0
    churn = await churned(node, made, devices)
    figures = {
        "devices": IDLE,
        "connects_per_s": round(IDLE / connect_seconds, 1),
        "node_cpu_ms_per_connect": round(1000 * node_cpu / IDLE, 2),
        "node_cpu_percent_of_core_connecting": round(100 * node_cpu / connect_seconds, 1),
        "devices_cpu_ms_per_connect": round(1000 * own_cpu / IDLE, 2),
        "statements_per_connect": statements,
        "rss_per_connection_kib": round(slope(rss) / 1024, 1),
        "rss_mib": [[n, round(b / 2**20, 1)] for n, b in rss],
        "node_cpu_percent_of_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
        "node_cpu_ms_per_ping": round(1000 * (cpu1 - cpu0) / pings, 3) if pings else None,
        "pings": pings,
        "statements_per_ping": (
            round(ran[-1]["calls_per_job"] / pings, 3) if ran is not None and pings else None
        ),
        "ping_window_statements": (
            [{"statement": r["statement"], "calls": r["calls_per_job"]} for r in ran[:-1]]
            if ran is not None
            else None
        ),
        "window_s": WINDOW,
        "heartbeat_s": HEARTBEAT,
        **churn,
        "full_collections_connecting": connecting_gc,
        "full_collections_pinging": window_gc,
    }
    bench_result["figures"] = figures
    print({k: v for k, v in figures.items() if k != "rss_mib"})
    await asyncio.gather(*(d.close() for d in devices))


async def churned(node, made: list, devices: list[RealDevice]) -> dict:
    """``CHURN_ROUNDS`` rounds of a fifth of the devices closing and connecting again, each round
    another fifth (``devices`` is updated with the new sockets): the node's CPU per reconnect, its
    RSS growth and its full collections meanwhile."""
    pid = node.process.pid
    fifth = len(devices) // 5
    rss0, cpu0, since = process_rss_bytes(pid), process_cpu_seconds(pid), time.time()
    for round_ in range(CHURN_ROUNDS):
        start = (round_ % 5) * fifth
        for at in range(start, start + fifth, BATCH):
            await asyncio.gather(*(d.close() for d in devices[at : at + BATCH]))
        while await database_sync_to_async(ready_count)() > len(devices) - fifth:
            await asyncio.sleep(0.1)  # the node has cleared the closed sockets' rows
        for at in range(start, start + fifth, BATCH):
            tokens = [t for _, _, t in made[at : at + BATCH]]
            devices[at : at + BATCH] = await asyncio.gather(*(connect(node.ws, t) for t in tokens))
        while await database_sync_to_async(ready_count)() < len(devices):
            await asyncio.sleep(0.1)
    reconnects = CHURN_ROUNDS * fifth
    return {
        "churn_reconnects": reconnects,
        "node_cpu_ms_per_reconnect": round(
            1000 * (process_cpu_seconds(pid) - cpu0) / reconnects, 2
        ),
        "churn_rss_growth_mib": round((process_rss_bytes(pid) - rss0) / 2**20, 1),
        "full_collections_churn": gc_pauses({pid}, since, time.time()),
    }
