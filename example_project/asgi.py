"""ASGI entry point: HTTP through Django (qprint's busiest API routes served directly), the
device socket through qprint's routing."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
django_asgi_app = get_asgi_application()

from django.conf import settings  # noqa: E402

if settings.DEBUG:
    # Plain Daphne serves no static files; with DEBUG (the demo) the admin's CSS and JS come
    # from here. Production serves them from STATIC_ROOT (collectstatic) or a CDN.
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from qprint.routing import (  # noqa: E402
    freeze_start_up,
    http_application,
    websocket_urlpatterns,
)

application = ProtocolTypeRouter(
    {
        "http": http_application(django_asgi_app),
        "websocket": URLRouter(websocket_urlpatterns),
    }
)

# Start-up's objects live as long as the process: out of the garbage collector's full collections,
# which stop every socket and request of the node (docs/OPERATIONS.md, "Capacity").
freeze_start_up()
