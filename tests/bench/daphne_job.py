"""What a node spends on one pushed job as deployed, timed, or counted in instructions under
``valgrind --tool=callgrind``: the node started with the docs' command (``qprint-daphne``, the
example project's settings and defaults, INFO logs to standard error, Redis for its channel
layer); each job submitted through the application API over HTTP, pushed to the device's
WebSocket with its document inline, and its ``RECEIVED``, ``SPOOLED`` and ``PRINTED`` sent as
frames and answered. Unlike ``tests.bench.node_job`` (the node's own Python, in process), Daphne,
Twisted, autobahn, the HTTP request and the channel layer's Redis are in the count.

    python -m tests.bench.daphne_job [jobs]                  # the node's time per job
    python -m tests.bench.daphne_job --instructions [jobs]   # instructions; valgrind installed

DATABASE_URL and REDIS_URL name the servers. ``--instructions``: the node runs ``WARM_UP`` jobs
first; then ``callgrind_control`` zeroes its count, the jobs run, and the count is dumped: the
instructions of all the node's threads over those jobs, per job (its heartbeat is an hour, so no
ping falls in the count; the node's timers, its bus's and its cluster reads, do, a few per second
of a run slowed fifty times: the count repeats to about 1 %). ``BENCH_DAPHNE_MODULE=daphne`` starts
plain ``python -m daphne`` instead (asyncio's own loop), to compare the two loops on the same code.
The device and the submissions are this process's, outside the count; the database is
``DATABASE_URL``'s server (``qprint_daphne_job``, made and migrated when missing).

Without ``--instructions``, the same node runs without valgrind and times each job from the
submission's start to the device's last answer, with its spans: the submission's ``201`` (the HTTP
client's own time included), the assignment after it, ``RECEIVED``'s answer, and the answers of
``SPOOLED`` and ``PRINTED``; and the CPU per job of the node and of this process (the client's and
the device's). One job every ``PACE`` seconds: the node is idle between jobs, as in the end-to-end
benchmark's 5 jobs/s, and the device's frames stay well under ``MAX_FRAMES_PER_SECOND``. The device
answers at once, so the time is the node's and PostgreSQL's, and the client's.
``BENCH_DAPHNE_LOG_LEVEL`` sets the node's ``LOG_LEVEL`` (the example project's INFO when unset);
``BENCH_PROFILE=<dir>`` records the node with py-spy over the timed jobs (``tests.bench.profile``:
``BENCH_PROFILE_GIL=1``, ``BENCH_PROFILE_RATE``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

WARM_UP = 50
#: The timed run: seconds between one job's last answer and the next submission.
PACE = 0.1
#: The timed run: a job's spans, in order (ms).
SPANS = ("submission", "assignment", "received", "reports")
DOCUMENT = base64.b64encode(b"%PDF-1.4\n" + b"0" * 2048).decode()
#: The node's command: ``qprint.daphne`` as the docs deploy it, or ``daphne`` (plain Daphne).
MODULE = os.environ.get("BENCH_DAPHNE_MODULE", "qprint.daphne")


def _device_and_key() -> tuple[str, str]:
    """A fresh device of tenant ``bench`` (the last run's and its jobs deleted): its token, and
    an application key of the tenant."""
    os.environ.setdefault("NODE_JOB_DATABASE", "qprint_daphne_job")
    from tests.bench import node_job

    node_job._setup()  # the example project's settings on that database, migrated
    from qprint import api
    from qprint.models import ApplicationKey, Device

    Device.objects.filter(tenant="bench").delete()
    ApplicationKey.objects.filter(tenant="bench").delete()
    _, token = api.create_device("bench", "daphne-job")
    _, key = api.create_application_key("bench", "daphne-job")
    return token, key


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=600)


async def _jobs(
    base: str,
    token: str,
    key: str,
    jobs: int,
    *,
    started: Callable[[], None],
    finished: Callable[[], None],
    pace: float = 0.0,
) -> list[dict[str, float]]:
    """``WARM_UP`` jobs, then ``jobs`` jobs between ``started()`` and ``finished()``, ``pace``
    seconds apart: the spans of each of those (ms, :data:`SPANS` and ``total``)."""
    import httpx
    import websockets

    from tests.qprint.realtime.conftest import event_frame as event

    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx.AsyncClient(base_url=base, timeout=600, headers=headers) as client,
        websockets.connect(
            base.replace("http", "ws", 1) + "/qprint/ws/device/",
            additional_headers={"Authorization": f"Bearer {token}"},
            subprotocols=["qprint.v1"],
            open_timeout=600,
            ping_interval=None,
        ) as socket,
    ):
        hello = json.loads(await socket.recv())
        state = {
            "type": "state",
            "control_revision": hello["control"]["revision"],
            "settings_revision": hello["settings"]["revision"],
            "push": {"inline_max_bytes": 4096},
        }
        await socket.send(json.dumps(state))

        async def one() -> dict[str, float]:
            submission = {
                "device": "daphne-job",
                "content_type": "application/pdf",
                "content_base64": DOCUMENT,
            }
            marks = [time.perf_counter()]
            answer = await client.post("/qprint/api/v1/jobs", json=submission)
            assert answer.status_code == 201, answer.text
            marks.append(time.perf_counter())
            assignment = json.loads(await socket.recv())
            assert assignment["type"] == "assignment" and assignment["pushed"], assignment
            marks.append(time.perf_counter())
            await socket.send(json.dumps(event("received", assignment, "RECEIVED")))
            answers = [json.loads(await socket.recv())]
            marks.append(time.perf_counter())
            await socket.send(json.dumps(event("spooled", assignment, "SPOOLED")))
            await socket.send(json.dumps(event("printed", assignment, "PRINTED")))
            answers += [json.loads(await socket.recv()), json.loads(await socket.recv())]
            marks.append(time.perf_counter())
            assert all(a["type"] == "event_recorded" and a["status"] == 201 for a in answers), (
                answers
            )
            pairs = zip(SPANS, itertools.pairwise(marks), strict=True)
            spans = {name: (b - a) * 1000 for name, (a, b) in pairs}
            return {**spans, "total": (marks[-1] - marks[0]) * 1000}

        for _ in range(WARM_UP):
            await one()
            if pace:
                await asyncio.sleep(pace)
        started()
        timed = []
        for _ in range(jobs):
            timed.append(await one())
            if pace:
                await asyncio.sleep(pace)
        finished()
        return timed


@contextlib.contextmanager
def _node(prefix: list[str], **extra: str) -> Iterator[tuple[str, str, str, object]]:
    """The node (its command after ``prefix``), listening: its base URL, the device's token,
    the application key and the process."""
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")  # the set-up drops it
    token, key = _device_and_key()  # Django set up first: what follows imports models
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per submission is noise
    from tests.bench.deployed import deployed_env
    from tests.processes import ManagedProcess, free_port, port_open, python
    from tests.waiting import wait_until

    env = deployed_env(
        os.environ["DATABASE_URL"],
        redis_url,
        "daphne-job",
        QPRINT_HEARTBEAT_SECONDS="3600",
        **extra,
    )
    port = free_port()
    command = python("-m", MODULE, "-b", "127.0.0.1", "-p", str(port))
    node = ManagedProcess(
        "daphne-job", [*prefix, *command, "example_project.asgi:application"], env
    ).start()
    try:
        wait_until(lambda: port_open(port) or not node.alive(), 900, message="the node listening")
        assert node.alive(), node.log()
        yield f"http://127.0.0.1:{port}", token, key, node
    finally:
        node.stop()


def instructions_per_job(jobs: int) -> float:
    with tempfile.TemporaryDirectory(prefix="qprint-daphne-job-") as directory:
        out = Path(directory) / "callgrind.out"
        counting = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        with _node(counting) as (base, token, key, node):
            asyncio.run(
                _jobs(
                    base, token, key, jobs,
                    started=lambda: _control("--zero", str(node.pid)),
                    finished=lambda: _control("--dump", str(node.pid)),
                )
            )  # fmt: skip
        dumps = sorted(Path(directory).glob("callgrind.out.*"), key=os.path.getmtime)
        counted = re.search(r"^(?:summary|totals): (\d+)", dumps[-1].read_text(), re.M)
        assert counted is not None, dumps[-1]
        return int(counted.group(1)) / jobs


def latency(jobs: int) -> dict:
    """The node's time per job, paced: p50/p90/p99 of the whole job, the median
    of each span, and the CPU per job of the node and of this process (the client and the
    device, whose time is in the spans too)."""
    from tests.bench.common import latency_figures
    from tests.bench.machine import own_cpu_seconds, process_cpu_seconds
    from tests.bench.profile import PROFILE_DIR, profiler

    level = os.environ.get("BENCH_DAPHNE_LOG_LEVEL")
    cpu: list[tuple[float, float]] = []
    spies = []
    with _node([], **({"LOG_LEVEL": level} if level else {})) as (base, token, key, node):

        def started() -> None:
            if PROFILE_DIR:  # before the first reading: the profiler's start is not counted
                spies.append(profiler(node.pid, "daphne_job-latency"))
            cpu.append((process_cpu_seconds(node.pid), own_cpu_seconds()))

        def finished() -> None:
            cpu.append((process_cpu_seconds(node.pid), own_cpu_seconds()))
            for spy in spies:
                spy.stop()

        timed = asyncio.run(
            _jobs(base, token, key, jobs, pace=PACE, started=started, finished=finished)
        )
    (node_before, own_before), (node_after, own_after) = cpu
    return {
        "module": MODULE,
        "log_level": level or "INFO",
        "jobs": jobs,
        **latency_figures([job["total"] for job in timed]),
        "spans_p50_ms": {
            name: round(statistics.median(job[name] for job in timed), 2) for name in SPANS
        },
        "node_cpu_ms_per_job": round((node_after - node_before) * 1000 / jobs, 3),
        "client_cpu_ms_per_job": round((own_after - own_before) * 1000 / jobs, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", type=int, nargs="?", help="500 timed, 200 counted")
    parser.add_argument("--instructions", action="store_true")
    args = parser.parse_args()
    if not args.instructions:
        print(json.dumps(latency(500 if args.jobs is None else args.jobs)))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    jobs = 200 if args.jobs is None else args.jobs
    per_job = instructions_per_job(jobs)
    print(json.dumps({"module": MODULE, "jobs": jobs, "instructions_per_job": round(per_job)}))


if __name__ == "__main__":
    main()
