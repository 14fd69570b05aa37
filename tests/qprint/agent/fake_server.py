"""A small in-process qprint server for protocol-level tests of the agent.

It speaks the device side of docs/API.md and docs/PROTOCOL.md on one port (HTTP API and
socket, like a node), keeps its state in plain dicts, and lets a test script it: queue jobs,
change control, send frames, close sockets with a code, refuse tokens, fail requests. It proves
the agent's behaviour against the protocol; the real server is exercised by the end-to-end tests.
"""

import asyncio
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import websockets
from websockets.asyncio.server import ServerConnection

RANK = {"QUEUED": 0, "CLAIMED": 1, "RECEIVED": 2, "SPOOLED": 3}
FINAL = {"PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED", "EXPIRED"}


def rank(status: str) -> int:
    return 4 if status in FINAL else RANK[status]


@dataclass
class FakeDevice:
    token: str
    control_revision: int = 1
    paused: bool = False
    settings_revision: int = 1
    settings: dict = field(default_factory=dict)
    applied: tuple[int, int] | None = None
    socket: ServerConnection | None = None
    connections: int = 0
    printers: list | None = None
    printer_reports: int = 0

    @property
    def ready(self) -> bool:
        return (
            self.socket is not None
            and self.applied == (self.control_revision, self.settings_revision)
            and not self.paused
        )


@dataclass
class FakeJob:
    id: str
    token: str
    data: bytes
    title: str = "doc"
    content_type: str = "application/pdf"
    status: str = "QUEUED"
    claim_id: str | None = None
    sha256_override: str | None = None
    printer: str | None = None
    options: dict = field(default_factory=dict)
    #: What the claim says instead of the job's own document URL (a hostile server's).
    document_url: str | None = None


