"""CloudPRNT polls: what one node serves (docs/CLOUDPRNT.md, "Limits"; docs/PERFORMANCE.md).

One Daphne node of the example project (PostgreSQL, a Redis of the bench's own) and ``PRINTERS``
simulated Star printers in this process (one ``httpx.AsyncClient``), each polling with HTTP Basic
as a printer does, with nothing to print:

- **steady**: every printer polls every ``INTERVAL`` seconds (spread at random over the interval,
  as printers switched on at different times are), for ``WINDOW`` seconds: polls answered per
  second, their latency, the node's CPU per poll, and the statements the database committed per
  poll (``pg_stat_database.xact_commit``: only this node uses the bench's database; its own
  background statements are in the figure);
- **burst**: every printer polls at the same instant, again and again (each printer polls again as
  soon as it is answered) for ``BURST`` seconds: the most polls per second the node serves, and
  how long the slowest printer of a burst waited.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db import connection

from tests.bench.common import latency_figures
from tests.bench.conftest import size
from tests.bench.machine import process_cpu_seconds
from tests.processes import RedisServer
from tests.qprint.realtime.cluster import Node, database_url_of, node_env

pytestmark = [pytest.mark.services, pytest.mark.slow]

PRINTERS = int(os.environ.get("BENCH_CLOUDPRNT_PRINTERS", 0)) or 200
INTERVAL = 5.0
WINDOW = size(60, 20)
BURST = size(20, 8)


@pytest.fixture
def node(transactional_db):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    env = node_env(url, redis.url, "bench-cloudprnt", LOG_LEVEL="WARNING")
    a = Node("bench-cloudprnt", env)
    try:
        a.start()
        yield a
    finally:
        a.stop()
        redis.stop()


def make_printers(n: int) -> list[tuple[str, str]]:
    from qprint.domain import credentials
    from qprint.models import Device, DeviceKind

    tokens = [credentials.new_secret() for _ in range(n)]
    Device.objects.bulk_create(
        [
            Device(
                tenant="bench",
                name=f"printer-{i}",
                kind=DeviceKind.CLOUDPRNT,
                token_hash=credentials.hash_secret(t),
            )
            for i, t in enumerate(tokens)
        ]
    )
    return [(f"printer-{i}", t) for i, t in enumerate(tokens)]


def committed() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return cursor.fetchone()[0]


class Printer:
    def __init__(self, client: httpx.AsyncClient, url: str, name: str, token: str, n: int):
        self.client, self.url = client, url
        basic = base64.b64encode(f"{name}:{token}".encode()).decode()
        self.headers = {"Authorization": f"Basic {basic}", "Content-Type": "application/json"}
        self.body = json.dumps(
            {
                "status": "23 6 0 0 0 0 0 0 0 ",
                "printerMAC": f"00:11:62:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}",
                "statusCode": "200%20OK",
                "printingInProgress": False,
                "clientAction": [
                    {"request": "ClientType", "result": "Star mC-Print3"},
                    {"request": "ClientVersion", "result": "5.1"},
                ],
            }
        ).encode()

    async def poll(self) -> float:
        started = time.perf_counter()
        response = await self.client.post(self.url, content=self.body, headers=self.headers)
        assert response.status_code == 200, response.text[:200]
        assert response.json()["jobReady"] is False
        return (time.perf_counter() - started) * 1000


async def steady(printers: list[Printer], seconds: float, latencies: list[float]) -> None:
    deadline = time.monotonic() + seconds

    async def run(printer: Printer) -> None:
        await asyncio.sleep(random.uniform(0, INTERVAL))
        while time.monotonic() < deadline:
            began = time.monotonic()
            latencies.append(await printer.poll())
            await asyncio.sleep(max(0.0, INTERVAL - (time.monotonic() - began)))

    await asyncio.gather(*(run(p) for p in printers))


async def test_cloudprnt_polls(node, bench_result):
    made = await database_sync_to_async(make_printers)(PRINTERS)
    pid = node.process.pid
    url = node.http + "/qprint/cloudprnt/"
    limits = httpx.Limits(max_connections=PRINTERS, max_keepalive_connections=PRINTERS)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        printers = [Printer(client, url, name, t, n) for n, (name, t) in enumerate(made)]
        # Every printer's first poll takes its row and describes it (not the steady cost).
        for start in range(0, PRINTERS, 50):
            await asyncio.gather(*(p.poll() for p in printers[start : start + 50]))
        await asyncio.sleep(2)

        warm: list[float] = []
        await steady(printers, INTERVAL, warm)  # one interval to settle the spread
        latencies: list[float] = []
        cpu0, t0 = process_cpu_seconds(pid), time.monotonic()
        xact0 = await database_sync_to_async(committed)()
        await steady(printers, WINDOW, latencies)
        cpu1, t1 = process_cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(2)  # the statistics reach pg_stat_database a moment later
        xact1 = await database_sync_to_async(committed)()
        polls = len(latencies)

        burst_latencies: list[float] = []
        slowest: list[float] = []
        cpu2, t2, own2 = process_cpu_seconds(pid), time.monotonic(), time.process_time()
        deadline = time.monotonic() + BURST
        while time.monotonic() < deadline:
            began = time.perf_counter()
            burst_latencies += await asyncio.gather(*(p.poll() for p in printers))
            slowest.append((time.perf_counter() - began) * 1000)
        cpu3, t3, own3 = process_cpu_seconds(pid), time.monotonic(), time.process_time()

        # One printer alone, poll after poll: the latency of a poll without queueing.
        alone: list[float] = [await printers[0].poll() for _ in range(size(500, 200))]

    figures = {
        "printers": PRINTERS,
        "interval_s": INTERVAL,
        "steady_polls": polls,
        "steady_polls_per_s": round(polls / (t1 - t0), 1),
        "steady_latency": latency_figures(latencies),
        "steady_node_cpu_percent_of_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
        "node_cpu_ms_per_poll": round(1000 * (cpu1 - cpu0) / polls, 2) if polls else None,
        # The statement reading xact_commit is this process's own, and is not counted.
        "statements_per_poll": round((xact1 - xact0 - 1) / polls, 2) if polls else None,
        "burst_polls_per_s": round(len(burst_latencies) / (t3 - t2), 1),
        "burst_latency": latency_figures(burst_latencies),
        "burst_all_answered_ms": latency_figures(slowest),
        "burst_node_cpu_ms_per_poll": round(1000 * (cpu3 - cpu2) / len(burst_latencies), 2),
        "burst_node_cpu_percent_of_core": round(100 * (cpu3 - cpu2) / (t3 - t2), 1),
        # The simulated printers' own process (httpx): when it is the bottleneck, say so.
        "burst_client_cpu_percent_of_core": round(100 * (own3 - own2) / (t3 - t2), 1),
        "alone_latency": latency_figures(alone),
        "window_s": WINDOW,
    }
    bench_result["figures"] = figures
    print(figures)
