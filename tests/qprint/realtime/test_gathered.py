"""The statements a node gathers while one is on its way (``qprint.realtime.gathered``): what a
socket waiting for its answer gets when the statement fails or the loop stops, and which calls
may share a statement. That a burst's upgrades and ``state`` frames share one, on the database,
is in ``test_consumer.py``."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from django.db import OperationalError

from qprint.domain import connection
from qprint.realtime.gathered import Gathered, _mark_ready_many


def ready(device_id: int) -> connection.Ready:
    return (device_id, uuid.uuid4(), 1, 1, 20.0)


async def test_every_call_of_a_failed_statement_gets_the_database_error(monkeypatch):
    def down(readies):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "mark_ready_many", down)
    readies = Gathered(_mark_ready_many)
    answers = await asyncio.gather(
        *(readies.call(ready(device_id)) for device_id in (1, 2)), return_exceptions=True
    )
    assert [type(a) for a in answers] == [OperationalError, OperationalError]
    assert readies.running is None and readies.pending == []


async def test_a_replaced_connection_is_answered_replaced(monkeypatch):
    monkeypatch.setattr(connection, "mark_ready_many", lambda readies: [None] * len(readies))
    with pytest.raises(connection.Replaced):
        await Gathered(_mark_ready_many).call(ready(1))


async def test_calls_waiting_when_the_loop_stops_are_cancelled_not_left_waiting(monkeypatch):
    """The node shutting down cancels the task that runs them: the statement on its way and
    the calls waiting behind it end (cancelled) instead of waiting for ever."""
    inside, release = threading.Event(), threading.Event()

    def held(readies):
        inside.set()
        release.wait(10)
        return [None] * len(readies)

    monkeypatch.setattr(connection, "mark_ready_many", held)
    readies = Gathered(_mark_ready_many)
    first = asyncio.ensure_future(readies.call(ready(1)))
    assert await asyncio.to_thread(inside.wait, 10)
    behind = asyncio.ensure_future(readies.call(ready(2)))
    await asyncio.sleep(0)
    try:
        readies.running.cancel()
        for waiting in (first, behind):
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(waiting, 5)
        assert readies.pending == [] and readies.running is None
    finally:
        release.set()


async def test_calls_of_one_key_never_share_a_statement_and_keep_their_order():
    """Two upgrades of one device (one token) wait for separate statements, the later in a later
    one, so the newest connection still takes the row last; the others go on together."""
    inside, release = threading.Event(), threading.Event()
    batches: list[list[str]] = []

    def many(calls: list[str]) -> list[str]:
        batches.append(calls)
        if len(batches) == 1:
            inside.set()
            release.wait(10)
        return [call.upper() for call in calls]

    upgrades = Gathered(many, key=lambda call: call[0])  # one device per first letter
    first = asyncio.ensure_future(upgrades.call("a1"))
    assert await asyncio.to_thread(inside.wait, 10)
    behind = [asyncio.ensure_future(upgrades.call(call)) for call in ("b1", "a2", "c1", "a3")]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(first, *behind) == ["A1", "B1", "A2", "C1", "A3"]
    assert batches == [["a1"], ["b1", "a2", "c1"], ["a3"]]
