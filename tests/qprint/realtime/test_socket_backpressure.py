"""A device that floods its socket while the socket is busy is held back by TCP, not by the
node's memory (``qprint.views.web_server``, ``qprint.realtime.mailbox``), on a real Daphne node:
the socket's first operation waits on the device's row, locked by the test, while the device
sends frames behind it. The node stops reading the socket once a few frames wait unhandled: the
device's bytes stay in its own buffer and the node's resident memory grows by a few frames' worth.
Once the lock goes, the waiting operation is answered and the frames behind it are handled in
order; the socket then works as before (operations, autobahn's pings, the device's close)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest
import websockets

from qprint import api
from qprint.models import Device
from tests.processes import listening_node
from tests.qprint.realtime.conftest import adb, wait_ready
from tests.waiting import eventually

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MiB = 1024 * 1024
#: One frame as large as Daphne lets through (its message cap is 1 MiB).
LARGEST = "x" * (MiB - 1024)
#: The node's growth allowed while a device offers hundreds of MiB: the 16 frames a socket keeps
#: unhandled, and the node's own work meanwhile.
GROWTH_ALLOWED = 40 * MiB


def resident(pid: int) -> int:
    """The process's resident set now (``VmRSS``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/<pid>/status")


def claim_waits_on_a_lock(database_url: str) -> bool:
    """Whether the claim's statement (it locks the device's row first) waits on a lock."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE 'WITH gate AS%'"
        ).fetchone()
    return row[0] == 1


class NotReading:
    """Whether the node stopped reading the client's socket: the client's buffer holds more than
    ``at_least`` bytes and none of them has left for a second (a node that reads, however
    slowly, takes some every second)."""

    def __init__(self, ws, at_least: int) -> None:
        self.ws = ws
        self.at_least = at_least
        self.buffered = -1
        self.since = time.monotonic()

    def __call__(self) -> bool:
        buffered = self.ws.transport.get_write_buffer_size()
        if buffered != self.buffered:
            self.buffered, self.since = buffered, time.monotonic()
        return buffered > self.at_least and time.monotonic() - self.since >= 1.0


class FloodingDevice:
    """A device on a real socket whose sends go into its buffer at once (no waiting for the
    node to read them); the frames the node sends are kept in ``frames``."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.frames: list[dict] = []
        self.hello: dict = {}
        self._reader: asyncio.Future | None = None

    async def start(self) -> None:
        self.hello = json.loads(await self.ws.recv())
        assert self.hello["type"] == "hello", self.hello
        self._reader = asyncio.ensure_future(self._read())
        await self.send(
            {
                "type": "state",
                "control_revision": self.hello["control"]["revision"],
                "settings_revision": self.hello["settings"]["revision"],
            }
        )

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for text in self.ws:
                self.frames.append(json.loads(text))

    async def send(self, frame: dict | str) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def answers(self, request_id: str) -> list[str]:
        return [f["type"] for f in self.frames if f.get("request_id") == request_id]

    async def closed(self, timeout: float = 10) -> int | None:
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return self.ws.close_code

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 5)


@pytest.fixture
def node(subprocess_env):
    with listening_node("backpressure", {**subprocess_env, "QQQ_NODE_ID": "backpressure"}) as (
        url,
        process,
    ):
        yield url.replace("http://", "ws://") + "/qprint/ws/device/", process


@contextlib.asynccontextmanager
async def busy_socket(
    url: str, database_url: str
) -> AsyncIterator[tuple[FloodingDevice, int, Callable[[], None]]]:
    """A ready device whose ``claim`` (request ``stalled``) waits on its row, locked by the test
    until it calls the ``release`` given: ``(device, device id, release)``."""
    device, token = await adb(api.create_device, "acme", "front-desk")
    ws = await websockets.connect(
        url,
        subprotocols=["qprint.v1"],
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=10,
        ping_interval=None,
        write_limit=512 * MiB,  # the device's frames go into its buffer at once
    )
    real = FloodingDevice(ws)
    lock = psycopg.connect(database_url)  # a transaction, open until released
    try:
        await real.start()
        await wait_ready(device.pk)
        lock.execute("SELECT id FROM qprint_device WHERE id = %s FOR UPDATE", [device.pk])
        await real.send({"type": "claim", "request_id": "stalled"})
        await eventually(lambda: claim_waits_on_a_lock(database_url), 10, "the claim's wait")
        yield real, device.pk, lock.rollback
    finally:
        lock.close()
        await real.stop()


async def test_a_device_flooding_a_busy_socket_fills_its_own_buffer_not_the_nodes_memory(
    node, live_database_url
):
    url, process = node
    async with busy_socket(url, live_database_url) as (device, _, release):
        before = resident(process.pid)
        offered = 224
        for _ in range(offered):
            await device.send(LARGEST)
        not_reading = NotReading(device.ws, at_least=8 * MiB)
        await eventually(
            not_reading,
            10,
            lambda: (
                f"the node to stop reading the socket (the client's buffer holds "
                f"{not_reading.buffered / MiB:.0f} of the {offered} MiB offered; the node grew "
                f"{(resident(process.pid) - before) / MiB:.0f} MiB)"
            ),
            interval=0.1,
        )
        grown = resident(process.pid) - before
        assert grown < GROWTH_ALLOWED, f"the node grew {grown / MiB:.0f} MiB"

        release()
        assert await device.closed() == 4400  # the flood's first frame is too large
        assert device.answers("stalled") == ["nothing"], device.frames
        assert device.frames[-1]["type"] == "error", device.frames


async def test_a_socket_read_again_after_its_frames_waited_handles_them_all_and_still_works(
    node, live_database_url
):
    """Frames within every limit, more than the node and the kernel hold while the socket is
    busy, each one answered: once the lock goes, every frame is handled, in the order sent (the
    answers' request ids are those sent, in order, none missing), and autobahn's pings and the
    device's close work."""
    async with busy_socket(node[0], live_database_url) as (device, device_id, release):
        # 200 claims padded to 60 KB (under MAX_FRAME_BYTES, within the allowance's burst): 12 MB.
        sent = [f"flood-{n}" for n in range(200)]
        for request_id in sent:
            await device.send({"type": "claim", "request_id": request_id, "padding": "x" * 60_000})
        not_reading = NotReading(device.ws, at_least=MiB)
        await eventually(not_reading, 10, "the node to stop reading the socket", interval=0.1)

        release()
        await eventually(lambda: device.answers(sent[-1]), 10, "the answer to the last claim")
        answered = [f.get("request_id") for f in device.frames]
        assert answered == ["stalled", *sent], answered
        assert {f["type"] for f in device.frames} == {"nothing"}, device.frames
        assert device.ws.transport.get_write_buffer_size() == 0

        pong = await device.ws.ping()
        await asyncio.wait_for(pong, 5)  # autobahn answers the device's pings
        await device.ws.close()
        assert await device.closed() == 1000
        await eventually(
            lambda: Device.objects.get(pk=device_id).connection_id is None,
            10,
            "the node to release the device's row at the device's close",
            database=True,
        )
