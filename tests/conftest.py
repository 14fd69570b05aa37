"""Suite-wide fixtures: services, databases for subprocesses, and the skip/require policy."""

import os
from pathlib import Path

import pytest
from django.conf import settings

from tests import services as service_discovery
from tests.processes import database_url_of

REPO_ROOT = Path(__file__).resolve().parent.parent


def _services() -> service_discovery.Services:
    return settings.SERVICES


def pytest_report_header(config):
    s = _services()
    return [
        f"qprint services: database={s.database_url or 'sqlite'} redis={s.redis_url or 'none'}",
        *([f"qprint services missing: {s.missing_reason}"] if not s.complete else []),
    ]


def pytest_collection_modifyitems(config, items):
    s = _services()
    if s.complete:
        return
    if service_discovery.required():
        pytest.exit(
            f"QPRINT_REQUIRE_SERVICES=1 but PostgreSQL/Redis are missing: {s.missing_reason}",
            returncode=3,
        )
    skip = pytest.mark.skip(reason=f"needs PostgreSQL and Redis: {s.missing_reason}")
    for item in items:
        if "services" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def http_views_inline(request):
    """In a test whose data sits in its own open transaction (``django_db`` without
    ``transaction=True``), the async views' database work runs on the test's thread, where that
    transaction is visible; transactional tests and live nodes use the node's threads."""
    from qprint.core import executor
    from qprint.views import previews

    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or (
        marker is not None and marker.kwargs.get("transaction", False)
    )
    executor.http.inline = previews.draw_threads.inline = not transactional
    yield
    executor.http.inline = previews.draw_threads.inline = False
    if transactional:  # their connections, kept without a pool, would outlive the test database
        executor.http.close_connections()
        previews.draw_threads.close_connections()


@pytest.fixture
def services() -> service_discovery.Services:
    """The PostgreSQL/Redis this run uses (tests marked ``services`` only run when both exist)."""
    return _services()


@pytest.fixture
def live_database_url(transactional_db) -> str:
    """A URL to the test database for subprocesses (Daphne nodes, cluster_runtime, ...).

    Uses ``transactional_db``: what the test writes is committed, so other processes see it.
    """
    from django.db import connection

    return database_url_of(connection.settings_dict)


@pytest.fixture
def subprocess_env(live_database_url) -> dict[str, str]:
    """Environment for a subprocess of the example project on this test's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DATABASE_URL": live_database_url,
            "SECRET_KEY": "test-secret-key",
            "ALLOWED_HOSTS": "*",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    env.pop("REDIS_URL", None)
    return env
