"""What a node spends on one pushed job, in its own process: a job submitted with
``qprint.api.submit_job``, the wakeup handed to the device's socket, the claim and the assignment
pushed with its document inline, then ``RECEIVED``, ``SPOOLED`` and ``PRINTED`` sent as frames and
answered, on the example project's ASGI application (its interface driven straight: no Daphne, no
TCP; its start-up, which freezes what it made for the garbage collector, included), the example
project's settings, and PostgreSQL. No HTTP request: the submission is the domain's call, as host
code makes it. No Redis: one process, so Channels' in-memory layer carries the wakeup
(``REDIS_URL`` is ignored). What is left is the node's own Python per pushed job: the socket's
frames, the hand-offs to the database threads, the statements' binding and results, the logs. The
device sends its frames faster than ``MAX_FRAMES_PER_SECOND`` allows a device, so that limit is
lifted here.

Run alone, with ``DATABASE_URL`` naming a PostgreSQL server (its database ``qprint_node_job``, or
``NODE_JOB_DATABASE``, is made and migrated when missing):

    python -m tests.bench.node_job [jobs]                  # CPU per job (all threads)
    python -m tests.bench.node_job --instructions [jobs]   # instructions per job, under valgrind

``--instructions`` counts as ``tests.bench.agent_job`` does (the same warm-up, then no job and
``jobs`` jobs, under ``valgrind --tool=callgrind``; the difference over the jobs): two versions of
the node's code compare in one reading each, whatever else the machine does. PostgreSQL runs in
its own processes and is not counted. The socket's heartbeat is an hour, so that no ping falls
into the count however slowly valgrind runs the jobs; the logs go where the example project sends
them (standard error, ``LOG_LEVEL`` INFO by default), as a deployed node's do.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from qprint.core import event_loop
from tests.bench.machine import cpu_of_jobs, per_job_main
from tests.processes import database_url_of

WARM_UP = 100
#: The database it makes on ``DATABASE_URL``'s server (``NODE_JOB_DATABASE``: another, so that two
#: versions of the code count at once).
DATABASE = os.environ.get("NODE_JOB_DATABASE", "qprint_node_job")
DOCUMENT = b"%PDF-1.4\n" + b"0" * 2048


def _setup() -> None:
    """The example project's settings on ``DATABASE``, made and migrated when missing."""
    import environ
    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL server")
    server = environ.Env.db_url_config(url)
    with psycopg.connect(database_url_of({**server, "NAME": "postgres"}), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
            conn.execute(f"CREATE DATABASE {DATABASE}")
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DATABASE_URL": database_url_of({**server, "NAME": DATABASE}),
            "SECRET_KEY": "node-job-bench",
            "ALLOWED_HOSTS": "*",
            "QPRINT_HEARTBEAT_SECONDS": "3600",
        }
    )
    os.environ.pop("REDIS_URL", None)

    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    django.setup()
    call_command("migrate", verbosity=0)
    # A thread gives its connection back after 50 ms without a call; valgrind runs the jobs fifty
    # times slower, which would make that depend on the machine's speed. A busy node's threads
    # keep theirs (and give it back every HOLD_CALLS calls, as here).
    from qprint.core import executor

    executor.LINGER_SECONDS = 3600.0
    # One device's jobs back to back: more frames a second than a device may send.
    override_settings(QPRINT={**settings.QPRINT, "MAX_FRAMES_PER_SECOND": 10**6}).enable()


def _device() -> tuple[object, str]:
    """A fresh device of tenant ``bench`` (the last run's and its jobs deleted) and its token."""
    from qprint import api
    from qprint.models import Device

    Device.objects.filter(tenant="bench").delete()
    return api.create_device("bench", "node-job")


def _submit(device) -> None:
    from qprint import api

    api.submit_job(device.tenant, device, DOCUMENT, "application/pdf")


class DeviceSide:
    """The device's side of its socket, straight on the application's ASGI interface (two queues):
    no test communicator, whose every call patches Channels' ``close_old_connections``, in the
    count."""

    def __init__(self, token: str) -> None:
        # The example project's ASGI application, as Daphne serves it (its start-up included).
        from example_project.asgi import application

        self.inbound: asyncio.Queue = asyncio.Queue()
        self.outbound: asyncio.Queue = asyncio.Queue()
        scope = {
            "type": "websocket",
            "path": "/qprint/ws/device/",
            "raw_path": b"/qprint/ws/device/",
            "query_string": b"",
            "headers": [(b"authorization", f"Bearer {token}".encode())],
            "subprotocols": ["qprint.v1"],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        self.task = asyncio.ensure_future(application(scope, self.inbound.get, self.outbound.put))

    async def _output(self) -> dict:
        return await asyncio.wait_for(self.outbound.get(), 120)

    async def receive(self) -> dict:
        message = await self._output()
        assert message["type"] == "websocket.send", message
        return json.loads(message["text"])

    async def send(self, frame: dict) -> None:
        await self.inbound.put({"type": "websocket.receive", "text": json.dumps(frame)})

    async def open(self, push: int) -> None:
        """Connect, read hello, report the revisions applied and ask for pushed assignments."""
        await self.inbound.put({"type": "websocket.connect"})
        accepted = await self._output()
        assert accepted["type"] == "websocket.accept", accepted
        hello = await self.receive()
        await self.send(
            {
                "type": "state",
                "control_revision": hello["control"]["revision"],
                "settings_revision": hello["settings"]["revision"],
                "push": {"inline_max_bytes": push},
            }
        )

    async def close(self) -> None:
        await self.inbound.put({"type": "websocket.disconnect", "code": 1000})
        await asyncio.wait_for(self.task, 30)


async def _jobs(count: int) -> float:
    """CPU seconds of ``count`` pushed jobs on one socket, after :data:`WARM_UP` of them."""
    from channels.db import database_sync_to_async

    from tests.qprint.realtime.conftest import event_frame as event

    device, token = await database_sync_to_async(_device)()
    socket = DeviceSide(token)
    await socket.open(push=4096)
    submit = database_sync_to_async(_submit)

    async def one() -> None:
        await submit(device)
        assignment = await socket.receive()
        assert assignment["type"] == "assignment" and assignment["pushed"], assignment
        await socket.send(event("received", assignment, "RECEIVED"))
        answers = [await socket.receive()]
        await socket.send(event("spooled", assignment, "SPOOLED"))
        await socket.send(event("printed", assignment, "PRINTED"))
        answers += [await socket.receive(), await socket.receive()]
        assert all(a["type"] == "event_recorded" and a["status"] == 201 for a in answers), answers

    try:
        return await cpu_of_jobs(one, count, WARM_UP)
    finally:
        await socket.close()


def _cpu_seconds(jobs: int) -> float:
    _setup()
    return event_loop.run(_jobs(jobs))  # a node's loop (qprint-daphne): uvloop's, when installed


def main() -> None:
    per_job_main("tests.bench.node_job", __doc__.split("\n\n")[0], _cpu_seconds)


if __name__ == "__main__":
    main()
