"""The order a device socket handles its messages in (qprint.realtime.mailbox), with the server's
receive played by a queue as Daphne's is."""

from __future__ import annotations

import asyncio

import pytest

from qprint.realtime.mailbox import CLIENT_MESSAGES_HELD, Mailbox


def frame(n: int) -> dict:
    return {"type": "websocket.receive", "text": str(n)}


def own(n: int) -> dict:
    return {"type": "qprint.wake", "n": n}


async def take(mailbox: Mailbox, count: int) -> list[dict]:
    return [await asyncio.wait_for(mailbox.next(), 5) for _ in range(count)]


async def test_each_source_keeps_its_order_and_both_take_turns_when_both_wait():
    server = asyncio.Queue()
    mailbox = Mailbox(server.get)
    for n in range(3):
        server.put_nowait(frame(n))
        mailbox.deliver(own(n))
    await asyncio.sleep(0)  # the client's messages reach the mailbox
    try:
        taken = await take(mailbox, 6)
    finally:
        await mailbox.close()
    assert taken == [frame(0), own(0), frame(1), own(1), frame(2), own(2)]


async def test_a_reader_waiting_is_woken_by_either_source():
    server = asyncio.Queue()
    mailbox = Mailbox(server.get)
    try:
        waiting = asyncio.ensure_future(mailbox.next())
        await asyncio.sleep(0)
        assert not waiting.done()
        mailbox.deliver(own(1))
        assert await asyncio.wait_for(waiting, 5) == own(1)
        waiting = asyncio.ensure_future(mailbox.next())
        await asyncio.sleep(0)
        server.put_nowait(frame(2))
        assert await asyncio.wait_for(waiting, 5) == frame(2)
    finally:
        await mailbox.close()


async def test_arrived_takes_the_clients_messages_already_there_and_no_others():
    server = asyncio.Queue()
    mailbox = Mailbox(server.get)
    try:
        server.put_nowait(frame(1))
        server.put_nowait(frame(2))
        mailbox.deliver(own(1))
        assert await mailbox.arrived() == frame(1)
        assert await mailbox.arrived() == frame(2)
        assert await mailbox.arrived() is None  # the socket's own wait for their turn
        assert await take(mailbox, 1) == [own(1)]
    finally:
        await mailbox.close()


async def test_a_failed_receive_is_raised_after_what_arrived_before_it():
    arrived = [frame(1), frame(2)]

    async def receive() -> dict:
        if arrived:
            return arrived.pop(0)
        raise ConnectionResetError("the server went away")

    mailbox = Mailbox(receive)
    try:
        assert await take(mailbox, 2) == [frame(1), frame(2)]
        with pytest.raises(ConnectionResetError, match="went away"):
            await asyncio.wait_for(mailbox.next(), 5)
    finally:
        await mailbox.close()


async def test_the_client_is_not_read_past_its_disconnect_and_close_stops_the_reading():
    calls = 0
    server = asyncio.Queue()

    async def receive() -> dict:
        nonlocal calls
        calls += 1
        return await server.get()

    mailbox = Mailbox(receive)
    server.put_nowait({"type": "websocket.disconnect", "code": 1000})
    server.put_nowait(frame(9))  # a server never sends this; the mailbox must not read it
    assert await take(mailbox, 1) == [{"type": "websocket.disconnect", "code": 1000}]
    await mailbox.close()
    assert calls == 1
    assert server.qsize() == 1

    reading = Mailbox(server.get)
    assert await take(reading, 1) == [frame(9)]
    await reading.close()
    server.put_nowait(frame(10))
    await asyncio.sleep(0)
    assert server.qsize() == 1  # a closed mailbox takes nothing more from the server


async def test_the_mailbox_holds_a_few_client_messages_and_leaves_the_rest_in_the_servers_queue():
    server = asyncio.Queue()
    mailbox = Mailbox(server.get)
    count = 3 * CLIENT_MESSAGES_HELD
    for n in range(count):
        server.put_nowait(frame(n))
    try:
        await asyncio.sleep(0)  # the client's messages reach the mailbox, as many as it holds
        assert server.qsize() == count - CLIENT_MESSAGES_HELD
        assert await take(mailbox, CLIENT_MESSAGES_HELD // 2) == [
            frame(n) for n in range(CLIENT_MESSAGES_HELD // 2)
        ]
        await asyncio.sleep(0)  # half are taken: it takes more
        assert server.qsize() == count - CLIENT_MESSAGES_HELD - CLIENT_MESSAGES_HELD // 2
        taken = [await mailbox.arrived() for _ in range(count - CLIENT_MESSAGES_HELD // 2)]
        assert taken == [frame(n) for n in range(CLIENT_MESSAGES_HELD // 2, count)]
        assert server.qsize() == 0
        assert await mailbox.arrived() is None
    finally:
        await mailbox.close()
