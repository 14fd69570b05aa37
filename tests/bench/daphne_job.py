"""What a node spends on one pushed job as deployed, counted in instructions: the node started
with the docs' command (``qprint-daphne``, the example project's settings and defaults, INFO logs
to standard error, Redis for its channel layer) under ``valgrind --tool=callgrind``; each job
submitted through the application API over HTTP, pushed to the device's WebSocket with its
document inline, and its ``RECEIVED``, ``SPOOLED`` and ``PRINTED`` sent as frames and answered.
Unlike ``tests.bench.node_job`` (the node's own Python, in process), Daphne, Twisted, autobahn,
the HTTP request and the channel layer's Redis are in the count.

    python -m tests.bench.daphne_job [jobs]     # DATABASE_URL, REDIS_URL; valgrind installed

The node runs ``WARM_UP`` jobs first; then ``callgrind_control`` zeroes its count, the jobs run,
and the count is dumped: the instructions of all the node's threads over those jobs, per job
(its heartbeat is an hour, so no ping falls in the count; the node's timers, its bus's and its
cluster reads, do, a few per second of a run slowed fifty times: the count repeats to about 1 %).
``BENCH_DAPHNE_MODULE=daphne`` starts plain ``python -m daphne`` instead (asyncio's own loop),
to compare the two loops on the same code. The device and the submissions are this process's,
outside the count; the database is ``DATABASE_URL``'s server (``qprint_daphne_job``, made and
migrated when missing).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WARM_UP = 50
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


async def _jobs(base: str, token: str, key: str, jobs: int, pid: int) -> None:
    """``WARM_UP`` jobs, then ``jobs`` jobs between the zeroing of the node's count and its dump."""
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

        async def one() -> None:
            submission = {
                "device": "daphne-job",
                "content_type": "application/pdf",
                "content_base64": DOCUMENT,
            }
            answer = await client.post("/qprint/api/v1/jobs", json=submission)
            assert answer.status_code == 201, answer.text
            assignment = json.loads(await socket.recv())
            assert assignment["type"] == "assignment" and assignment["pushed"], assignment
            await socket.send(json.dumps(event("received", assignment, "RECEIVED")))
            answers = [json.loads(await socket.recv())]
            await socket.send(json.dumps(event("spooled", assignment, "SPOOLED")))
            await socket.send(json.dumps(event("printed", assignment, "PRINTED")))
            answers += [json.loads(await socket.recv()), json.loads(await socket.recv())]
            assert all(a["type"] == "event_recorded" and a["status"] == 201 for a in answers)

        for _ in range(WARM_UP):
            await one()
        _control("--zero", str(pid))
        for _ in range(jobs):
            await one()
        _control("--dump", str(pid))


def instructions_per_job(jobs: int) -> float:
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
    )
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="qprint-daphne-job-") as directory:
        out = Path(directory) / "callgrind.out"
        command = python("-m", MODULE, "-b", "127.0.0.1", "-p", str(port))
        node = ManagedProcess(
            "daphne-job",
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command,
             "example_project.asgi:application"],
            env,
        ).start()  # fmt: skip
        try:
            wait_until(
                lambda: port_open(port) or not node.alive(), 900, message="the node listening"
            )
            assert node.alive(), node.log()
            asyncio.run(_jobs(f"http://127.0.0.1:{port}", token, key, jobs, node.pid))
            dumps = sorted(Path(directory).glob("callgrind.out.*"), key=os.path.getmtime)
            counted = re.search(r"^(?:summary|totals): (\d+)", dumps[-1].read_text(), re.M)
            assert counted is not None, dumps[-1]
            return int(counted.group(1)) / jobs
        finally:
            node.stop()


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    per_job = instructions_per_job(jobs)
    print(json.dumps({"module": MODULE, "jobs": jobs, "instructions_per_job": round(per_job)}))


if __name__ == "__main__":
    main()
