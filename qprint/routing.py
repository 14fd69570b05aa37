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

``freeze_start_up()``, the last line of the host's ``asgi.py``, leaves what start-up made out of
the garbage collector's full collections and sets its thresholds for a node's long-lived sockets.
"""

import gc

from channels.layers import get_channel_layer
from django.core.exceptions import ImproperlyConfigured
from django.urls import NoReverseMatch, get_script_prefix, path, reverse

from qprint.core.conf import qprint_settings
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


def freeze_start_up() -> None:
    """Leave what start-up made out of the garbage collector's full collections: the last call of
    the host's ASGI module, once its application is built.

    A full collection walks every object the process tracks, and every socket and request of the
    node waits while it runs. What start-up made (Django, the apps, Channels, the URLconf: about
    115,000 objects for the example project) lives as long as the process, so walking it again
    finds nothing. The channel layer is made first: a node otherwise makes it, and imports its
    backend (with channels_redis, the Redis client and its serializers: about 12,000 objects), when
    its first socket connects. Then ``gc.freeze()`` moves everything to the permanent generation;
    reference counting still frees what is dropped (docs/OPERATIONS.md, "Capacity").

    Last, the collector's thresholds become ``QPRINT["GC_THRESHOLD"]`` (unless None): a node's
    sockets live for hours and hold about a hundred tracked objects each, so with Python's own
    thresholds a node gaining sockets runs a full collection every few hundred connects, each
    walking all of them (hundreds of milliseconds at 5,000 sockets). Collecting the youngest
    generation after 2,000 more allocations than frees instead of 700 runs full collections
    about three times less often; the cycles a closed socket leaves (Twisted's, autobahn's and
    Daphne's objects) wait as much longer to be freed (docs/PERFORMANCE.md, "The twenty-ninth
    step"). A value ``manage.py check`` refuses (``qprint.E031``) raises ImproperlyConfigured
    here, before anything is frozen."""
    thresholds = qprint_settings.GC_THRESHOLD
    refused = qprint_settings.refusal("GC_THRESHOLD", thresholds)
    if refused is not None:  # what `manage.py check` names, before the node serves
        raise ImproperlyConfigured(f"{refused.msg} ({refused.id})")
    get_channel_layer()
    gc.collect()
    gc.freeze()
    if thresholds is not None:
        gc.set_threshold(*thresholds)


def __getattr__(name: str):
    if name == "websocket_urlpatterns":
        return device_socket_patterns()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
