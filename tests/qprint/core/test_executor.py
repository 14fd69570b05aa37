"""The hand-off from the event loop to threads (``qprint.core.handoff``) and the node's database
threads around it (``qprint.core.executor``): a busy thread keeps its pooled connection, an idle
one gives it back."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from qprint.core.handoff import Workers


async def test_a_call_s_result_and_its_exception_come_back_to_the_caller():
    workers = Workers(2, "test-handoff")
    try:
        assert await workers.run(lambda: 41 + 1) == 42
        with pytest.raises(ZeroDivisionError):
            await workers.run(lambda: 1 / 0)
        assert workers.submit(lambda: "sync").result(5) == "sync"
    finally:
        workers.shutdown()


async def test_one_thread_runs_the_calls_in_the_order_they_were_made():
    workers = Workers(1, "test-order")
    seen: list[int] = []
    try:
        await asyncio.gather(*(workers.run(lambda n=n: seen.append(n)) for n in range(50)))
    finally:
        workers.shutdown()
    assert seen == list(range(50))


async def test_a_cancelled_caller_does_not_stop_its_call():
    workers = Workers(1, "test-cancel")
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(10)
        finished.set()

    try:
        task = asyncio.ensure_future(workers.run(slow))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        assert await asyncio.to_thread(finished.wait, 10)
    finally:
        workers.shutdown()


async def test_idle_runs_on_the_thread_once_it_has_had_nothing_to_do_for_the_linger():
    idled: list[int] = []
    idle = threading.Event()

    def on_idle() -> None:
        idled.append(threading.get_ident())
        idle.set()

    busy = Workers(1, "test-busy", idle=on_idle, linger=30)
    quiet = Workers(1, "test-quiet", idle=on_idle, linger=0.05)
    try:
        for _ in range(20):  # one after the other, each well within the linger
            await busy.run(threading.get_ident)
        assert idled == []
        ran_on = await quiet.run(threading.get_ident)
        assert await asyncio.to_thread(idle.wait, 10), "idle never ran"
        assert idled == [ran_on]
    finally:
        busy.shutdown()
        quiet.shutdown()


@pytest.mark.services
@pytest.mark.django_db
def test_a_pooled_node_s_thread_keeps_its_connection_while_busy_and_gives_it_back_when_idle():
    """With the example project's pool, calls made one after the other take one connection from
    the pool, not one each (docs/PERFORMANCE.md, "A connection kept while busy"); a thread with
    nothing to do gives it back, and one that stays busy gives it back every ``HOLD_CALLS``
    calls so that other threads waiting on the pool get a turn. The cursors ``fetch`` keeps go
    with their connection from one thread to another."""
    from django.db import connection

    from tests.processes import database_url_of, run_example_project

    if connection.vendor != "postgresql":
        pytest.skip("Django's pool is PostgreSQL's")
    result = run_example_project(
        "-m",
        "tests.qprint.core.pooled_threads",
        SECRET_KEY="test",
        DATABASE_URL=database_url_of(connection.settings_dict),
        DATABASE_POOL="on",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "back_to_back_checkouts": 1,
        "backends": 1,
        "given_back": True,
        "hold_calls_plus_one_checkouts": 2,
        # A statement's cursor is kept on the connection, and goes with it through the pool.
        "one_cursor_per_backend": True,
        "a_backend_served_both_sets": True,
    }
