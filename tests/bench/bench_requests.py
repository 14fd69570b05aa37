"""Per request: a trivial request, an empty claim and an event, against a bare ASGI app under
the same Daphne (benchmark 2 of docs/PERFORMANCE.md).

One node of the example project (PostgreSQL, Redis, heartbeat 20 s) and one Daphne serving
``tests.bench.bare_asgi``. One keep-alive client sends, in turn, ``GET /qcluster/ready/``, an
empty ``POST claim`` (the device is connected and ready, nothing queued for it: 204), a
``PROGRESS`` event (new id each time: 201) on a RECEIVED job of another device, and ``GET /`` of
the bare app: the four are interleaved so they share the machine's load alike.
"""

from __future__ import annotations

import asyncio
import datetime
import http.client
import json
import time
import uuid

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from qprint import api
from qprint.models import Device
from tests.bench.common import BareNode, latency_figures, make_devices
from tests.bench.conftest import size
from tests.processes import RedisServer
from tests.qprint.realtime.cluster import Node, RealDevice, database_url_of, node_env

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROUNDS = size(2000, 300)


@pytest.fixture
def node(transactional_db):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    env = node_env(url, redis.url, "bench-a", QPRINT_HEARTBEAT_SECONDS="20", LOG_LEVEL="WARNING")
    a = Node("bench-a", env)
    bare = BareNode(env)
    try:
        a.start()
        bare.start()
        yield a, bare
    finally:
        a.stop()
        bare.stop()
        redis.stop()


class Client:
    """A keep-alive HTTP/1.1 client with little overhead of its own (``http.client``)."""

    def __init__(self, base: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=20)

    def call(self, method: str, path: str, body=None, token: str | None = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        return response.status, response.read()


def measure(a, bare, idle_token: str, busy_token: str) -> dict[str, list[float]]:
    node, floor = Client(a.http), Client(bare.http)
    base = "/qprint/api/v1/device/"
    deadline = time.monotonic() + 20
    while True:  # the idle device's socket is ready when its claim answers 204
        status, text = node.call("POST", base + "claim", token=idle_token)
        if status == 204 or time.monotonic() > deadline:
            break
    assert status == 204, text
    status, text = node.call("POST", base + "claim", token=busy_token)
    assignment = json.loads(text)
    events = base + f"jobs/{assignment['job_id']}/events"
    status, text = node.call(
        "POST", events, event_body(assignment["claim_id"], "RECEIVED"), busy_token
    )
    assert status == 201, text
    samples: dict[str, list[float]] = {"trivial": [], "empty_claim": [], "event": [], "bare": []}

    def timed(name, client, *args):
        t0 = time.perf_counter()
        status, _ = client.call(*args)
        samples[name].append((time.perf_counter() - t0) * 1000)
        return status

    for i in range(ROUNDS + 50):
        answers = (
            timed("trivial", node, "GET", "/qcluster/ready/"),
            timed("empty_claim", node, "POST", base + "claim", None, idle_token),
            timed(
                "event",
                node,
                "POST",
                events,
                event_body(assignment["claim_id"], "PROGRESS"),
                busy_token,
            ),
            timed("bare", floor, "GET", "/"),
        )
        assert answers == (200, 204, 201, 200), answers
        if i == 49:  # warm-up done
            for v in samples.values():
                v.clear()
    return samples


def event_body(claim_id: str, kind: str) -> dict:
    return {
        "event_id": str(uuid.uuid4()),
        "type": kind,
        "claim_id": claim_id,
        "occurred_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }


async def test_per_request(node, bench_result):
    a, bare = node
    (_, _, idle_token), (busy_id, _, busy_token) = await database_sync_to_async(make_devices)(2)
    busy = await database_sync_to_async(Device.objects.get)(pk=busy_id)
    await database_sync_to_async(api.submit_job)(
        "bench", busy, b"%PDF-1.4 bench", "application/pdf"
    )
    sockets = [await RealDevice(t).connect(a.ws) for t in (idle_token, busy_token)]
    await sockets[1].frame("wake", 20)  # ready: its queued job woke it
    samples = await asyncio.to_thread(measure, a, bare, idle_token, busy_token)
    for s in sockets:
        await s.close()
    figures = {name: latency_figures(v) for name, v in samples.items()}
    bare_p50 = figures["bare"]["p50_ms"]
    for name in ("trivial", "empty_claim", "event"):
        figures[name]["x_bare_p50"] = round(figures[name]["p50_ms"] / bare_p50, 1)
    bench_result["figures"] = figures
    bench_result["rounds"] = ROUNDS
    for name, f in figures.items():
        print(f"{name:12s} p50 {f['p50_ms']:.2f} ms  p99 {f['p99_ms']:.2f} ms  (n={f['n']})")
