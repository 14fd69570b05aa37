"""The ``state`` frames a node records together (``qprint.realtime.readies``): what a socket
waiting for its answer gets when the statement fails or the loop stops. That a burst's frames
share one statement, on the database, is in ``test_consumer.py``."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from django.db import OperationalError

from qprint.domain import connection
from qprint.realtime.readies import Readies


def ready(device_id: int) -> connection.Ready:
    return (device_id, uuid.uuid4(), 1, 1, 20.0)


async def test_every_state_of_a_failed_statement_gets_the_database_error(monkeypatch):
    def down(readies):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "mark_ready_many", down)
    readies = Readies()
    answers = await asyncio.gather(
        *(readies.mark(ready(device_id)) for device_id in (1, 2)), return_exceptions=True
    )
    assert [type(a) for a in answers] == [OperationalError, OperationalError]
    assert readies.running is None and readies.pending == []


async def test_states_waiting_when_the_loop_stops_are_cancelled_not_left_waiting(monkeypatch):
    """The node shutting down cancels the task that records them: the statement on its way and
    the frames waiting behind it end (cancelled) instead of waiting for ever."""
    inside, release = threading.Event(), threading.Event()

    def held(readies):
        inside.set()
        release.wait(10)
        return [None] * len(readies)

    monkeypatch.setattr(connection, "mark_ready_many", held)
    readies = Readies()
    first = asyncio.ensure_future(readies.mark(ready(1)))
    assert await asyncio.to_thread(inside.wait, 10)
    behind = asyncio.ensure_future(readies.mark(ready(2)))
    await asyncio.sleep(0)
    try:
        readies.running.cancel()
        for waiting in (first, behind):
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(waiting, 5)
        assert readies.pending == [] and readies.running is None
    finally:
        release.set()
