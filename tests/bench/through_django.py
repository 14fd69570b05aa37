"""The example project with every HTTP request through Django's ASGI handler, qprint's direct
routes included: what ``qprint.routing.http_application`` is compared with in
``bench_requests.py``.

    daphne -b 127.0.0.1 -p PORT tests.bench.through_django:application
"""

from channels.routing import ProtocolTypeRouter, URLRouter

from example_project.asgi import django_asgi_app
from qprint.routing import websocket_urlpatterns

application = ProtocolTypeRouter(
    {"http": django_asgi_app, "websocket": URLRouter(websocket_urlpatterns)}
)
