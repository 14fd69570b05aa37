"""The floors qprint is compared with, served by the same Daphne as a node.

- HTTP: an ASGI app that answers ``{"ok": true}`` without Django (the cost of Daphne alone).
- WebSocket ``/ws/<n>``: a bare Channels consumer in group ``bare.<n>`` on the example
  project's channel layer (``REDIS_URL``), which forwards a ``bare.wake`` message as a text frame:
  the floor of a cross-node wake (``group_send`` from another process, same layer).

    daphne -b 127.0.0.1 -p PORT tests.bench.bare_asgi:application
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

BODY = b'{"ok": true}'


async def http_app(scope, receive, send):
    while True:  # read the whole request body, as a real app does
        message = await receive()
        if not message.get("more_body"):
            break
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"12")],
        }
    )
    await send({"type": "http.response.body", "body": BODY})


class Floor(AsyncWebsocketConsumer):
    async def connect(self):
        self.group = f"bare.{self.scope['url_route']['kwargs']['n']}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def bare_wake(self, message):
        await self.send(text_data='{"type": "wake"}')


application = ProtocolTypeRouter(
    {"http": http_app, "websocket": URLRouter([path("ws/<int:n>", Floor.as_asgi())])}
)
