"""The ASGI routes of qprint, mounted by the host's ASGI application (docs/INSTALL.md).

The device socket lives at ``ws/device/`` under the prefix where the host mounts ``qprint.urls``:
with ``path("qprint/", include("qprint.urls"))`` it is ``qprint/ws/device/``, with
``path("print/", ...)`` it is ``print/ws/device/``. An agent is given that prefix
(``--url https://host/print/``) and finds the HTTP API and the socket under it.

``websocket_urlpatterns`` is computed when it is first read (``from qprint.routing import
websocket_urlpatterns`` in the host's ``asgi.py``, after ``get_asgi_application()``), from the
host's URLconf.

``http_application(django_asgi_app)`` is the host's HTTP application with qprint's busiest API
routes (a device's claim, download and events, an application's submission) served without
Django's per-request thread and middleware (:mod:`qprint.views.direct`).
"""

from django.core.exceptions import ImproperlyConfigured
from django.urls import NoReverseMatch, get_script_prefix, path, reverse

from qprint.realtime.consumer import DeviceConsumer
from qprint.views.direct import ASGIApp, DirectRoutes

#: The socket's path below the mount of ``qprint.urls``.
SOCKET_SUFFIX = "ws/device/"
_CLAIM_SUFFIX = "api/v1/device/claim"


def mount_path(urlconf: str | None = None) -> str:
    """The path where the URLconf mounts ``qprint.urls`` (``/qprint/``), below the script
    prefix."""
    try:
        claim = reverse("qprint:device-claim", urlconf=urlconf)
    except NoReverseMatch:
        raise ImproperlyConfigured(
            "qprint.urls is not mounted in the URLconf (or not with its 'qprint' namespace): "
            "add path('qprint/', include('qprint.urls')) to your urlpatterns; the device socket "
            f"is served under the same prefix ({SOCKET_SUFFIX}), see docs/INSTALL.md."
        ) from None
    return "/" + claim[: -len(_CLAIM_SUFFIX)].removeprefix(get_script_prefix())


def socket_path(urlconf: str | None = None) -> str:
    """The device socket's path (no leading slash) under the mount of ``qprint.urls``."""
    return mount_path(urlconf).lstrip("/") + SOCKET_SUFFIX


def device_socket_patterns(urlconf: str | None = None) -> list:
    """The routes for Channels' ``URLRouter``: the device socket under qprint's mount."""
    return [path(socket_path(urlconf), DeviceConsumer.as_asgi(), name="qprint-device-socket")]


def http_application(django_asgi_app: ASGIApp) -> DirectRoutes:
    """The host's HTTP application, ``django_asgi_app``, with qprint's busiest API routes served
    directly (:mod:`qprint.views.direct`); every other request goes to ``django_asgi_app``."""
    return DirectRoutes(django_asgi_app, mount_path())


def __getattr__(name: str):
    if name == "websocket_urlpatterns":
        return device_socket_patterns()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
