"""Per request: a trivial request, an empty claim and an event, against a bare ASGI app under
the same Daphne (benchmark 2 of docs/PERFORMANCE.md).

Two nodes of the example project (PostgreSQL, Redis, heartbeat 20 s): node A as deployed (its
``http_application`` serves the claim and the event directly, ``qprint.views.direct``) and node D
with every request through Django's ASGI handler (``tests.bench.through_django``); and one Daphne
serving ``tests.bench.bare_asgi``. One keep-alive client per server sends, in turn,
``GET /qcluster/ready/``, an empty ``POST claim`` (the device is connected and ready, nothing
queued for it: 204), a ``PROGRESS`` event (new id each time: 201) on a RECEIVED job of another
device, to A and then to D, and ``GET /`` of the bare app: all interleaved so they share the
machine's load alike. The CPU each node spent per round (its three requests) is read from
``/proc``.
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
from tests.bench.machine import process_cpu_seconds
from tests.bench.profile import PROFILE_DIR, profiler
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
    d_env = node_env(url, redis.url, "bench-d", QPRINT_HEARTBEAT_SECONDS="20", LOG_LEVEL="WARNING")
    d = Node("bench-d", d_env, application="tests.bench.through_django:application")
    bare = BareNode(env)
    try:
        a.start()
        d.start()
        bare.start()
        yield a, d, bare
    finally:
        a.stop()
        d.stop()
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


def measure(a, d, bare, idle_token: str, busy_token: str) -> tuple[dict, dict]:
    """The latencies of each kind of request, and each node's CPU per round (ms)."""
    node, through_django, floor = Client(a.http), Client(d.http), Client(bare.http)
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
    kinds = ("trivial", "empty_claim", "event")
    samples: dict[str, list[float]] = {
        name: [] for kind in kinds for name in (kind, f"{kind}_django")
    }
    samples["bare"] = []

    def timed(name, client, *args):
        t0 = time.perf_counter()
        status, _ = client.call(*args)
        samples[name].append((time.perf_counter() - t0) * 1000)
        return status

    def requests(client, suffix):
        return (
            timed("trivial" + suffix, client, "GET", "/qcluster/ready/"),
            timed("empty_claim" + suffix, client, "POST", base + "claim", None, idle_token),
            timed(
                "event" + suffix,
                client,
                "POST",
                events,
                event_body(assignment["claim_id"], "PROGRESS"),
                busy_token,
            ),
        )

    cpu: dict[str, float] = {}
    for i in range(ROUNDS + 50):
        answers = (
            *requests(node, ""),
            *requests(through_django, "_django"),
            timed("bare", floor, "GET", "/"),
        )
        assert answers == (200, 204, 201, 200, 204, 201, 200), answers
        if i == 49:  # warm-up done
            for v in samples.values():
                v.clear()
            cpu = {"a": process_cpu_seconds(a.process.pid), "d": process_cpu_seconds(d.process.pid)}
    cpu_per_round = {
        "direct": round((process_cpu_seconds(a.process.pid) - cpu["a"]) * 1000 / ROUNDS, 3),
        "through_django": round((process_cpu_seconds(d.process.pid) - cpu["d"]) * 1000 / ROUNDS, 3),
    }
    return samples, cpu_per_round


def event_body(claim_id: str, kind: str) -> dict:
    return {
        "event_id": str(uuid.uuid4()),
        "type": kind,
        "claim_id": claim_id,
        "occurred_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }


async def test_per_request(node, bench_result):
    a, d, bare = node
    (_, _, idle_token), (busy_id, _, busy_token) = await database_sync_to_async(make_devices)(2)
    busy = await database_sync_to_async(Device.objects.get)(pk=busy_id)
    await database_sync_to_async(api.submit_job)(
        "bench", busy, b"%PDF-1.4 bench", "application/pdf"
    )
    sockets = [await RealDevice(t).connect(a.ws) for t in (idle_token, busy_token)]
    await sockets[1].frame("wake", 20)  # ready: its queued job woke it
    spies = [profiler(n.process.pid, f"requests-{n.node_id}") for n in (a, d) if PROFILE_DIR]
    samples, cpu_per_round = await asyncio.to_thread(measure, a, d, bare, idle_token, busy_token)
    for spy in spies:
        spy.stop()
    for s in sockets:
        await s.close()
    figures = {name: latency_figures(v) for name, v in samples.items()}
    bare_p50 = figures["bare"]["p50_ms"]
    for name in figures:
        if name != "bare":
            figures[name]["x_bare_p50"] = round(figures[name]["p50_ms"] / bare_p50, 1)
    figures["node_cpu_ms_per_round"] = cpu_per_round
    figures["direct_over_django_cpu"] = round(
        cpu_per_round["direct"] / cpu_per_round["through_django"], 3
    )
    bench_result["figures"] = figures
    bench_result["rounds"] = ROUNDS
    for name, f in figures.items():
        if isinstance(f, dict) and "p50_ms" in f:
            print(f"{name:20s} p50 {f['p50_ms']:.2f} ms  p99 {f['p99_ms']:.2f} ms  (n={f['n']})")
    print(
        "node CPU per round (trivial + empty claim + event): "
        f"direct {cpu_per_round['direct']:.2f} ms, "
        f"through Django {cpu_per_round['through_django']:.2f} ms"
    )
