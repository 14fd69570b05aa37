"""Django's test client with its requests sent as ASGI through ``qprint.routing.
http_application``: qprint's direct routes are answered by :mod:`qprint.views.direct`, every
other request by Django's ASGI handler behind it, as on a node.

The API tests run with both clients (``tests/qprint/views/conftest.py``), so every answer they
check is checked on the direct path too.
"""

import asyncio
import json

from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.http import HttpResponse
from django.test import Client

from qprint.routing import http_application


def asgi_scope(environ: dict) -> tuple[dict, bytes]:
    """The ASGI scope and body of the WSGI ``environ`` Django's ``RequestFactory`` builds."""
    headers = [
        (key[5:].replace("_", "-").lower().encode("latin1"), str(value).encode("latin1"))
        for key, value in environ.items()
        if key.startswith("HTTP_")
    ]
    for key, name in (("CONTENT_TYPE", b"content-type"), ("CONTENT_LENGTH", b"content-length")):
        if environ.get(key):
            headers.append((name, str(environ[key]).encode("latin1")))
    body = environ["wsgi.input"].read()  # what was sent, whatever Content-Length declares
    # As Daphne decodes a path: percent-escapes that are no UTF-8 become U+FFFD.
    path = environ["PATH_INFO"].encode("iso-8859-1").decode("utf-8", errors="replace")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": environ["REQUEST_METHOD"],
        "scheme": environ.get("wsgi.url_scheme", "http"),
        "path": path,
        "raw_path": path.encode("utf-8", errors="surrogateescape"),
        "query_string": environ.get("QUERY_STRING", "").encode("latin1"),
        "root_path": "",
        "headers": headers,
        "client": (environ.get("REMOTE_ADDR", "127.0.0.1"), 50000),
        "server": (environ.get("SERVER_NAME", "testserver"), int(environ.get("SERVER_PORT", 80))),
    }
    return scope, body


async def call(app, scope: dict, body: bytes) -> tuple[int, list, bytes]:
    """Run ``app`` on one request: its status, headers and body."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # the client stays connected until it has the answer
        raise AssertionError("unreachable")

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], start["headers"], content


class _Django:
    """Django's ASGI handler, with the test's database connection left open by its request
    signals, as Django's own test clients leave it."""

    def __init__(self) -> None:
        self.handler = ASGIHandler()

    async def __call__(self, scope: dict, receive, send) -> None:
        request_started.disconnect(close_old_connections)
        request_finished.disconnect(close_old_connections)
        try:
            await self.handler(scope, receive, send)
        finally:
            request_started.connect(close_old_connections)
            request_finished.connect(close_old_connections)


class DirectClient(Client):
    """A test client whose requests go through ``http_application`` as ASGI."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.app = http_application(_Django())

    def request(self, **request):
        scope, body = asgi_scope(self._base_environ(**request))
        status, headers, content = async_to_sync(call)(self.app, scope, body)
        response = HttpResponse(content, status=status)
        for name, value in headers:
            response.headers[name.decode("latin1")] = value.decode("latin1")
        response.json = lambda: json.loads(content)
        response.request = request
        response.client = self
        return response
