"""Real devices and real nodes for the multi-node tests: WebSocket clients (``websockets``), HTTP
calls (``httpx``) and Daphne nodes of the example project on the test database and a Redis of the
test's own; the waits on a device's row and a node's bus they share."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import websockets

from qprint.models import Device
from tests.processes import (
    REPO_ROOT,
    ManagedProcess,
    daphne_node,
    free_port,
    port_open,
    wait_for_other_sessions_to_end,
)
from tests.processes import database_url_of as database_url_of  # the realtime tests import it here
from tests.waiting import eventually, wait_until


def node_env(database_url: str, redis_url: str | None, node_id: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DATABASE_URL": database_url,
            "SECRET_KEY": "test-secret-key",
            "ALLOWED_HOSTS": "*",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(REPO_ROOT),
            "QQQ_NODE_ID": node_id,
            "QPRINT_HEARTBEAT_SECONDS": "1",
        }
    )
    env.pop("REDIS_URL", None)
    if redis_url:
        env["REDIS_URL"] = redis_url
    env.update(extra)
    return env


class Node:
    """A Daphne node of the example project."""

    def __init__(self, node_id: str, env: dict[str, str], **options: str):
        self.node_id = node_id
        self.port = free_port()
        self.process: ManagedProcess = daphne_node(node_id, self.port, env, **options)

    def start(self, timeout: float = 30) -> Node:
        self.process.start()
        wait_until(
            lambda: port_open(self.port) or not self.process.alive(),
            timeout,
            message=f"node {self.node_id} listening",
        )
        assert self.process.alive(), self.process.log()
        return self

    def stop(self) -> None:
        self.process.stop()

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/qprint/ws/device/"

    def log(self) -> str:
        return self.process.log()


async def nodes_done_with_sockets() -> None:
    """Wait until the nodes have closed every socket (cleared their rows): the database flush
    after the test (TRUNCATE, table by table) must not race a ping's multi-table statement."""
    from qprint.models import Device

    await eventually(
        lambda: not Device.objects.filter(connection_id__isnull=False).exists(),
        20,
        "nodes closed every socket",
        database=True,
    )


@contextlib.contextmanager
def two_nodes(
    database_url: str,
    redis_url: str | None,
    names: tuple[str, str] = ("node-a", "node-b"),
    django_db_blocker=None,
    **extra: str,
) -> Iterator[tuple[Node, Node]]:
    """Nodes A and B of the example project on one database and one Redis, started, and stopped
    at the end once their database sessions are gone (``extra``: more environment for both)."""
    a, b = (Node(name, node_env(database_url, redis_url, name, **extra)) for name in names)
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()
        wait_for_other_sessions_to_end(django_db_blocker)


