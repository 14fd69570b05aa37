"""What a host project gets wrong first, named: the socket under qprint's own mount, and the
system checks of the deployment around qprint (channel layer, ASGI server, pooled database)."""

from __future__ import annotations

import uuid

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory, override_settings
from django.urls import get_script_prefix, include, path, reverse, set_script_prefix

from qprint import routing
from qprint.core import checks, database
from qprint.models import serializers

# This module is also the URLconf of a host that mounts qprint elsewhere.
urlpatterns = [path("shop/print/", include("qprint.urls"))]
THIS = __name__


def ids(messages) -> list[str]:
    return [m.id for m in messages]


# -- the socket's route ---------------------------------------------------------------------


def test_the_socket_is_served_under_the_default_mount():
    assert routing.socket_path() == "qprint/ws/device/"


@override_settings(ROOT_URLCONF=THIS)
async def test_the_socket_follows_where_the_host_mounts_qprint_urls():
    assert routing.socket_path() == "shop/print/ws/device/"
    app = URLRouter(routing.device_socket_patterns())
    # The consumer answers there (no token: it refuses the upgrade itself) ...
    socket = WebsocketCommunicator(app, "/shop/print/ws/device/", subprotocols=["qprint.v1"])
    connected, _ = await socket.connect()
    assert connected is False
    # ... and nothing answers at the default mount.
    elsewhere = WebsocketCommunicator(app, "/qprint/ws/device/", subprotocols=["qprint.v1"])
    with pytest.raises(ValueError, match="No route found"):
        await elsewhere.connect()


@pytest.mark.parametrize("script_prefix", ["/", "/app/"])
def test_an_assignment_names_its_document_where_the_download_route_is(script_prefix):
    """The HTTP claim answers the download route's absolute URL; a socket's assignment carries
    its path below qprint's mount, which the agent resolves against its own base URL: for every
    job, at any mount, under any script prefix (both are reversed once, then reused)."""
    request = RequestFactory().get("/")
    previous = get_script_prefix()
    set_script_prefix(script_prefix)
    try:
        for urlconf, mount in ((None, "qprint/"), (THIS, "shop/print/")):
            with override_settings(ROOT_URLCONF=urlconf or settings.ROOT_URLCONF):
                for job_id in (uuid.uuid4(), uuid.uuid4()):
                    relative = serializers.document_path(job_id)
                    assert relative == f"api/v1/device/jobs/{job_id}/document"
                    route = reverse("qprint:device-job-document", args=[job_id])
                    assert route == script_prefix + mount + relative
                    absolute = serializers.document_url(request, job_id)
                    assert absolute == request.build_absolute_uri(route)
    finally:
        set_script_prefix(previous)


@override_settings(ROOT_URLCONF="qcluster.urls")
def test_a_urlconf_without_qprint_is_named():
    with pytest.raises(ImproperlyConfigured, match=r"add path\('qprint/', include"):
        routing.socket_path()


# -- system checks --------------------------------------------------------------------------

POSTGRES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}}
SQLITE = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}}
IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
REDIS = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer"}}


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.parametrize(
    ("layers", "databases", "expected"),
    [
        ({}, SQLITE, ["qprint.W010"]),
        (IN_MEMORY, POSTGRES, ["qprint.W011"]),
        (IN_MEMORY, SQLITE, []),
        (REDIS, POSTGRES, []),
    ],
    ids=["no-layer", "in-memory-on-postgresql", "in-memory-on-sqlite", "redis"],
)
def test_the_channel_layer_check(settings, layers, databases, expected):
    settings.CHANNEL_LAYERS = layers
    settings.DATABASES = databases
    found = checks.check_channel_layer()
    assert ids(found) == expected
    if found:  # the warning says what it costs
        assert "next heartbeat (up to 20 s later)" in found[0].msg
        assert "RedisPubSubChannelLayer" in found[0].hint


def test_the_asgi_server_checks(settings):
    assert checks.check_asgi_server() == []
    settings.ASGI_APPLICATION = None
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "daphne"]
    found = checks.check_asgi_server()
    assert ids(found) == ["qprint.W012", "qprint.W013"]
    assert "serves no WebSocket" in found[1].msg


def test_the_test_settings_silence_only_the_in_memory_warning(settings):
    assert settings.SILENCED_SYSTEM_CHECKS == ["qprint.W011"]


@pytest.fixture
def unreachable_pooled_database():
    """A second alias, through Django's pool, to a database that does not exist."""
    from django.db import connections

    saved = connections.settings
    missing = {
        **saved["default"],
        "NAME": "qprint_no_such_database",
        "CONN_MAX_AGE": 0,
        "OPTIONS": {"pool": {"min_size": 1, "max_size": 1, "timeout": 0.5}},
        "TEST": {},
    }
    connections.settings = connections.configure_settings({**saved, "pooled": missing})
    try:
        yield "pooled"
    finally:
        if hasattr(connections._connections, "pooled"):
            connections["pooled"].close_pool()
            delattr(connections._connections, "pooled")
        connections.settings = saved


@pytest.mark.services
def test_a_pooled_database_that_cannot_be_reached_is_named_by_its_own_error(
    unreachable_pooled_database,
):
    """``couldn't get a connection after 1.50 sec`` hides it; ``manage.py check`` shows it."""
    assert database.pooled_aliases() == [unreachable_pooled_database]
    found = checks.check_pooled_database()
    assert ids(found) == ["qprint.W014"]
    assert 'database "qprint_no_such_database" does not exist' in found[0].msg


@pytest.mark.services
def test_a_pool_timeout_is_logged_with_the_database_s_own_error(
    unreachable_pooled_database, caplog, django_db_blocker
):
    from django.db import DatabaseError, connections

    database._last_logged = 0.0
    # The pool's own words, as a request meets them.
    with django_db_blocker.unblock(), pytest.raises(DatabaseError) as failed:
        connections[unreachable_pooled_database].ensure_connection()
    assert "couldn't get a connection" in str(failed.value)
    with caplog.at_level("ERROR", logger="qprint.database"):
        database.log_cause(failed.value, unreachable_pooled_database)
        database.log_cause(failed.value, unreachable_pooled_database)  # once per 30 s
    assert caplog.text.count("database_unreachable alias=pooled error=connection failed") == 1
    assert 'database "qprint_no_such_database" does not exist' in caplog.text
