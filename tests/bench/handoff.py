"""What one database call costs a node before its statement: the hand-off from the event loop to
a database thread and back, the pool's connection, Django's connect and cursor (benchmark 15 of
docs/PERFORMANCE.md, run by ``bench_handoff.py`` in a process of the example project's own).

    DEBUG=1 DATABASE_URL=postgres://... python -m tests.bench.handoff [calls]

Prints one JSON object: for each way of making a call, the process's CPU per call (all its
threads, ``RUSAGE_SELF``) and the wall time per call (p50/p99), measured in interleaved rounds so
that each way sees the same machine:

- ``hop``: ``Workers.run`` of a function that does nothing: the loop puts the call on a queue, a
  thread wakes, runs it and hands the result back to the loop (``call_soon_threadsafe``);
- ``threads``: ``DatabaseThreads.run`` of the same: the hop with what the node wraps around every
  database call (the caller's context, the connection given back to the pool);
- ``statement``: ``DatabaseThreads.run`` of ``SELECT 1`` through Django's pooled connection (the
  example project's pool): what a one-statement call costs;
- ``kept``: ``Workers.run`` of the same ``SELECT 1`` on a connection kept outside the pool (the
  hand-off and the statement, without the pool's round trip and Django's connect and close);
- ``inline``: the same ``SELECT 1`` on the loop's own thread, its connection kept (no hop, no
  pool): what the statement alone costs this process;
- ``async``: the same ``SELECT 1`` awaited on psycopg's ``AsyncConnection``, kept (no thread: the
  loop waits for the socket), what a statement run on the loop would cost;
- ``async_pool``: the same through psycopg_pool's ``AsyncConnectionPool`` (a connection taken and
  given back per call, as the node's threads do with Django's pool);
- ``journal``: the agent's side of the same hand-off, a read of its journal (``AsyncJournal.job``
  of a job it does not hold: a SQLite ``SELECT`` on the device's journal thread), which the agent
  makes a few times per job;
- ``agent_job``: what the agent spends on a whole pushed job, per job (not per call): an
  assignment with its document inline taken by ``JobRunner.handle`` (its journal on this
  machine's disk, three commits with an fsync), the null printer, the reports sent on a socket
  whose answers come at once, to the job's last acknowledgement (:mod:`tests.bench.agent_job`).

And what a device socket spends to take one client message to its handler, the socket's read
loop kept running (each call puts a message in the server's queue, as Daphne does, and waits
until the handler has it):

- ``dispatch_channels``: Channels' ``await_many_dispatch`` over the client and the socket's own
  queue (``asyncio.wait`` and a new task per message), the consumer's loop before the mailbox;
- ``dispatch``: :class:`qprint.realtime.mailbox.Mailbox`, the consumer's loop now.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.machine import own_cpu_seconds

ROUNDS = 10
#: A pushed job is measured once for this many calls of the other ways (it makes several).
JOB_PER_CALLS = 20


class _Dispatched:
    """A socket's read loop over the server's queue and its own, kept running between calls."""

    def __init__(self, mailbox: bool) -> None:
        from channels.utils import await_many_dispatch

        from qprint.realtime.mailbox import Mailbox

        self.server: asyncio.Queue[dict] = asyncio.Queue()
        self.handled: asyncio.Future | None = None
        if mailbox:
            self.box = Mailbox(self.server.get)
            self.reading = asyncio.ensure_future(self._mailbox_loop())
        else:
            own: asyncio.Queue[dict] = asyncio.Queue()
            self.reading = asyncio.ensure_future(
                await_many_dispatch([self.server.get, own.get], self._handle)
            )

    async def _mailbox_loop(self) -> None:
        try:
            while True:
                await self._handle(await self.box.next())
        finally:
            await self.box.close()

    async def _handle(self, message: dict) -> None:
        self.handled.set_result(message)

    async def __call__(self) -> None:
        self.handled = asyncio.get_running_loop().create_future()
        self.server.put_nowait({"type": "websocket.receive", "text": "{}"})
        await self.handled

    async def close(self) -> None:
        self.reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.reading


async def _measure(run, calls: int) -> tuple[float, list[float]]:
    walls = []
    cpu = own_cpu_seconds()
    for _ in range(calls):
        started = time.perf_counter()
        await run()
        walls.append((time.perf_counter() - started) * 1e6)
    return (own_cpu_seconds() - cpu) * 1e6, walls


async def main(calls: int) -> dict:
    from django.db import connection, connections

    from qprint.core.executor import DatabaseThreads, pooled
    from qprint.core.handoff import Workers

    def nothing() -> None:
        return None

    def select_1_on(own) -> None:
        with own.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    workers = Workers(4, "bench-hop")
    threads = DatabaseThreads("bench", threads=4)
    # The inline way keeps a connection of its own, outside the pool.
    inline_settings = {**connections["default"].settings_dict}
    inline_settings["OPTIONS"] = {
        k: v for k, v in inline_settings.get("OPTIONS", {}).items() if k != "pool"
    }
    wrapper = connections.create_connection("default").__class__
    inline, kept = wrapper(inline_settings, "inline"), wrapper(inline_settings, "kept")
    inline.ensure_connection()
    kept.inc_thread_sharing()  # one call at a time, on whichever thread takes it

    async def inline_call() -> None:
        select_1_on(inline)

    # The same connection parameters as Django's (the example project's prepare_threshold too).
    import psycopg
    import psycopg_pool

    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    on_loop = await psycopg.AsyncConnection.connect(**params, autocommit=True)
    pool = psycopg_pool.AsyncConnectionPool(
        kwargs={**params, "autocommit": True}, min_size=2, max_size=4, open=False
    )
    await pool.open(wait=True)

    async def select_1_async(own) -> None:
        cursor = await own.execute("SELECT 1")
        await cursor.fetchone()

    async def async_pool_call() -> None:
        async with pool.connection() as own:
            await select_1_async(own)

    from qprint.agent.journal_thread import AsyncJournal
    from tests.bench.agent_job import pushed_job

    journal_dir = tempfile.TemporaryDirectory(prefix="bench-journal-")
    journal = AsyncJournal(Path(journal_dir.name) / "bench.journal.sqlite3", "bench")

    dispatched = {"dispatch_channels": _Dispatched(False), "dispatch": _Dispatched(True)}
    job_journal = AsyncJournal(Path(journal_dir.name) / "job.journal.sqlite3", "job")
    ways = {
        "hop": lambda: workers.run(nothing),
        "threads": lambda: threads.run(nothing),
        # ``connection`` resolves to the connection of the thread running the call (pooled)
        "statement": lambda: threads.run(select_1_on, connection),
        "kept": lambda: workers.run(lambda: select_1_on(kept)),
        "inline": inline_call,
        "async": lambda: select_1_async(on_loop),
        "async_pool": async_pool_call,
        "journal": lambda: journal.job("not-held"),
        **dispatched,
        "agent_job": pushed_job(job_journal),
    }
    for run in ways.values():  # warm: threads started, pool filled, statements prepared
        for _ in range(50):
            await run()
    cpu = dict.fromkeys(ways, 0.0)
    walls: dict[str, list[float]] = {name: [] for name in ways}
    per_round = max(1, calls // ROUNDS)
    for _ in range(ROUNDS):
        for name, run in ways.items():
            count = max(1, per_round // JOB_PER_CALLS) if name == "agent_job" else per_round
            spent, wall = await _measure(run, count)
            cpu[name] += spent
            walls[name].extend(wall)
    inline.close()
    await on_loop.close()
    await pool.close()
    await journal.close()
    await job_journal.close()
    journal_dir.cleanup()
    for loop in dispatched.values():
        await loop.close()
    await workers.run(kept.close)
    kept.dec_thread_sharing()
    threads.shutdown()
    workers.shutdown()
    out: dict = {"calls": per_round * ROUNDS, "pooled": pooled()}
    out["agent_jobs"] = len(walls["agent_job"])
    for name in ways:
        ordered = sorted(walls[name])
        out[name] = {
            "cpu_us_per_call": round(cpu[name] / len(ordered), 1),
            "wall_p50_us": round(statistics.median(ordered), 1),
            "wall_p99_us": round(ordered[int(len(ordered) * 0.99) - 1], 1),
        }
    out["dispatch_channels_over_dispatch_cpu"] = round(
        out["dispatch_channels"]["cpu_us_per_call"] / out["dispatch"]["cpu_us_per_call"], 2
    )
    out["statement_over_inline_cpu"] = round(
        out["statement"]["cpu_us_per_call"] / out["inline"]["cpu_us_per_call"], 1
    )
    return out


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    # The inline way blocks the loop on purpose (the floor): Django would refuse it there.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"
    import django

    django.setup()
    print(json.dumps(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000))))