class FakeServer:
    def __init__(self, heartbeat: float = 1.0):
        self.heartbeat = heartbeat
        self.devices: dict[str, FakeDevice] = {}
        self.jobs: dict[str, FakeJob] = {}
        self.events: dict[str, dict] = {}  # event_id -> body (first delivery)
        self.event_log: list[tuple[str, dict, int]] = []  # (job_id, body, status answered)
        self.command_results: dict[str, dict] = {}
        self.claims = 0
        self.frames: list[dict] = []
        self.refuse_upgrade: int | None = None
        #: Upgrades answered with ``refuse_upgrade``'s status.
        self.refused_upgrades = 0
        self.fail_event_posts = 0
        #: Events of these types answered 503 once each (an outage while they are recorded).
        self.fail_event_types: list[str] = []
        #: Whether a list of events is answered (else 422, as by a server before lists).
        self.takes_event_lists = True
        #: How many events each POST to an events endpoint carried, in order.
        self.event_posts: list[int] = []
        #: Downloads answered 503 before the document is served again.
        self.fail_downloads = 0
        self._front: asyncio.base_events.Server | None = None
        self._ws_server = None
        self.port = 0

    # -- scripting ---------------------------------------------------------------------------

    def add_device(self, token: str | None = None) -> FakeDevice:
        device = FakeDevice(token or uuid.uuid4().hex)
        self.devices[device.token] = device
        return device

    def add_job(self, device: FakeDevice, data: bytes, **kwargs: Any) -> FakeJob:
        job = FakeJob(str(uuid.uuid4()), device.token, data, **kwargs)
        self.jobs[job.id] = job
        return job

    async def send(self, device: FakeDevice, frame: dict) -> None:
        assert device.socket is not None
        await device.socket.send(json.dumps(frame))

    async def close(self, device: FakeDevice, code: int, reason: str = "") -> None:
        assert device.socket is not None
        await device.socket.close(code, reason)

    def events_of(self, job: FakeJob) -> list[dict]:
        return [
            body for job_id, body, status in self.event_log if job_id == job.id and status < 300
        ]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/qprint/"

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> "FakeServer":
        self._ws_server = await websockets.serve(
            self._socket,
            "127.0.0.1",
            0,
            subprotocols=["qprint.v1"],
            process_request=self._check_upgrade,
        )
        ws_port = self._ws_server.sockets[0].getsockname()[1]
        self._ws_port = ws_port
        self._front = await asyncio.start_server(self._front_door, "127.0.0.1", 0)
        self.port = self._front.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for device in self.devices.values():
            if device.socket is not None:
                await device.socket.close(1001)
        self._ws_server.close()
        self._front.close()
        await self._ws_server.wait_closed()

    # -- one port for HTTP and the socket ----------------------------------------------------

    async def _front_door(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        if b"upgrade: websocket" in head.lower():
            await self._pipe_to_socket_server(head, reader, writer)
            return
        while True:
            await self._http(head, reader, writer)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                return

    async def _pipe_to_socket_server(self, head, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._ws_port)
        up_writer.write(head)

        async def pump(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    async def _http(self, head: bytes, reader, writer) -> None:
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        token = headers.get("authorization", "").removeprefix("Bearer ").strip()
        status, payload, content_type = self._route(method, path, token, body)
        if isinstance(payload, bytes):
            raw = payload
        elif payload is None:
            raw = b""
        else:
            raw = json.dumps(payload).encode()
        extra = "" if status == 204 else f"Content-Length: {len(raw)}\r\n"
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{extra}\r\n".encode() + raw
        )
        await writer.drain()

    def _route(self, method: str, path: str, token: str, body: bytes):
        device = self.devices.get(token)
        if device is None:
            return 401, {"error": "unauthorized", "message": "bad token"}, "application/json"
        parts = path.removeprefix("/qprint/api/v1/device/").strip("/").split("/")
        data = json.loads(body) if body else None
        if method == "POST" and parts == ["claim"]:
            return self._claim(device)
        if method == "GET" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "document":
            job = self.jobs.get(parts[1])
            if (
                job is None
                or job.token != token
                or job.status not in ("CLAIMED", "RECEIVED", "SPOOLED")
            ):
                return 404, {"error": "not_found", "message": ""}, "application/json"
            if self.fail_downloads > 0:
                self.fail_downloads -= 1
                return 503, {"error": "unavailable", "message": ""}, "application/json"
            return 200, job.data, job.content_type
        if method == "POST" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "events":
            self.event_posts.append(len(data) if isinstance(data, list) else 1)
            if not isinstance(data, list):
                return self._event(device, parts[1], data)
            if not self.takes_event_lists:  # as a server that takes one event per request
                return 422, {"error": "invalid", "message": "an object"}, "application/json"
            job = self.jobs.get(parts[1])
            if job is None or job.token != token:  # not the device's job: the whole list
                return 404, {"error": "not_found", "message": ""}, "application/json"
            results = []
            for item in data:
                status, answer, _ = self._event(device, parts[1], item)
                results.append(
                    {"status": status, **(answer if status >= 400 else {"event": answer})}
                )
            return 200, {"results": results}, "application/json"
        if method == "POST" and len(parts) == 3 and parts[0] == "commands":
            self.command_results[parts[1]] = data
            return 200, {"ok": True}, "application/json"
        if method == "PUT" and parts == ["printers"]:
            device.printers = data["printers"]
            return 200, {"ok": True}, "application/json"
        return 404, {"error": "not_found", "message": path}, "application/json"

    def _claim(self, device: FakeDevice):
        self.claims += 1
        if not device.ready:
            code = "paused" if device.paused else "not_ready"
            return 409, {"error": code, "message": ""}, "application/json"
        mine = [j for j in self.jobs.values() if j.token == device.token]
        held = [j for j in mine if j.status == "CLAIMED"]
        job = held[0] if held else next((j for j in mine if j.status == "QUEUED"), None)
        if job is None:
            return 204, None, "application/json"
        if job.status == "QUEUED":
            job.status, job.claim_id = "CLAIMED", str(uuid.uuid4())
        return (
            200,
            {
                "job_id": job.id,
                "claim_id": job.claim_id,
                "printer": job.printer,
                "title": job.title,
                "content_type": job.content_type,
                "size": len(job.data),
                "sha256": job.sha256_override or hashlib.sha256(job.data).hexdigest(),
                "options": job.options,
                "priority": 0,
                "document_url": job.document_url or f"/qprint/api/v1/device/jobs/{job.id}/document",
                "created_at": "2026-01-01T00:00:00Z",
            },
            "application/json",
        )

    def _event(self, device: FakeDevice, job_id: str, body: dict):
        if self.fail_event_posts > 0 or body.get("type") in self.fail_event_types:
            if body.get("type") in self.fail_event_types:
                self.fail_event_types.remove(body["type"])
            else:
                self.fail_event_posts -= 1
            return 503, {"error": "unavailable", "message": ""}, "application/json"
        job = self.jobs[job_id]
        first = self.events.get(body["event_id"])
        if first is not None:
            status = 200 if first == body else 409
            self.event_log.append((job_id, body, status))
            if status == 409:
                return 409, {"error": "event_conflict", "message": ""}, "application/json"
            return 200, {"status": job.status}, "application/json"
        if body["claim_id"] != job.claim_id:
            self.event_log.append((job_id, body, 409))
            return 409, {"error": "stale_claim", "message": ""}, "application/json"
        if job.status == "CANCELLED":
            self.event_log.append((job_id, body, 409))
            return 409, {"error": "job_cancelled", "message": ""}, "application/json"
        kind = body["type"]
        if job.status in FINAL or rank(
            kind if kind in RANK or kind in FINAL else job.status
        ) < rank(job.status):
            self.event_log.append((job_id, body, 409))
            return 409, {"error": "backwards", "message": ""}, "application/json"
        self.events[body["event_id"]] = body
        self.event_log.append((job_id, body, 201))
        if kind != "PROGRESS":
            job.status = kind
        return 201, {"status": job.status}, "application/json"

    # -- the socket --------------------------------------------------------------------------

    def _check_upgrade(self, connection, request):
        if self.refuse_upgrade is not None:
            self.refused_upgrades += 1
            return connection.respond(self.refuse_upgrade, "refused\n")
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if token not in self.devices:
            return connection.respond(403, "bad token\n")
        return None

    async def _socket(self, ws: ServerConnection) -> None:
        token = ws.request.headers["Authorization"].removeprefix("Bearer ").strip()
        device = self.devices[token]
        if device.socket is not None:
            await device.socket.close(4000, "replaced")
        device.socket, device.applied = ws, None
        device.connections += 1
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "connection_id": str(uuid.uuid4()),
                    "node": "fake",
                    "heartbeat_seconds": self.heartbeat,
                    "control": {"revision": device.control_revision, "paused": device.paused},
                    "settings": {"revision": device.settings_revision, "values": device.settings},
                    "active_jobs": [
                        {"job_id": job.id, "claim_id": job.claim_id, "status": job.status}
                        for job in self.jobs.values()
                        if job.token == token and job.status in ("RECEIVED", "SPOOLED")
                    ],
                }
            )
        )
        try:
            async for message in ws:
                frame = json.loads(message)
                self.frames.append(frame)
                if frame["type"] == "state":
                    device.applied = (frame["control_revision"], frame["settings_revision"])
                elif frame["type"] == "printers":
                    device.printers = frame["printers"]
                    device.printer_reports += 1
        except websockets.ConnectionClosed:
            pass
        finally:
            if device.socket is ws:
                device.socket = None
