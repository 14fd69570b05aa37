"""WebSocket routes of qprint, mounted by the host's ASGI application."""

from django.urls import path

from qprint.realtime.consumer import DeviceConsumer

websocket_urlpatterns: list = [
    path("qprint/ws/device/", DeviceConsumer.as_asgi(), name="qprint-device-socket"),
]