class RealDevice:
    """A device on a real socket: reads frames, applies control/settings, pings on time."""

    def __init__(
        self, token: str, *, ping: bool = True, apply: bool = True, push: int | None = None
    ):
        self.token = token
        #: Ask for pushed assignments, documents of up to this many bytes inline (None: no push).
        self.push = push
        self.ping_enabled = ping
        self.apply = apply
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seen: list[dict[str, Any]] = []
        self.close_code: int | None = None
        self.closed = asyncio.Event()
        self.hello: dict[str, Any] = {}
        self.control_revision = 0
        self.settings_revision = 0
        self.ws: Any = None
        self._tasks: list[asyncio.Task] = []

    async def connect(self, url: str) -> RealDevice:
        self.ws = await websockets.connect(
            url,
            subprotocols=["qprint.v1"],
            additional_headers={"Authorization": f"Bearer {self.token}"},
            open_timeout=10,
            ping_interval=None,
        )
        self.hello = json.loads(await self.ws.recv())
        assert self.hello["type"] == "hello", self.hello
        self.control_revision = self.hello["control"]["revision"]
        self.settings_revision = self.hello["settings"]["revision"]
        await self.send_state()
        self._tasks = [asyncio.ensure_future(self._read())]
        if self.ping_enabled:
            self._tasks.append(asyncio.ensure_future(self._ping()))
        return self

    @property
    def heartbeat(self) -> float:
        return float(self.hello.get("heartbeat_seconds", 1))

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def send_state(self) -> None:
        state = {
            "type": "state",
            "control_revision": self.control_revision,
            "settings_revision": self.settings_revision,
        }
        if self.push is not None:
            state["push"] = {"inline_max_bytes": self.push}
        await self.send(state)

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                frame = json.loads(text)
                self.seen.append(frame)
                if frame["type"] == "control":
                    self.control_revision = frame["revision"]
                elif frame["type"] == "settings":
                    self.settings_revision = frame["revision"]
                if frame["type"] in ("control", "settings") and self.apply:
                    await self.send_state()
                await self.frames.put(frame)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.close_code = self.ws.close_code
            self.closed.set()

    async def _ping(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                await asyncio.sleep(self.heartbeat)
                await self.send({"type": "ping"})

    async def frame(self, frame_type: str, timeout: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {frame_type} frame within {timeout}s; seen {self.seen}")
            try:
                frame = await asyncio.wait_for(self.frames.get(), remaining)
            except TimeoutError:
                continue
            if frame["type"] == frame_type:
                return frame

    async def wait_closed(self, timeout: float = 10) -> int | None:
        await asyncio.wait_for(self.closed.wait(), timeout)
        return self.close_code

    def stop_pinging(self) -> None:
        for task in self._tasks[1:]:
            task.cancel()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()


async def upgrade_status(
    url: str, token: str | None, subprotocols=("qprint.v1",), headers: dict | None = None
) -> int:
    """The HTTP status a refused upgrade answers (101 when it is accepted); ``headers``: more
    headers of the upgrade request."""
    headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    try:
        ws = await websockets.connect(
            url,
            subprotocols=list(subprotocols) or None,
            additional_headers=headers,
            open_timeout=10,
        )
    except websockets.InvalidStatus as exc:
        return exc.response.status_code
    await ws.close()
    return 101


class Http:
    """The HTTP API of a node, as the application and the device call it."""

    def __init__(self, app_key: str):
        self.app_key = app_key
        self.client = httpx.AsyncClient(timeout=20)

    async def submit(self, node: Node, device_name: str, title: str = "job") -> httpx.Response:
        import base64

        return await self.client.post(
            f"{node.http}/qprint/api/v1/jobs",
            headers={"Authorization": f"Bearer {self.app_key}"},
            json={
                "device": device_name,
                "title": title,
                "content_type": "application/pdf",
                "content_base64": base64.b64encode(b"%PDF-1.4 " + title.encode()).decode(),
            },
        )

    async def claim(self, node: Node, token: str) -> httpx.Response:
        return await self.client.post(
            f"{node.http}/qprint/api/v1/device/claim",
            headers={"Authorization": f"Bearer {token}"},
        )

    async def event(
        self, node: Node, token: str, job_id: str, claim_id: str, event_type: str
    ) -> httpx.Response:
        import uuid
        from datetime import UTC, datetime

        return await self.client.post(
            f"{node.http}/qprint/api/v1/device/jobs/{job_id}/events",
            headers={"Authorization": f"Bearer {token}"},
            json={
                "event_id": str(uuid.uuid4()),
                "type": event_type,
                "claim_id": claim_id,
                "occurred_at": datetime.now(UTC).isoformat(),
            },
        )

    async def app(self, method: str, node: Node, path: str, **kwargs) -> httpx.Response:
        return await self.client.request(
            method,
            f"{node.http}/qprint/api/v1/{path}",
            headers={"Authorization": f"Bearer {self.app_key}"},
            **kwargs,
        )

    async def close(self) -> None:
        await self.client.aclose()


def bus_is_up(node: Node) -> bool:
    """What the node's /metrics says of its bus (its probe passes)."""
    from tests.exposition import value

    return value(httpx.get(f"{node.http}/metrics", timeout=10).text, "qprint_bus_up") == 1


def row(device_id: int) -> Device:
    return Device.objects.get(pk=device_id)


async def ready(device: Device) -> None:
    await eventually(
        lambda: row(device.pk).connection_ready, 10, f"{device.name} ready", database=True
    )
