"""End to end: submit -> PRINTED through the whole stack (benchmark 1 of docs/PERFORMANCE.md).

Two Daphne nodes of the example project run as a user deploys them
(:func:`tests.bench.deployed.deployed_env`: the docs' Daphne command, the example project's
defaults, INFO logging, the 20 s heartbeat) on the benchmark's own PostgreSQL
(``tests/bench/postgres.py``, with ``pg_stat_statements``) and a Redis of its own; ``DEVICES``
devices split over the nodes, jobs submitted through the application API (JSON, base64) to the nodes
in turn. In one run, side by side:

- **push, HTTP agents**: the reference agent (``python -m qprint.agent``, one process per node,
  null spooler, ``--operations http``): woken over the socket, claim, download and events over
  HTTP;
- **push, socket-operation agents** (``--operations socket``): woken, then claim and events as
  frames, the document over HTTP;
- **pushed assignments** (``--operations push``): the node claims for the device and sends the
  assignment with the document inline; RECEIVED, SPOOLED, PRINTED as frames, not waiting for
  each answer;
- **polling every 1 s and 5 s**: ``tests.bench.poller`` (sockets open for the gate, wakes ignored);
- **the PostgreSQL floor**: ``tests.bench.floor`` (INSERT + NOTIFY, SKIP LOCKED worker).

Latency of a job: from just before its submission is sent to its ``finished_at`` (the database's
clock, on the same machine). Two phases per push variant: **latency** at a steady ``RATE`` jobs/s
(well under capacity) and **throughput**: ``FLOOD`` jobs from ``SUBMITTERS`` concurrent clients,
jobs/s = jobs / (last PRINTED - first submission). Each phase of a push variant is measured after
a warm-up flood of ``WARM_UP`` jobs (:func:`warm`). Each phase records the CPU per job of each kind
of process, counting the benchmark's own processes only (:class:`tests.bench.machine.CpuMeter`),
the nodes' full collections of the garbage collector (``nodes_gc``: how many, the longest, their
CPU; :func:`tests.bench.deployed.gc_pauses`) and, on the private PostgreSQL, the statements per
job (``pg_stat_statements``), the sessions opened, the automatic ANALYZEs and the write-ahead
log's fsyncs per job with their time (``pg_stat_wal``: a stalling disk shows there, as every
commit waits for one).

``BENCH_E2E_ONLY=deployment`` instead runs the socket-operation flood four times, alternating the
nodes as this benchmark used to run them (``LOG_LEVEL=WARNING``, Daphne without
``--proxy-headers``) and as deployed, each read with both ways of counting CPU (the old
whole-machine sum by command line, and the meter): what makes the two readings differ.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
import uuid

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db import connection

from qprint import api
from qprint.models import Device, PrintDocument, PrintJob, PrintJobEvent
from tests.bench import floor
from tests.bench.common import latency_figures, make_devices
from tests.bench.conftest import size
from tests.bench.deployed import Fleet, agent_args, gc_pauses, poller_args, start_nodes
from tests.bench.machine import (
    CpuMeter,
    cpu_by_kind,
    cpu_ms_per_job,
    fsync_latency,
    postgresql_part,
    process_tree,
)
from tests.bench.postgres import PrivatePostgres, counted
from tests.bench.profile import PROFILE_DIR, profiler
from tests.processes import RedisServer
from tests.qprint.factories import finished_jobs
from tests.qprint.realtime.cluster import Node, database_url_of

pytestmark = [pytest.mark.services, pytest.mark.slow]

DEVICES = int(os.environ.get("BENCH_DEVICES", 0)) or 50
RATE = 5.0
LATENCY_JOBS = size(300, 100)
FLOOD = int(os.environ.get("BENCH_FLOOD", 0)) or size(1000, 300)
#: ``floods``: only the floods of the push variants (the 200-device, 5,000-job run that
#: ``./dev bench`` makes after the others, docs/PERFORMANCE.md); ``deployment``: the comparison
#: of the nodes as this benchmark used to run them and as deployed (module docstring).
ONLY = os.environ.get("BENCH_E2E_ONLY", "")
#: ``BENCH_E2E_VARIANTS=pushed,push_http``: only these push variants (with ``floods``: to profile
#: one path again and again); all three by default.
VARIANTS = [v for v in os.environ.get("BENCH_E2E_VARIANTS", "").split(",") if v]
SUBMITTERS = 8
#: Jobs flooded through the push variants before each phase is measured (:func:`warm`); 0: none.
WARM_UP = int(os.environ.get("BENCH_WARM_UP", 100))
POLL_JOBS = size(100, 40)
DOCUMENT = base64.b64encode(b"%PDF-1.4 bench\n" + b"x" * 2000).decode()


@pytest.fixture
def cluster(transactional_db, tmp_path):
    url = database_url_of(connection.settings_dict)
    redis = RedisServer().start()
    pg = PrivatePostgres.from_env()
    nodes = [] if ONLY == "deployment" else start_nodes(url, redis.url)
    try:
        yield url, nodes, tmp_path, redis, pg
    finally:
        for n in nodes:
            n.stop()
        redis.stop()


def ready_count() -> int:
    return Device.objects.filter(tenant="bench", connection_ready=True).count()


async def until(predicate, timeout: float, what: str) -> None:
    """Wait for ``predicate(ready devices)``, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate(await database_sync_to_async(ready_count)()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


#: Finished jobs each device has before a phase (``BENCH_HISTORY``; 0: an empty table).
HISTORY = int(os.environ.get("BENCH_HISTORY", 100))


def reset_jobs() -> None:
    """The job tables as a deployment's: the last phase's jobs gone, ``HISTORY`` finished jobs
    per device, and statistics that say so. PostgreSQL plans a prepared statement for good from
    the statistics it has then; those of a table the benchmark has just emptied made it read a
    device's whole history to find one job (docs/PERFORMANCE.md, "Plans made on an empty
    table"), which no deployment's analysed table does."""
    PrintJobEvent.objects.all().delete()
    PrintDocument.objects.all().delete()
    PrintJob.objects.all().delete()
    # CANCELLED: the phases count the table's PRINTED jobs as their own.
    for device in Device.objects.filter(tenant="bench").only("pk", "tenant"):
        finished_jobs(device, HISTORY, status="CANCELLED")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE qprint_job, qprint_job_event, qprint_document, qprint_device")


def steps(ids: list[str]) -> dict[str, float]:
    """Median time of each step of the jobs ``ids``, from the database's own timestamps."""
    import statistics

    spooled = dict(
        PrintJobEvent.objects.filter(job_id__in=ids, type="SPOOLED").values_list(
            "job_id", "recorded_at"
        )
    )
    gaps: dict[str, list[float]] = {
        "queued_to_claimed": [],
        "claimed_to_received": [],
        "received_to_spooled": [],
        "spooled_to_printed": [],
    }
    rows = PrintJob.objects.filter(pk__in=ids, status="PRINTED").values_list(
        "pk", "created_at", "claimed_at", "received_at", "finished_at"
    )
    for pk, created, claimed, received, finished in rows:
        gaps["queued_to_claimed"].append((claimed - created).total_seconds())
        gaps["claimed_to_received"].append((received - claimed).total_seconds())
        if pk in spooled:
            gaps["received_to_spooled"].append((spooled[pk] - received).total_seconds())
            gaps["spooled_to_printed"].append((finished - spooled[pk]).total_seconds())
    return {k: round(statistics.median(v) * 1000, 1) for k, v in gaps.items() if v}


def slowest(submitted: dict[str, float], done: dict[str, float], count: int = 3) -> list[dict]:
    """Where the ``count`` slowest jobs of a phase spent their time (ms): when it was submitted
    (since the phase's first submission), from the submission's start (the client's clock) to
    the row's ``created_at``, then each step (the database's own timestamps; the benchmark and the
    database share the machine's clock). What a p99 is made of."""
    ids = sorted(submitted, key=lambda j: done[j] - submitted[j], reverse=True)[:count]
    first = min(submitted.values())
    spooled = dict(
        PrintJobEvent.objects.filter(job_id__in=ids, type="SPOOLED").values_list(
            "job_id", "recorded_at"
        )
    )
    rows = PrintJob.objects.filter(pk__in=ids).values_list(
        "pk", "created_at", "claimed_at", "received_at", "finished_at"
    )
    times = {str(pk): rest for pk, *rest in rows}
    out = []
    for job_id in ids:
        created, claimed, received, finished = times[job_id]
        marks = [("into_the_phase", submitted[job_id] - first)]
        marks.append(("submit_to_queued", created.timestamp() - submitted[job_id]))
        marks.append(("queued_to_claimed", (claimed - created).total_seconds()))
        marks.append(("claimed_to_received", (received - claimed).total_seconds()))
        at = spooled.get(uuid.UUID(job_id))
        if at is not None:
            marks.append(("received_to_spooled", (at - received).total_seconds()))
            marks.append(("spooled_to_printed", (finished - at).total_seconds()))
        out.append({name: round(seconds * 1000, 1) for name, seconds in marks})
    return out


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


async def wait_printed(
    submitted: dict[str, float], timeout: float, already: int = 0
) -> dict[str, float]:
    """The PRINTED times of the phase's jobs, once all are PRINTED (``already``: the jobs of the
    table PRINTED before them, its warm-up's; each phase starts with none); polled with a count,
    so the wait costs the database little."""
    deadline = time.monotonic() + timeout
    while await database_sync_to_async(printed_count)() < already + len(submitted):
        assert time.monotonic() < deadline, "jobs not PRINTED in time"
        await asyncio.sleep(0.2)
    done = await database_sync_to_async(finished_times)(list(submitted))
    assert len(done) == len(submitted), f"{len(submitted) - len(done)} jobs not PRINTED"
    return done


class Meter:
    """What a phase costs: CPU per job per kind of process (the benchmark's own processes only)
    and, on the private PostgreSQL, the statements per job."""

    def __init__(self, redis: RedisServer, pg: PrivatePostgres | None):
        self.nodes: list[Node] = []
        self.fleet: Fleet | None = None
        self.pg = pg
        kinds = {
            "nodes": lambda: {p for n in self.nodes if n.process.proc
                              for p in process_tree(n.process.pid)},
            "agents": lambda: {p.pid for p in (self.fleet.procs if self.fleet else ())
                               if p.proc is not None},
            "redis": lambda: {redis.proc.pid} if redis.proc else set(),
            "submitters": lambda: {os.getpid()},
        }  # fmt: skip
        if pg is not None:
            kinds["postgresql"] = pg.pids
        self.cpu = CpuMeter(kinds, parts={"postgresql": postgresql_part}).start()

    def begin(self) -> dict:
        counters = None
        if self.pg is not None:  # read before the phase's CPU is: its own statements are not
            self.pg.reset_statements()
            counters = self.pg.counters(connection.settings_dict["NAME"])
        return {
            "meter": self.cpu.reading(),
            "postgresql_parts": self.cpu.parts("postgresql"),
            "machine": cpu_by_kind(),
            "postgresql": counters,
            "at": time.time(),
        }

    def end(self, before: dict, jobs: int) -> dict:
        meter = self.cpu.reading()
        if self.pg is None:  # the shared server: its processes by command line, all of them
            meter["postgresql"] = cpu_by_kind().get("postgresql", 0.0)
            before["meter"]["postgresql"] = before["machine"].get("postgresql", 0.0)
        per_job = cpu_ms_per_job(before["meter"], meter, jobs)
        per_job["nodes_and_postgresql"] = round(
            per_job.get("nodes", 0) + per_job.get("postgresql", 0), 2
        )
        pids = {n.process.pid for n in self.nodes if n.process.proc}
        figures = {
            "cpu_ms_per_job": per_job,
            # The nodes' full collections of the garbage collector (tests/bench/gc_hook/).
            "nodes_gc": gc_pauses(pids, before["at"], time.time()),
            # The old reading: every process on the machine whose command line names a kind.
            "cpu_ms_per_job_whole_machine": cpu_ms_per_job(before["machine"], cpu_by_kind(), jobs),
        }
        if self.pg is not None:
            database = connection.settings_dict["NAME"]
            figures["statements"] = self.pg.statements(database, jobs)
            figures["postgresql"] = counted(before["postgresql"], self.pg.counters(database), jobs)
            # Whose the server's CPU was: the sessions of the nodes (and of the benchmark's own
            # reads), or the processes the server runs for itself (autovacuum, the WAL writer...).
            figures["postgresql_cpu_ms_per_job_by_part"] = cpu_ms_per_job(
                before["postgresql_parts"], self.cpu.parts("postgresql"), jobs
            )
        return figures


async def warm(meter: Meter, key, names, jobs: int) -> dict:
    """A flood of ``jobs`` before a phase is measured, so that the phase meets the nodes as a
    deployment's run: every pooled connection of both nodes has run the job path's statements
    since the ANALYZE that :func:`reset_jobs` ends with, after which PostgreSQL plans each
    prepared statement again on each connection (docs/PERFORMANCE.md, "Plans made again at
    every phase"). What the warm-up cost is recorded with the phase's figures."""
    before = await asyncio.to_thread(meter.begin)
    submitted = await submit_jobs(meter.nodes, key, names, jobs, None)
    await wait_printed(submitted, 120)
    cost = await asyncio.to_thread(meter.end, before, len(submitted))
    statements = cost.pop("statements", [])
    cost["statements"] = [row for row in statements if row["statement"] == "(all statements)"]
    return {"jobs": len(submitted), **cost}


async def phase(meter: Meter, key, names, jobs, rate, profile: str = "", warm_up: int = 0) -> dict:
    nodes, agents = meter.nodes, meter.fleet
    warmed = await warm(meter, key, names, warm_up) if warm_up else None
    spies = []
    if profile:  # node A, and the agent process of its devices
        spies.append(profiler(nodes[0].process.pid, profile))
        if agents is not None:
            spies.append(profiler(agents.procs[0].pid, f"agent-{profile}"))
    before = await asyncio.to_thread(meter.begin)
    submitted = await submit_jobs(nodes, key, names, jobs, rate)
    done = await wait_printed(submitted, 300, already=warmed["jobs"] if warmed else 0)
    cost = await asyncio.to_thread(meter.end, before, len(submitted))
    for spy in spies:
        await asyncio.to_thread(spy.stop)
    latencies = [(done[j] - t) * 1000 for j, t in submitted.items()]
    span = max(done.values()) - min(submitted.values())
    figures = latency_figures(latencies)
    figures["jobs_per_s"] = round(len(submitted) / span, 1)
    figures["steps_p50_ms"] = await database_sync_to_async(steps)(list(submitted))
    figures["slowest_ms"] = await database_sync_to_async(slowest)(submitted, done)
    figures.update(cost)
    if warmed is not None:
        figures["warm_up"] = warmed
    await database_sync_to_async(reset_jobs)()
    return figures


async def test_end_to_end(cluster, bench_result):
    url, nodes, tmp_path, redis, pg = cluster
    made = await database_sync_to_async(make_devices)(DEVICES)
    await database_sync_to_async(reset_jobs)()  # the first phase starts with the history too
    _, key = await database_sync_to_async(api.create_application_key)("bench", "bench")
    names = [name for _, name, _ in made]
    halves = []
    for i in range(2):
        path = tmp_path / f"tokens-{i}.txt"
        path.write_text("".join(f"{n} {t}\n" for _, n, t in made[i::2]))
        halves.append(path)
    meter = Meter(redis, pg)
    meter.nodes = nodes
    results: dict[str, dict] = {}

    async def with_fleet(label: str, args_of, phases, warm_up: int = 0):
        env = meter.nodes[0].process.env
        with Fleet(args_of, meter.nodes, halves, env) as fleet:
            meter.fleet = fleet
            await until(lambda n: n == DEVICES, 120, f"{label} ready")
            for name, jobs, rate in phases:
                profile = f"{label}-{name}" if PROFILE_DIR and rate is None else ""
                results[f"{label}/{name}"] = await phase(
                    meter, key, names, jobs, rate, profile, warm_up
                )
                print(f"{label}/{name}: {results[f'{label}/{name}']}", flush=True)
        meter.fleet = None
        await until(lambda n: n == 0, 60, f"{label} disconnected")

    try:
        if ONLY == "deployment":
            await compare_deployments(meter, url, redis, with_fleet, tmp_path)
            bench_result["figures"] = results
            bench_result["sizes"] = {"devices": DEVICES, "nodes": 2, "flood_jobs": FLOOD}
            bench_result["deployment"] = DEPLOYMENT
            return
        await run_variants(with_fleet, tmp_path, results, pg)
    finally:
        meter.cpu.stop()
    bench_result["figures"] = results
    bench_result["deployment"] = DEPLOYMENT
    if ONLY == "floods":
        bench_result["sizes"] = {"devices": DEVICES, "nodes": 2, "flood_jobs": FLOOD}
        return
    # The disk under PostgreSQL: its fsync stalls are the tail of a commit, hence of a job.
    bench_result["disk_fsync"] = await asyncio.to_thread(
        fsync_latency, pg.dir if pg is not None else tmp_path, 20
    )
    print(f"disk fsync: {bench_result['disk_fsync']}")
    floor_latency = await asyncio.to_thread(floor.run, url, LATENCY_JOBS, RATE)
    floor_flood = await asyncio.to_thread(floor.run, url, FLOOD, None)
    results["floor/latency"] = latency_figures(floor_latency["latencies_ms"])
    results["floor/throughput"] = {"jobs_per_s": round(floor_flood["jobs_per_s"], 1)}
    print(f"floor: {results['floor/latency']} {results['floor/throughput']}")

    floor_p50 = results["floor/latency"]["p50_ms"]
    ratios = {}
    ran = [v for v in ("push_http", "push_socket", "pushed") if f"{v}/latency" in results]
    for label in ran:
        p50 = results[f"{label}/latency"]["p50_ms"]
        ratios[f"poll_1s_p50_over_{label}_p50"] = round(
            results["poll_1s/latency"]["p50_ms"] / p50, 1
        )
        ratios[f"poll_5s_p50_over_{label}_p50"] = round(
            results["poll_5s/latency"]["p50_ms"] / p50, 1
        )
        ratios[f"{label}_p50_over_floor_p50"] = round(p50 / floor_p50, 1)
    ratios["postgresql_cpu_ms_per_job_max"] = max(
        results[f"{label}/throughput"]["cpu_ms_per_job"].get("postgresql", 0) for label in ran
    )
    bench_result["ratios"] = ratios
    bench_result["sizes"] = {
        "devices": DEVICES, "nodes": 2, "rate": RATE, "latency_jobs": LATENCY_JOBS,
        "flood_jobs": FLOOD, "submitters": SUBMITTERS, "poll_jobs": POLL_JOBS,
    }  # fmt: skip
    print(ratios)


#: How the nodes ran (recorded with the figures).
DEPLOYMENT = {
    "command": (
        "qprint-daphne -b 127.0.0.1 -p <port> --proxy-headers example_project.asgi:application"
    ),
    "settings": "example_project.settings defaults: DEBUG off, LOG_LEVEL INFO (key=value lines "
    "to a file), psycopg pool max 10, statements prepared at their first run with one generic "
    "plan per connection, heartbeat 20 s",
    "postgresql": "private server of the benchmark (tests/bench/postgres.py), PostgreSQL 15 "
    "defaults, pg_stat_statements",
}


async def run_variants(with_fleet, tmp_path, results, pg) -> None:
    push_phases = [("latency", LATENCY_JOBS, RATE), ("throughput", FLOOD, None)]
    if ONLY == "floods":
        push_phases = push_phases[1:]
    for label, operations in (("push_http", "http"), ("push_socket", "socket"), ("pushed", "push")):
        if VARIANTS and label not in VARIANTS:
            continue
        await with_fleet(label, agent_args(tmp_path, operations), push_phases, WARM_UP)
    if ONLY == "floods":
        return
    for interval in (1, 5):
        await with_fleet(
            f"poll_{interval}s", poller_args(interval), [("latency", POLL_JOBS, RATE / 2)]
        )


async def compare_deployments(meter, url, redis, with_fleet, tmp_path) -> None:
    """The socket-operation flood with the nodes as this benchmark used to run them and as
    deployed, alternating (old, deployed, old, deployed)."""
    for round_ in range(2):
        for label, deployed in (("bench_settings", False), ("as_deployed", True)):
            meter.nodes = await asyncio.to_thread(start_nodes, url, redis.url, as_deployed=deployed)
            try:
                await with_fleet(
                    f"{label}_{round_}",
                    agent_args(tmp_path / f"{label}{round_}", "socket"),
                    [("throughput", FLOOD, None)],
                )
            finally:
                for n in meter.nodes:
                    n.stop()
