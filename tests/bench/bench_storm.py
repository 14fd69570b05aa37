"""A reconnect storm (benchmark 5 of docs/PERFORMANCE.md): a node with many devices dies, its
devices move to the other nodes.

Three nodes as deployed (``deployed.start_nodes``' environment; the 20 s heartbeat), a Redis of
the bench's own. ``STORM`` devices (clients in this process, ``websockets``) connect to node A, 50
at a time, and ping on time. Then node A is SIGKILLed: each device, seeing its socket drop,
reconnects as the agent does (a jittered 0.25-0.5 s first backoff, then doubling up to 5 s),
alternately to B and C, at most 50 handshakes in flight. Measured:

- seconds from the kill until every device is ready again on B or C;
- failed handshakes (refused, timed out, or 5xx) during the move;
- statements per reconnect (``pg_stat_statements`` on the private PostgreSQL: calls during the
  move / devices moved), and the statements that make them up;
- ``bus_down`` lines in B's and C's logs (must be none: Redis is up), and their CPU meanwhile;
- connects per second of the first connection burst to A, and its ``bus_down`` lines.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import time

import pytest
import websockets
from channels.db import database_sync_to_async
from django.db import connection

from tests.bench.common import make_devices
from tests.bench.conftest import size
from tests.bench.deployed import start_nodes
from tests.bench.machine import process_cpu_seconds
from tests.bench.postgres import PrivatePostgres
from tests.processes import RedisServer
from tests.qprint.realtime.cluster import RealDevice, database_url_of

pytestmark = [pytest.mark.services, pytest.mark.slow]

STORM = int(os.environ.get("BENCH_STORM", 0)) or size(5000, 500)
AT_ONCE = 50


@pytest.fixture
def three_nodes(transactional_db):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    nodes = start_nodes(url, redis.url, names=("storm-a", "storm-b", "storm-c"))
    try:
        yield nodes
    finally:
        for n in nodes:
            n.stop()
        redis.stop()


class MovingDevice:
    """A device that reconnects, agent-like, to the next URL when its socket drops."""

    def __init__(self, token: str, urls: list[str], gate: asyncio.Semaphore, stats: dict):
        self.token, self.urls, self.gate, self.stats = token, urls, gate, stats
        self.current: RealDevice | None = None
        self.connected = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def connect_once(self, url: str) -> bool:
        async with self.gate:
            try:
                self.current = await RealDevice(self.token).connect(url)
            except (OSError, TimeoutError, websockets.exceptions.WebSocketException):
                self.stats["failed_handshakes"] += 1
                return False
        self.connected.set()
        return True

    async def run(self, first: str) -> None:
        url = first
        while True:
            delay = 0.5
            while not await self.connect_once(url):
                await asyncio.sleep(random.uniform(delay / 2, delay))
                delay = min(5.0, delay * 2)
            await self.current.wait_closed(timeout=None)
            self.connected.clear()
            url = self.urls[self.stats["moved"] % len(self.urls)]
            self.stats["moved"] += 1
            await asyncio.sleep(random.uniform(0.25, 0.5))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.current is not None:
            await self.current.close()


def ready_on(nodes: tuple[str, ...]) -> int:
    from qprint.models import Device

    return Device.objects.filter(connection_ready=True, connection_node__in=nodes).count()


def bus_downs(log: str) -> int:
    return len(re.findall(r"bus_down", log))


def bus_down_lines(log: str) -> list[str]:
    """The ``bus_down`` lines themselves (their ``reason`` says which layer call failed) and the
    ``bus_late`` ones (a layer call that timed out while the loop ran late, tried again)."""
    return [
        line[-200:]
        for line in log.splitlines()
        if any(w in line for w in ("bus_down", "bus_late", "bus_slow"))
    ]


async def test_reconnect_storm(three_nodes, bench_result):
    a, b, c = three_nodes
    pg = PrivatePostgres.from_env()
    made = await database_sync_to_async(make_devices)(STORM, tenant="storm", prefix="storm")
    stats = {"failed_handshakes": 0, "moved": 0}
    gate = asyncio.Semaphore(AT_ONCE)
    devices = [MovingDevice(t, [b.ws, c.ws], gate, stats) for _, _, t in made]
    started = time.monotonic()
    try:
        for d in devices:
            d.task = asyncio.ensure_future(d.run(a.ws))
        while await database_sync_to_async(ready_on)(("storm-a",)) < STORM:
            assert time.monotonic() - started < 600, "devices not ready on A"
            await asyncio.sleep(0.2)
        burst_seconds = time.monotonic() - started
        first_failures = stats["failed_handshakes"]
        await asyncio.sleep(3)
        stats["failed_handshakes"] = 0
        cpu0 = {n.node_id: process_cpu_seconds(n.process.pid) for n in (b, c)}
        if pg is not None:
            await asyncio.to_thread(pg.reset_statements)
        killed = time.monotonic()
        a.process.send(signal.SIGKILL)
        while await database_sync_to_async(ready_on)(("storm-b", "storm-c")) < STORM:
            assert time.monotonic() - killed < 600, "devices not ready again"
            await asyncio.sleep(0.2)
        moved_seconds = time.monotonic() - killed
        cpu = {n.node_id: round(process_cpu_seconds(n.process.pid) - cpu0[n.node_id], 2)
               for n in (b, c)}  # fmt: skip
        statements = []
        per_reconnect = None
        if pg is not None:
            statements = await asyncio.to_thread(
                pg.statements, connection.settings_dict["NAME"], STORM, 10
            )
            per_reconnect = statements[-1]["calls_per_job"]
    finally:
        await asyncio.gather(*(d.close() for d in devices), return_exceptions=True)
    figures = {
        "devices": STORM,
        "handshakes_in_flight": AT_ONCE,
        "first_burst": {
            "seconds": round(burst_seconds, 1),
            "connects_per_s": round(STORM / burst_seconds, 1),
            "failed_handshakes": first_failures,
            "bus_down_on_a": bus_downs(a.log()),
            "bus_down_lines_on_a": bus_down_lines(a.log()),
        },
        "move": {
            "seconds_until_all_ready": round(moved_seconds, 1),
            "reconnects_per_s": round(STORM / moved_seconds, 1),
            "failed_handshakes": stats["failed_handshakes"],
            "statements_per_reconnect": per_reconnect,
            "statements": statements,
            "bus_down_on_b_c": bus_downs(b.log()) + bus_downs(c.log()),
            "bus_down_lines_on_b_c": bus_down_lines(b.log()) + bus_down_lines(c.log()),
            "cpu_seconds_b_c": cpu,
            "node_cpu_ms_per_reconnect": round(sum(cpu.values()) * 1000 / STORM, 2),
        },
    }
    bench_result["figures"] = figures
    print(
        {k: v for k, v in figures.items() if k != "move"},
        figures["move"]["seconds_until_all_ready"],
    )
