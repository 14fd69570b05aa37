"""Fixtures of the realtime tests: devices with tokens, sockets on the consumer in-process, and
for the modules that start real nodes, a Redis of their own and the database's URL."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from qprint import api
from qprint.models import Device
from qprint.realtime import bus, drain, socket_db
from qprint.routing import websocket_urlpatterns
from tests.qprint.realtime.cluster import two_nodes

SOCKET_PATH = "/qprint/ws/device/"


def redis_layers(url: str) -> dict[str, Any]:
    """``CHANNEL_LAYERS`` for the Redis at ``url``, as a node of several configures it."""
    return {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": url}]},
        }
    }


async def close_bus(device_bus: bus.DeviceBus) -> None:
    """Stop a bus, and close the connections of its layers (before their Redis stops)."""
    await device_bus.stop()
    await device_bus.layer.flush()
    await device_bus.publishing.flush()


@pytest.fixture(scope="module")
def redis():
    """A Redis of the module's own (its nodes' channel layer)."""
    from tests.processes import RedisServer

    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis_restored(redis):
    """A test that stops Redis gets it back, for the next test."""
    from tests.processes import port_open

    yield redis
    if not port_open(redis.port):
        redis.start()


@pytest.fixture
async def devices(transactional_db):
    """Make devices with tokens, as real clients of the module's nodes; close their sockets after
    the test, and wait until the nodes are done with them."""
    from tests.qprint.realtime.cluster import RealDevice, nodes_done_with_sockets

    made = []

    async def make(name: str, **kwargs):
        device, token = await database_sync_to_async(api.create_device)("acme", name)
        real = RealDevice(token, **kwargs)
        made.append(real)
        return device, real

    yield make
    for real in made:
        await real.close()
    await nodes_done_with_sockets()


@pytest.fixture(scope="module")
def database_url(django_db_setup, django_db_blocker):
    """The test database's URL, for the module's nodes."""
    from django.db import connection

    from tests.processes import database_url_of

    with django_db_blocker.unblock():
        return database_url_of(connection.settings_dict)


@pytest.fixture(scope="module")
def nodes(redis, database_url, django_db_blocker):
    """Two real nodes of the example project over the module's Redis and the test database (a
    module that needs other settings defines its own)."""
    with two_nodes(database_url, redis.url, django_db_blocker=django_db_blocker) as both:
        yield both


@pytest.fixture
def device_factory(transactional_db):
    """Make devices (committed, so the socket's own database threads see them).

    Call it from sync code, or as ``await adb(make)`` from an async test.
    """
    counter = {"n": 0}

    def make(tenant: str = "acme", name: str | None = None):
        counter["n"] += 1
        device, token = api.create_device(tenant, name or f"desk-{counter['n']}")
        return device, token

    return make


@pytest.fixture
def device_and_token(device_factory):
    return device_factory()


async def adb(func, *args, **kwargs):
    """Run database code from an async test (closing its connection after, like Channels)."""
    return await database_sync_to_async(func)(*args, **kwargs)


def event_frame(request_id: str, assignment: dict, kind: str) -> dict:
    """An ``event`` request frame reporting ``kind`` for an assignment the device was given."""
    import uuid
    from datetime import UTC, datetime

    return {
        "type": "event",
        "request_id": request_id,
        "job_id": assignment["job_id"],
        "event_id": str(uuid.uuid4()),
        "event_type": kind,
        "claim_id": assignment["claim_id"],
        "occurred_at": datetime.now(UTC).isoformat(),
    }


@pytest.fixture
def app_key(transactional_db):
    """An application key of tenant ``acme``."""
    _, secret = api.create_application_key("acme", "backend")
    return secret


@pytest.fixture
async def http(app_key):
    """The HTTP API of the module's nodes, as the application and the devices call it."""
    from tests.qprint.realtime.cluster import Http

    client = Http(app_key)
    yield client
    await client.close()


def row(device_id: int) -> Device:
    return Device.objects.get(pk=device_id)


def submit(device, **kwargs):
    job, _ = api.submit_job(device.tenant, device, b"%PDF-1.4 test", "application/pdf", **kwargs)
    return job


async def wait_ready(device_id: int) -> None:
    from tests.waiting import wait_until

    await adb(lambda: wait_until(lambda: row(device_id).connection_ready, 5, message="ready"))


@pytest.fixture
def short_heartbeat(settings):
    settings.QPRINT = {"HEARTBEAT_SECONDS": 0.3}


def application():
    from channels.routing import URLRouter

    return URLRouter(websocket_urlpatterns)


class DeviceSocket:
    """A device's socket on the consumer, in-process (channels' WebsocketCommunicator)."""

    def __init__(self, token: str | None, subprotocols=("qprint.v1",), headers=None):
        hdrs = list(headers or [])
        if token is not None:
            hdrs.append((b"authorization", f"Bearer {token}".encode()))
        self.communicator = WebsocketCommunicator(
            application(), SOCKET_PATH, headers=hdrs, subprotocols=list(subprotocols)
        )
        self.close_code: int | None = None

    async def connect(self, timeout: float = 5):
        return await self.communicator.connect(timeout=timeout)

    async def send(self, frame: dict[str, Any] | str) -> None:
        text = frame if isinstance(frame, str) else json.dumps(frame)
        await self.communicator.send_to(text_data=text)

    async def receive(self, timeout: float = 5) -> dict[str, Any]:
        message = await self.communicator.receive_output(timeout)
        if message["type"] == "websocket.close":
            self.close_code = message.get("code")
            raise AssertionError(f"socket closed with {self.close_code}, expected a frame")
        return json.loads(message["text"])

    async def receive_close(self, timeout: float = 5) -> int:
        """Read until the close; returns the close code (frames before it are skipped)."""
        while True:
            message = await self.communicator.receive_output(timeout)
            if message["type"] == "websocket.close":
                self.close_code = message.get("code")
                return self.close_code

    async def nothing(self, timeout: float = 0.3) -> bool:
        return await self.communicator.receive_nothing(timeout)

    async def hello_and_ready(self, push: int | None = None) -> dict[str, Any]:
        """Connect, read hello, report the revisions applied (``push``: asking for pushed
        assignments with documents of up to that many bytes inline); returns hello."""
        connected, subprotocol = await self.connect()
        assert connected and subprotocol == "qprint.v1"
        hello = await self.receive()
        assert hello["type"] == "hello"
        await self.report_state(hello, push)
        return hello

    async def report_state(self, hello: dict[str, Any], push: int | None = None) -> None:
        """The ``state`` frame: the revisions ``hello`` gave applied (``push``: as above)."""
        state = {
            "type": "state",
            "control_revision": hello["control"]["revision"],
            "settings_revision": hello["settings"]["revision"],
        }
        if push is not None:
            state["push"] = {"inline_max_bytes": push}
        await self.send(state)

    async def close(self) -> None:
        await self.communicator.disconnect()


@pytest.fixture
async def sockets():
    """Open sockets get closed (and their background work stopped) after the test."""
    opened: list[DeviceSocket] = []

    def open_socket(token, **kwargs) -> DeviceSocket:
        s = DeviceSocket(token, **kwargs)
        opened.append(s)
        return s

    yield open_socket
    for s in opened:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(s.close(), 10)
    _communicators_did_not_overlap()
    loop = asyncio.get_running_loop()
    for b in bus.all_buses():
        if b.loop is loop:
            await asyncio.wait_for(b.stop(), 10)
    watch = drain._watches.pop(loop, None)
    if watch is not None:
        await asyncio.wait_for(watch.stop(), 10)
    await loop.run_in_executor(None, socket_db.close_connections)


def _communicators_did_not_overlap() -> None:
    """Each call of a Channels test communicator patches ``channels.db.close_old_connections``
    while it runs; two calls that overlap (``gather`` of two sockets' ``connect``) unwind out of
    order and leave it patched for the rest of the run, so the connections of every later
    ``database_sync_to_async`` call outlive their tests (a module's teardown then waits for
    them in vain). Put it back, and fail the test that did it: send the inputs, then read the
    outputs one socket after the other."""
    import channels.db
    import django.db

    if channels.db.close_old_connections is django.db.close_old_connections:
        return
    channels.db.close_old_connections = django.db.close_old_connections
    pytest.fail("two test communicator calls overlapped: read one socket's output at a time")


def observe_statements(monkeypatch) -> list[str]:
    """The SQL of every statement the sockets' database threads run from now on, in order; not
    the node's own reads of its ``cluster_node`` row (the drain watch, every 2 s), which run on
    the same threads."""
    statements: list[str] = []

    def observe(execute, sql, params, many, context):
        if '"cluster_node"' not in sql:
            statements.append(sql)
        return execute(sql, params, many, context)

    monkeypatch.setattr(socket_db, "statement_observer", observe)
    return statements
