"""``?wait`` across nodes: the request waits on node A, the PRINTED event is reported to node B,
and the notice crosses over Redis (the nodes never re-read the job during the wait)."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis as redis_client
from asgiref.sync import sync_to_async
from django.db import connection

from qprint import api
from tests.processes import RedisServer
from tests.qprint.factories import connect
from tests.qprint.realtime.cluster import Http, two_nodes
from tests.waiting import wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def redis():
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def nodes(redis, live_database_url):
    settings = {"DJANGO_SETTINGS_MODULE": "tests.qprint.webhooks.node_settings"}
    with two_nodes(live_database_url, redis.url, **settings) as both:
        yield both


def subscribed(redis: RedisServer, job_id: str) -> bool:
    client = redis_client.Redis(port=redis.port)
    try:
        return any(job_id.encode() in name for name in client.pubsub_channels())
    finally:
        client.close()


async def test_a_wait_on_one_node_is_answered_by_a_print_reported_to_another(nodes, redis):
    a, b = nodes
    device, token = await sync_to_async(api.create_device)("acme", "desk")
    await sync_to_async(connect)(device)
    _, secret = await sync_to_async(api.create_application_key)("acme", "backend")
    http = Http(secret)
    try:
        job = (await http.submit(a, "desk")).json()
        claim = (await http.claim(b, token)).json()
        for step in ("RECEIVED", "SPOOLED"):
            assert (
                await http.event(b, token, job["id"], claim["claim_id"], step)
            ).status_code == 201

        started = time.monotonic()
        waiting = asyncio.create_task(
            http.app("GET", a, f"jobs/{job['id']}", params={"wait": "30", "status": "SPOOLED"})
        )
        await sync_to_async(wait_until)(
            lambda: subscribed(redis, job["id"]), 10, message="node a listening for the job"
        )
        assert not waiting.done()
        printed = await http.event(b, token, job["id"], claim["claim_id"], "PRINTED")
        assert printed.status_code == 201
        committed = time.monotonic()
        answer = await asyncio.wait_for(waiting, 35)
        answered = time.monotonic()
    finally:
        await http.close()
        await sync_to_async(lambda: connection.close())()  # this test's ORM thread's session
    assert answer.status_code == 200 and answer.json()["status"] == "PRINTED"
    assert answered - committed < 5 < 30 - (answered - started)  # the notice, not the clock


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def channels(redis: RedisServer) -> int:
    client = redis_client.Redis(port=redis.port)
    try:
        return len(client.pubsub_channels())
    finally:
        client.close()


def database_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


async def test_waiting_requests_hold_no_thread_or_connection_each(nodes, redis):
    """Forty requests waiting on one node: a few threads and connections more, not forty (each
    request listens on a channel of its own, which is how the test knows they are all waiting)."""
    a, _b = nodes
    await sync_to_async(api.create_device)("acme", "desk")
    _, secret = await sync_to_async(api.create_application_key)("acme", "backend")
    http = Http(secret)
    waiting = 40
    try:
        job = (await http.submit(a, "desk")).json()
        await http.app("GET", a, f"jobs/{job['id']}", params={"wait": "0"})
        threads_before, channels_before = threads_of(a.process.pid), channels(redis)
        sessions_before = await sync_to_async(database_sessions)()
        requests = [
            asyncio.create_task(http.app("GET", a, f"jobs/{job['id']}", params={"wait": "20"}))
            for _ in range(waiting)
        ]
        await sync_to_async(wait_until)(
            lambda: channels(redis) >= channels_before + waiting,
            15,
            message="every request listening",
        )
        threads_during = threads_of(a.process.pid)
        sessions_during = await sync_to_async(database_sessions)()
        assert not any(r.done() for r in requests)
        assert threads_during - threads_before < waiting // 4, (threads_before, threads_during)
        assert sessions_during - sessions_before < waiting // 4, (sessions_before, sessions_during)
        for request in requests:
            request.cancel()
    finally:
        await http.close()
        await sync_to_async(lambda: connection.close())()
