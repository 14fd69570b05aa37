"""What ``qprint.routing.http_application`` serves itself and what it keeps of Django's request
cycle (qprint.views.direct). That its answers are Django's is shown by every API test of this
folder, which runs with both clients (``conftest.py``)."""

import logging

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_started
from django.test import override_settings
from django.urls import reverse

from qprint.domain import device_operations
from qprint.routing import http_application, mount_path
from tests.qprint.factories import connect, make_device
from tests.qprint.views.direct_client import DirectClient

pytestmark = pytest.mark.django_db


def scope_of(path: str) -> dict:
    return {"type": "http", "path": path, "root_path": "", "method": "POST"}


def test_the_busiest_api_routes_are_served_directly_and_the_rest_by_django():
    routes = http_application(ASGIHandler())
    direct = {
        reverse("qprint:device-claim"),
        reverse("qprint:device-job-document", args=["a"]),
        reverse("qprint:device-job-events", args=["a"]),
        reverse("qprint:device-command-result", args=["a"]),
        reverse("qprint:jobs"),
        reverse("qprint:job-cancel", args=["a"]),
    }
    for path in direct:
        assert routes.match(scope_of(path)) is not None, path
    for path in (
        reverse("qprint:device-printers"),
        reverse("qprint:job-detail", args=["a"]),
        reverse("qprint:cloudprnt"),
        "/admin/",
        "/qprint/api/v1/nowhere",
        "/elsewhere/api/v1/device/claim",
    ):
        assert routes.match(scope_of(path)) is None, path
    assert mount_path() == "/qprint/"


def test_a_direct_route_skips_the_request_signals_and_others_keep_them():
    started = []

    def count(**kwargs):
        started.append(kwargs["scope"]["path"])

    dev = make_device()
    connect(dev.device)
    client = DirectClient()
    request_started.connect(count)
    try:
        assert client.post(reverse("qprint:device-claim"), **dev.auth).status_code == 204
        assert started == []
        printers = client.put(
            reverse("qprint:device-printers"), [], content_type="application/json", **dev.auth
        )
        assert printers.status_code == 200, printers.content
        assert started == [reverse("qprint:device-printers")]
    finally:
        request_started.disconnect(count)


@override_settings(ALLOWED_HOSTS=["print.example.com"])
def test_a_direct_route_refuses_a_host_not_allowed_as_django_does():
    dev = make_device()
    connect(dev.device)
    client = DirectClient()
    refused = client.post(reverse("qprint:device-claim"), HTTP_HOST="evil.example", **dev.auth)
    assert refused.status_code == 400
    allowed = client.post(reverse("qprint:device-claim"), HTTP_HOST="print.example.com", **dev.auth)
    assert allowed.status_code == 204, allowed.content


@override_settings(
    SECURE_SSL_REDIRECT=True,
    SECURE_HSTS_SECONDS=3600,
    MIDDLEWARE=["django.middleware.security.SecurityMiddleware"],
)
def test_a_direct_route_runs_djangos_security_middleware_when_the_project_lists_it():
    dev = make_device()
    connect(dev.device)
    client = DirectClient()  # reads the middleware setting when made
    plain = client.post(reverse("qprint:device-claim"), **dev.auth)
    assert plain.status_code == 301
    assert plain["Location"] == "https://testserver" + reverse("qprint:device-claim")
    secure = client.post(reverse("qprint:device-claim"), secure=True, **dev.auth)
    assert secure.status_code == 204, secure.content
    assert secure["Strict-Transport-Security"] == "max-age=3600"
    assert secure["X-Content-Type-Options"] == "nosniff"


@override_settings(MIDDLEWARE=[])
def test_a_project_without_the_security_middleware_gets_no_redirect_on_a_direct_route():
    dev = make_device()
    connect(dev.device)
    with override_settings(SECURE_SSL_REDIRECT=True):
        answer = DirectClient().post(reverse("qprint:device-claim"), **dev.auth)
    assert answer.status_code == 204, answer.content
    assert "Strict-Transport-Security" not in answer


def test_an_unexpected_error_on_a_direct_route_is_answered_and_logged_as_django_does(
    monkeypatch, caplog
):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(device_operations, "claim", broken)
    dev = make_device()
    connect(dev.device)
    with caplog.at_level(logging.ERROR, logger="django.request"):
        answer = DirectClient().post(reverse("qprint:device-claim"), **dev.auth)
    assert answer.status_code == 500
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert logged and logged[0].exc_info[0] is RuntimeError
