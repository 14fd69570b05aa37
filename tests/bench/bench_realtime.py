"""Benchmarks of the device socket over two real Daphne nodes, PostgreSQL and a Redis of its own.

Run explicitly (not collected by the suite):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 \\
        BENCH_SOCKETS=1000 .venv/bin/python -m pytest tests/bench/bench_realtime.py -s -q

``BENCH_LAYER=core`` runs the nodes and the publisher on the core ``RedisChannelLayer`` instead
of the pub/sub layer. Results and machine notes: docs/PERFORMANCE.md.

- **wake latency**: from a third process (this one), ``group_send`` of a ``qprint.wake`` to one
  device's group, to the ``wake`` frame at that device's socket. The path is the real one: the
  layer, the node's bus, the socket reading its row (one statement), the frame. Each device has a
  job queued, so the row says "claim now"; the heartbeat is 30 s so pings do not interfere.
- **the floor**: in the same run, alternating with the samples above, a ``group_send`` to a bare
  Channels consumer (``tests.bench.bare_asgi``) under another Daphne on the same Redis.
- **Redis stopped** (second test): two nodes at a 2 s heartbeat, Redis stopped; a job is queued
  for each of 20 devices and the ``wake`` comes from the answer to the device's next ``ping``:
  measured from the commit, against one heartbeat interval.
- **ping throughput**: every socket sends a ``ping`` at the same instant; the time until every
  row's ``last_seen_at`` moved (polled from here) gives pings served per second per round.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import time

import pytest
import websockets
from channels.db import database_sync_to_async
from django.db import connection

from qprint import api
from qprint.domain import credentials
from qprint.models import Device, PrintDocument, PrintJob
from tests.bench.common import BareNode, latency_figures, percentile
from tests.bench.conftest import size
from tests.processes import RedisServer
from tests.qprint.realtime.cluster import Node, RealDevice, database_url_of, node_env

pytestmark = [pytest.mark.services, pytest.mark.slow]

SOCKETS = int(os.environ.get("BENCH_SOCKETS", 0)) or size(1000, 300)
SAMPLES = int(os.environ.get("BENCH_SAMPLES", 0)) or size(1000, 300)
FLOOR_SOCKETS = 100
LAYER = os.environ.get("BENCH_LAYER", "pubsub")


def make_devices(n: int) -> list[tuple[int, str]]:
    made = []
    for i in range(n):
        token = credentials.new_secret()
        device = Device.objects.create(
            tenant="bench", name=f"bench-{i}", token_hash=credentials.hash_secret(token)
        )
        made.append((device.pk, token))
        api.submit_job("bench", device, b"%PDF-1.4 bench", "application/pdf")
    return made


@pytest.fixture
def cluster(transactional_db):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    extra = {"QPRINT_HEARTBEAT_SECONDS": "30", "LOG_LEVEL": "WARNING"}
    if LAYER == "core":
        extra["QPRINT_CHANNEL_LAYER"] = "core"
    a = Node("bench-a", node_env(url, redis.url, "bench-a", **extra))
    b = Node("bench-b", node_env(url, redis.url, "bench-b", **extra))
    bare = BareNode(node_env(url, redis.url, "bench-bare", **extra))
    try:
        a.start()
        b.start()
        bare.start()
        yield redis, a, b, bare
    finally:
        a.stop()
        b.stop()
        bare.stop()
        redis.stop()


def publisher_layer(redis_url: str):
    if LAYER == "core":
        from channels_redis.core import RedisChannelLayer

        return RedisChannelLayer(hosts=[{"address": redis_url, "socket_timeout": None}])
    from channels_redis.pubsub import RedisPubSubChannelLayer

    return RedisPubSubChannelLayer(hosts=[{"address": redis_url}])


async def test_wake_latency_and_ping_throughput(cluster, bench_result):
    redis, a, b, bare = cluster
    made = await database_sync_to_async(make_devices)(SOCKETS)
    reals: dict[int, RealDevice] = {}
    started = time.monotonic()
    for start in range(0, len(made), 100):
        batch = made[start : start + 100]
        connected = await asyncio.gather(
            *(
                RealDevice(token).connect((a if i % 2 else b).ws)
                for i, (_, token) in enumerate(batch, start)
            )
        )
        reals.update(
            {device_id: real for (device_id, _), real in zip(batch, connected, strict=True)}
        )
    # Each device is woken when it reports its state (a job is queued), and again when its node's
    # bus subscribes it: wait for both, then for a quiet second, and start from empty queues.
    await asyncio.gather(*(real.frame("wake", 60) for real in reals.values()))
    print(f"\n{SOCKETS} sockets connected and ready in {time.monotonic() - started:.1f}s")
    while True:
        before = sum(len(real.seen) for real in reals.values())
        await asyncio.sleep(1)
        if sum(len(real.seen) for real in reals.values()) == before:
            break
    for real in reals.values():
        while not real.frames.empty():
            real.frames.get_nowait()

    floors = []
    for n in range(FLOOR_SOCKETS):
        ws = await websockets.connect(bare.ws(n), ping_interval=None)
        floors.append(ws)
    await asyncio.sleep(1)  # the bare consumers joined their groups

    layer = publisher_layer(redis.url)
    latencies: list[float] = []
    floor: list[float] = []
    ids = list(reals)
    for _ in range(SAMPLES):
        device_id = random.choice(ids)
        message = {"type": "qprint.wake", "tenant": "bench", "device_id": device_id}
        while not reals[device_id].frames.empty():  # a wake its own ping brought (30 s)
            reals[device_id].frames.get_nowait()
        t0 = time.perf_counter()
        await layer.group_send(f"qprint.device.{device_id}", message)
        await reals[device_id].frame("wake", 10)
        latencies.append((time.perf_counter() - t0) * 1000)
        n = random.randrange(FLOOR_SOCKETS)
        t0 = time.perf_counter()
        await layer.group_send(f"bare.{n}", {"type": "bare.wake"})
        await asyncio.wait_for(floors[n].recv(), 10)
        floor.append((time.perf_counter() - t0) * 1000)
    for ws in floors:
        await ws.close()
    print(
        f"wake latency ({LAYER} layer, {SOCKETS} sockets on 2 nodes, {SAMPLES} samples): "
        f"p50 {statistics.median(latencies):.2f} ms, p99 {percentile(latencies, 99):.2f} ms, "
        f"max {max(latencies):.2f} ms; bare Channels floor p50 {statistics.median(floor):.2f} ms, "
        f"p99 {percentile(floor, 99):.2f} ms"
    )
    bench_result["figures"]["wake"] = latency_figures(latencies)
    bench_result["figures"]["floor"] = latency_figures(floor)
    bench_result["figures"]["wake_p99_over_floor_p99"] = round(
        percentile(latencies, 99) / percentile(floor, 99), 2
    )
    bench_result["sizes"] = {"sockets": SOCKETS, "samples": SAMPLES, "layer": LAYER, "nodes": 2}

    def seen_since(mark) -> int:
        return Device.objects.filter(tenant="bench", last_seen_at__gt=mark).count()

    def db_now():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0]

    rates = []
    for _ in range(3):
        mark = await database_sync_to_async(db_now)()
        t0 = time.perf_counter()
        await asyncio.gather(*(real.send({"type": "ping"}) for real in reals.values()))
        while await database_sync_to_async(seen_since)(mark) < SOCKETS:
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - t0
        rates.append(SOCKETS / elapsed)
    print(
        f"ping throughput ({SOCKETS} simultaneous pings over 2 nodes): "
        + ", ".join(f"{r:.0f}/s" for r in rates)
    )
    bench_result["figures"]["pings_per_s"] = [round(r) for r in rates]
    for real in reals.values():
        await real.close()
    await database_sync_to_async(
        lambda: (PrintDocument.objects.all().delete(), PrintJob.objects.all().delete())
    )()


@pytest.fixture
def outage_cluster(transactional_db):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    extra = {"QPRINT_HEARTBEAT_SECONDS": str(OUTAGE_HEARTBEAT), "LOG_LEVEL": "WARNING"}
    a = Node("bench-a", node_env(url, redis.url, "bench-a", **extra))
    b = Node("bench-b", node_env(url, redis.url, "bench-b", **extra))
    try:
        a.start()
        b.start()
        yield redis, a, b
    finally:
        a.stop()
        b.stop()
        redis.stop()


OUTAGE_HEARTBEAT = 2
OUTAGE_DEVICES = 20


async def test_wake_with_redis_stopped(outage_cluster, bench_result):
    redis, a, b = outage_cluster

    def devices():
        made = []
        for i in range(OUTAGE_DEVICES):
            token = credentials.new_secret()
            device = Device.objects.create(
                tenant="bench", name=f"outage-{i}", token_hash=credentials.hash_secret(token)
            )
            made.append((device, token))
        return made

    made = await database_sync_to_async(devices)()
    reals = [
        await RealDevice(token).connect((a if i % 2 else b).ws) for i, (_, token) in enumerate(made)
    ]
    await asyncio.sleep(2 * OUTAGE_HEARTBEAT)  # ready, subscribed, quiet
    redis.stop()
    await asyncio.sleep(2 * OUTAGE_HEARTBEAT)  # the nodes noticed
    for real in reals:
        while not real.frames.empty():
            real.frames.get_nowait()

    committed: dict[int, float] = {}

    def queue(i: int) -> None:
        device, _ = made[i]
        api.submit_job("bench", device, b"%PDF-1.4 bench", "application/pdf")
        committed[i] = time.perf_counter()

    async def woken(i: int) -> float:
        await reals[i].frame("wake", 5 * OUTAGE_HEARTBEAT)
        return (time.perf_counter() - committed[i]) * 1000

    waits = [asyncio.ensure_future(woken(i)) for i in range(OUTAGE_DEVICES)]
    for i in range(OUTAGE_DEVICES):
        await database_sync_to_async(queue)(i)
    delays = list(await asyncio.gather(*waits))
    figures = latency_figures(delays)
    figures["interval_ms"] = OUTAGE_HEARTBEAT * 1000
    bench_result["figures"]["wake_redis_stopped"] = figures
    bench_result["sizes"] = {"devices": OUTAGE_DEVICES, "heartbeat_s": OUTAGE_HEARTBEAT}
    print(f"wake with Redis stopped (heartbeat {OUTAGE_HEARTBEAT} s): {figures}")
    for real in reals:
        await real.close()
