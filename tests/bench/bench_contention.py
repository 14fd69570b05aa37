"""Claim under contention: every device claims at the same instant (benchmark 5 of
docs/PERFORMANCE.md).

Two Daphne nodes, ``CONTENDERS`` devices with a job each, their sockets ready (half on each
node), their HTTP connections open. Then every device sends its claim at once (to its own node)
and the clock runs until the last answer: claims per second, the latency of each, and the lock
waits seen meanwhile (``pg_stat_activity`` sampled every 5 ms from another connection: the most
sessions waiting on a lock at once, and the share of samples with any). Every job must be
CLAIMED exactly once, by its device.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import httpx
import psycopg
import pytest
from channels.db import database_sync_to_async
from django.db import connection

from qprint import api
from qprint.models import Device, PrintJob
from tests.bench.common import latency_figures, make_devices
from tests.bench.conftest import size
from tests.processes import RedisServer
from tests.qprint.realtime.cluster import Node, RealDevice, database_url_of, node_env

pytestmark = [pytest.mark.services, pytest.mark.slow]

CONTENDERS = int(os.environ.get("BENCH_CONTENDERS", 0)) or size(500, 200)


@pytest.fixture
def cluster(transactional_db):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    env = node_env(url, redis.url, "bench-a", QPRINT_HEARTBEAT_SECONDS="20", LOG_LEVEL="WARNING")
    nodes = [Node("bench-a", env), Node("bench-b", {**env, "QQQ_NODE_ID": "bench-b"})]
    try:
        for n in nodes:
            n.start()
        yield url, nodes
    finally:
        for n in nodes:
            n.stop()
        redis.stop()


def queue_jobs(made) -> None:
    for device in Device.objects.filter(pk__in=[pk for pk, _, _ in made]):
        api.submit_job("bench", device, b"%PDF-1.4 bench", "application/pdf")


class LockWatch:
    def __init__(self, url: str):
        self.url = url
        self.samples = 0
        self.with_waits = 0
        self.most = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                waiting = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()[0]
                self.samples += 1
                self.with_waits += waiting > 0
                self.most = max(self.most, waiting)
                time.sleep(0.005)


async def test_claims_at_once(cluster, bench_result):
    url, nodes = cluster
    made = await database_sync_to_async(make_devices)(CONTENDERS)
    await database_sync_to_async(queue_jobs)(made)
    sockets = []
    for start in range(0, CONTENDERS, 100):
        sockets += await asyncio.gather(
            *(
                RealDevice(t).connect(nodes[i % 2].ws)
                for i, (_, _, t) in enumerate(made[start : start + 100], start)
            )
        )
    await asyncio.gather(*(s.frame("wake", 60) for s in sockets))

    limits = httpx.Limits(max_connections=CONTENDERS, max_keepalive_connections=CONTENDERS)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        # Every device's HTTP connection open before the race (as agents that claimed before).
        for start in range(0, CONTENDERS, 50):
            await asyncio.gather(
                *(
                    client.get(nodes[i % 2].http + "/qcluster/ready/")
                    for i in range(start, min(start + 50, CONTENDERS))
                )
            )
        watch = LockWatch(url)
        watch.thread.start()
        gate = asyncio.Event()

        async def claim(i: int, token: str):
            await gate.wait()
            t0 = time.perf_counter()
            r = await client.post(
                nodes[i % 2].http + "/qprint/api/v1/device/claim",
                headers={"Authorization": f"Bearer {token}"},
            )
            return r.status_code, (time.perf_counter() - t0) * 1000, r.json()["job_id"]

        tasks = [asyncio.ensure_future(claim(i, t)) for i, (_, _, t) in enumerate(made)]
        await asyncio.sleep(0.5)
        started = time.perf_counter()
        gate.set()
        answers = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
        watch.stop.set()
        watch.thread.join(5)
    assert all(status == 200 for status, _, _ in answers), {a[0] for a in answers}
    assert len({job for _, _, job in answers}) == CONTENDERS
    claimed = await database_sync_to_async(
        lambda: PrintJob.objects.filter(status="CLAIMED").count()
    )()
    assert claimed == CONTENDERS
    figures = latency_figures([ms for _, ms, _ in answers])
    figures.update(
        {
            "devices": CONTENDERS,
            "claims_per_s": round(CONTENDERS / elapsed, 1),
            "lock_waiters_most": watch.most,
            "lock_wait_sample_share": round(watch.with_waits / max(1, watch.samples), 3),
            "lock_samples": watch.samples,
        }
    )
    bench_result["figures"] = figures
    print(figures)
    for s in sockets:
        await s.close()
