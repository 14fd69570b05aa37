"""A real webhook receiver for tests: an HTTP server on 127.0.0.1 that verifies every delivery
with the ``standardwebhooks`` library, as an application would."""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    secrets: list[str] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    hold: threading.Event | None = None  # while set, the first request waits (answers nothing)
    received: list[Received] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: set[str] = field(default_factory=set)
    server: ThreadingHTTPServer | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    tls: ssl.SSLContext | None = None  # serve https with this context
    server_names: list[str] = field(default_factory=list)  # the TLS server names (SNI) asked for

    def start(self, port: int = 0) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                webhook_id = headers.get("webhook-id", "")
                with receiver.lock:
                    receiver.started.append(webhook_id)
                    if webhook_id in receiver.in_flight:
                        receiver.overlaps.append(webhook_id)
                    receiver.in_flight.add(webhook_id)
                try:
                    if receiver.hold is not None and receiver.hold.is_set():
                        while receiver.hold.is_set():
                            time.sleep(0.05)
                        return  # the sender is gone: answer nothing
                    if receiver.delay:
                        time.sleep(receiver.delay)
                    verified = receiver.verify(body, headers)
                    with receiver.lock:
                        receiver.received.append(
                            Received(webhook_id, headers, body, verified, time.monotonic())
                        )
                    self.send_response(receiver.status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                finally:
                    with receiver.lock:
                        receiver.in_flight.discard(webhook_id)

        self.server = ThreadingHTTPServer(("127.0.0.1", port or self.port), Handler)
        if self.tls is not None:
            self.tls.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def verify(self, body: bytes, headers: dict[str, str]) -> bool:
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
                return True
            except WebhookVerificationError:
                continue
        return False

    def ok(self) -> list[Received]:
        """Deliveries answered 2xx and verified."""
        with self.lock:
            return [r for r in self.received if r.verified] if self.status < 300 else []

    def ids(self) -> set[str]:
        return {r.webhook_id for r in self.ok()}
