"""WebSocket routes of qprint, mounted by the host's ASGI application."""

websocket_urlpatterns: list = []
