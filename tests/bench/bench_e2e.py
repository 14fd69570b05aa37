"""End to end: submit -> PRINTED through the whole stack (benchmark 1 of docs/PERFORMANCE.md).

Two Daphne nodes of the example project (PostgreSQL, a Redis of the bench's own), ``DEVICES``
devices split over the nodes, jobs submitted through the application API (JSON, base64) to the
nodes in turn. In one run, side by side:

- **push, HTTP agents**: the reference agent (``python -m qprint.agent``, one process per node,
  null spooler): woken over the socket, claim, download and events over HTTP;
- **push, socket-operation agents**: the same agent using the socket operations, when the nodes
  offer them (``hello.operations``); skipped otherwise;
- **polling every 1 s and 5 s**: ``tests.bench.poller`` (sockets open for the gate, wakes ignored);
- **the PostgreSQL floor**: ``tests.bench.floor`` (INSERT + NOTIFY, SKIP LOCKED worker).

Latency of a job: from just before its submission is sent to its ``finished_at`` (the database's
clock, on the same machine). Two phases per push variant: **latency** at a steady ``RATE`` jobs/s
(well under capacity) and **throughput**: ``FLOOD`` jobs from ``SUBMITTERS`` concurrent clients,
jobs/s = jobs / (last PRINTED - first submission).
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db import connection

from qprint import api
from qprint.models import Device, PrintDocument, PrintJob, PrintJobEvent
from tests.bench import floor
from tests.bench.common import latency_figures, make_devices
from tests.bench.conftest import size
from tests.bench.machine import cpu_by_kind, cpu_ms_per_job
from tests.processes import ManagedProcess, RedisServer, python
from tests.qprint.realtime.cluster import Node, database_url_of, node_env

pytestmark = [pytest.mark.services, pytest.mark.slow]

DEVICES = int(os.environ.get("BENCH_DEVICES", 0)) or 50
RATE = 5.0
LATENCY_JOBS = size(300, 100)
FLOOD = int(os.environ.get("BENCH_FLOOD", 0)) or size(1000, 300)
#: ``floods``: only the floods of the two push variants (the 200-device, 5,000-job run that
#: ``./dev bench`` makes after the others, docs/PERFORMANCE.md).
ONLY = os.environ.get("BENCH_E2E_ONLY", "")
SUBMITTERS = 8
POLL_JOBS = size(100, 40)
PROFILE_DIR = os.environ.get("BENCH_PROFILE", "")
DOCUMENT = base64.b64encode(b"%PDF-1.4 bench\n" + b"x" * 2000).decode()


@pytest.fixture
def cluster(transactional_db, tmp_path):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    env = node_env(url, redis.url, "bench-a", QPRINT_HEARTBEAT_SECONDS="20", LOG_LEVEL="WARNING")
    nodes = [Node("bench-a", env), Node("bench-b", {**env, "QQQ_NODE_ID": "bench-b"})]
    try:
        for n in nodes:
            n.start()
        yield url, nodes, tmp_path
    finally:
        for n in nodes:
            n.stop()
        redis.stop()


class Fleet:
    """Agent processes, one per node, each serving its half of the devices."""

    def __init__(self, args_of, nodes, halves, env):
        self.procs = [
            ManagedProcess(f"agents-{i}", args_of(node, tokens), env)
            for i, (node, tokens) in enumerate(zip(nodes, halves, strict=True))
        ]

    def __enter__(self):
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.stop()


def ready_count() -> int:
    return Device.objects.filter(tenant="bench", connection_ready=True).count()


async def until(predicate, timeout: float, what: str) -> None:
    """Wait for ``predicate(ready devices)``, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate(await database_sync_to_async(ready_count)()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


def reset_jobs() -> None:
    PrintJobEvent.objects.all().delete()
    PrintDocument.objects.all().delete()
    PrintJob.objects.all().delete()


def steps() -> dict[str, float]:
    """Median time of each step of a job, from the database's own timestamps."""
    import statistics

    spooled = dict(
        PrintJobEvent.objects.filter(type="SPOOLED").values_list("job_id", "recorded_at")
    )
    gaps: dict[str, list[float]] = {
        "queued_to_claimed": [],
        "claimed_to_received": [],
        "received_to_spooled": [],
        "spooled_to_printed": [],
    }
    rows = PrintJob.objects.filter(status="PRINTED").values_list(
        "pk", "created_at", "claimed_at", "received_at", "finished_at"
    )
    for pk, created, claimed, received, finished in rows:
        gaps["queued_to_claimed"].append((claimed - created).total_seconds())
        gaps["claimed_to_received"].append((received - claimed).total_seconds())
        if pk in spooled:
            gaps["received_to_spooled"].append((spooled[pk] - received).total_seconds())
            gaps["spooled_to_printed"].append((finished - spooled[pk]).total_seconds())
    return {k: round(statistics.median(v) * 1000, 1) for k, v in gaps.items() if v}


def finished_times(ids: list[str]) -> dict[str, float]:
    return {
        str(pk): t.timestamp()
        for pk, t in PrintJob.objects.filter(pk__in=ids, status="PRINTED").values_list(
            "pk", "finished_at"
        )
    }


async def submit_jobs(nodes, key: str, names: list[str], jobs: int, rate: float | None) -> dict:
    """Submit ``jobs`` to random devices; returns {job id: submission wall time}."""
    submitted: dict[str, float] = {}
    turn = iter(range(10**9))
    limits = httpx.Limits(max_connections=SUBMITTERS * 2)
    async with httpx.AsyncClient(
        timeout=60, headers={"Authorization": f"Bearer {key}"}, limits=limits
    ) as client:

        async def one(i: int) -> None:
            node = nodes[next(turn) % len(nodes)]
            body = {
                "device": names[i % len(names)],
                "content_type": "application/pdf",
                "content_base64": DOCUMENT,
                "title": f"bench {i}",
            }
            t = time.time()
            r = await client.post(
                node.http + "/qprint/api/v1/jobs",
                json=body,
                headers={"Idempotency-Key": str(uuid.uuid4())},
            )
            assert r.status_code == 201, r.text
            submitted[r.json()["id"]] = t

        if rate:
            started = time.monotonic()
            pending = []
            for i in range(jobs):
                pause = started + i / rate - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                pending.append(asyncio.ensure_future(one(i)))
            await asyncio.gather(*pending)
        else:
            queue = iter(range(jobs))

            async def submitter():
                for i in queue:
                    await one(i)

            await asyncio.gather(*(submitter() for _ in range(SUBMITTERS)))
    return submitted


def printed_count() -> int:
    return PrintJob.objects.filter(status="PRINTED").count()


async def wait_printed(submitted: dict[str, float], timeout: float) -> dict[str, float]:
    """The PRINTED times of the phase's jobs (the only jobs in the table: each phase starts
    empty), once all are PRINTED; polled with a count, so the wait costs the database little."""
    deadline = time.monotonic() + timeout
    while await database_sync_to_async(printed_count)() < len(submitted):
        assert time.monotonic() < deadline, "jobs not PRINTED in time"
        await asyncio.sleep(0.2)
    done = await database_sync_to_async(finished_times)(list(submitted))
    assert len(done) == len(submitted), f"{len(submitted) - len(done)} jobs not PRINTED"
    return done


async def phase(nodes, key, names, jobs, rate, profile: str = "", agents=None) -> dict:
    spies = []
    if profile:  # node A, and the agent process of its devices
        spies.append(profiler(nodes[0].process.pid, profile))
        if agents is not None:
            spies.append(profiler(agents.procs[0].pid, f"agent-{profile}"))
    cpu_before = cpu_by_kind()
    submitted = await submit_jobs(nodes, key, names, jobs, rate)
    done = await wait_printed(submitted, 300)
    cpu_after = cpu_by_kind()
    for spy in spies:
        spy.send(signal.SIGINT)  # py-spy writes its output on SIGINT
        await asyncio.to_thread(spy.wait, 120)
    latencies = [(done[j] - t) * 1000 for j, t in submitted.items()]
    span = max(done.values()) - min(submitted.values())
    figures = latency_figures(latencies)
    figures["jobs_per_s"] = round(len(submitted) / span, 1)
    figures["steps_p50_ms"] = await database_sync_to_async(steps)()
    figures["cpu_ms_per_job"] = cpu_ms_per_job(cpu_before, cpu_after, len(submitted))
    await database_sync_to_async(reset_jobs)()
    return figures


def profiler(pid: int, name: str) -> ManagedProcess:
    """py-spy on process ``pid`` (``BENCH_PROFILE=<dir>``): raw stacks for tests.bench.profile."""
    out = Path(PROFILE_DIR) / f"{name}.txt"
    spy = str(Path(sys.executable).parent / "py-spy")
    args = [spy, "record", "--pid", str(pid), "--rate", "100",
            "--format", "raw", "--output", str(out), "--nonblocking",
            *(["--gil"] if os.environ.get("BENCH_PROFILE_GIL") else [])]  # fmt: skip
    spy = ManagedProcess("py-spy", args, dict(os.environ))
    spy.start()
    time.sleep(1)
    return spy


def agent_args(tmp_path, operations: str):
    def args(node, tokens_file):
        return python(
            "-m", "qprint.agent", "--url", node.http + "/qprint/",
            "--tokens-file", str(tokens_file),
            "--state-dir", str(tmp_path / f"state-{node.node_id}-{operations}"),
            "--spooler", "null", "--no-report-printers",
            *(["--operations", operations] if operations != "default" else []),
        )  # fmt: skip

    return args


def poller_args(interval: float):
    def args(node, tokens_file):
        return python(
            "-m", "tests.bench.poller", "--url", node.http + "/qprint/",
            "--tokens-file", str(tokens_file), "--interval", str(interval),
        )  # fmt: skip

    return args


def socket_operations_offered() -> bool:
    from qprint.agent import __main__ as agent_main

    return "--operations" in open(agent_main.__file__).read()


async def test_end_to_end(cluster, bench_result):
    url, nodes, tmp_path = cluster
    made = await database_sync_to_async(make_devices)(DEVICES)
    _, key = await database_sync_to_async(api.create_application_key)("bench", "bench")
    names = [name for _, name, _ in made]
    halves = []
    for i in range(2):
        path = tmp_path / f"tokens-{i}.txt"
        path.write_text("".join(f"{n} {t}\n" for _, n, t in made[i::2]))
        halves.append(path)
    env = nodes[0].process.env
    results: dict[str, dict] = {}

    async def with_fleet(label: str, args_of, phases):
        with Fleet(args_of, nodes, halves, env) as fleet:
            await until(lambda n: n == DEVICES, 120, f"{label} ready")
            for name, jobs, rate in phases:
                profile = f"{label}-{name}" if PROFILE_DIR and rate is None else ""
                results[f"{label}/{name}"] = await phase(
                    nodes, key, names, jobs, rate, profile, fleet
                )
                print(f"{label}/{name}: {results[f'{label}/{name}']}", flush=True)
        await until(lambda n: n == 0, 60, f"{label} disconnected")

    push_phases = [("latency", LATENCY_JOBS, RATE), ("throughput", FLOOD, None)]
    if ONLY == "floods":
        push_phases = push_phases[1:]
    variants = [
        ("push_http", agent_args(tmp_path, "http" if socket_operations_offered() else "default"))
    ]
    if socket_operations_offered():
        variants.append(("push_socket", agent_args(tmp_path, "socket")))
    for label, args_of in variants:
        await with_fleet(label, args_of, push_phases)
    if ONLY == "floods":
        bench_result["figures"] = results
        bench_result["sizes"] = {"devices": DEVICES, "nodes": 2, "flood_jobs": FLOOD}
        return
    for interval in (1, 5):
        await with_fleet(
            f"poll_{interval}s", poller_args(interval), [("latency", POLL_JOBS, RATE / 2)]
        )

    floor_latency = await asyncio.to_thread(floor.run, url, LATENCY_JOBS, RATE)
    floor_flood = await asyncio.to_thread(floor.run, url, FLOOD, None)
    results["floor/latency"] = latency_figures(floor_latency["latencies_ms"])
    results["floor/throughput"] = {"jobs_per_s": round(floor_flood["jobs_per_s"], 1)}
    print(f"floor: {results['floor/latency']} {results['floor/throughput']}")

    push_p50 = results["push_http/latency"]["p50_ms"]
    ratios = {
        "poll_1s_p50_over_push_http_p50": round(results["poll_1s/latency"]["p50_ms"] / push_p50, 1),
        "poll_5s_p50_over_push_http_p50": round(results["poll_5s/latency"]["p50_ms"] / push_p50, 1),
        "push_http_p50_over_floor_p50": round(push_p50 / results["floor/latency"]["p50_ms"], 1),
    }
    if "push_socket/latency" in results:
        ratios["push_socket_p50_over_floor_p50"] = round(
            results["push_socket/latency"]["p50_ms"] / results["floor/latency"]["p50_ms"], 1
        )
    bench_result["figures"] = results
    bench_result["ratios"] = ratios
    bench_result["sizes"] = {
        "devices": DEVICES, "nodes": 2, "rate": RATE, "latency_jobs": LATENCY_JOBS,
        "flood_jobs": FLOOD, "submitters": SUBMITTERS, "poll_jobs": POLL_JOBS,
    }  # fmt: skip
    print(ratios)
