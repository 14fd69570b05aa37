"""The admin's nodes widget in a real (headless) browser: it refreshes without a page reload.

Needs the ``playwright`` package and a Chromium at ``/usr/bin/chromium`` (Debian's ``chromium``);
skipped with the reason otherwise. ``QCLUSTER_SCREENSHOT_DIR=docs/img`` also saves a screenshot.
"""

import os
import shutil
import threading
from pathlib import Path

import pytest
from django.db import connections

from tests import services as service_discovery
from tests.processes import daphne_node, free_port, port_open, wait_until
from tests.qcluster.conftest import make_node

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
WIDGET = "#qcluster-nodes-widget"


def in_plain_thread(func) -> None:
    """Run ``func`` in a thread of its own that closes its database connection."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            func()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if errors:
        raise errors[0]


def cell(role: str, status: str) -> str:
    return f'{WIDGET} tr[data-role="{role}"] td[data-status="{status}"]'


@pytest.fixture
def admin_node(subprocess_env, django_user_model):
    from django.test import Client

    # A logged-in session, stored in the test database the node reads (no password hashing:
    # the node would do it at its own, deliberately slow, cost).
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("admin", "admin@example.com"))
    session_id = client.cookies["sessionid"].value
    env = {
        **subprocess_env,
        "DEBUG": "1",  # static files (the widget's script) from the ASGI app
        "QCLUSTER_WIDGET_REFRESH_SECONDS": "1",
        "QQQ_NODE_ID": "web-1",
    }
    port = free_port()
    node = daphne_node("admin-browser", port, env).start()
    try:
        wait_until(lambda: port_open(port), 30, message="daphne up")
        yield f"http://127.0.0.1:{port}", session_id
    finally:
        node.stop()


@pytest.mark.slow
def test_nodes_widget_refreshes_in_place_without_a_page_reload(admin_node, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        reason = f"no Chromium at {CHROMIUM} (Debian package 'chromium')"
        if service_discovery.required():  # CI installs it: a missing browser is a failure there
            pytest.fail(reason)
        pytest.skip(reason)
    make_node("web-1")
    make_node("worker-1", roles="worker")

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            base, session_id = admin_node
            context = browser.new_context(viewport={"width": 1200, "height": 700})
            context.add_cookies([{"name": "sessionid", "value": session_id, "url": base}])
            page = context.new_page()
            page.goto(f"{base}/admin/", timeout=60000)
            assert page.locator(WIDGET).count() == 1, page.content()[:2000]
            assert page.inner_text(cell("web", "UP")) == "1"
            page.evaluate("window.__sameDocument = true")

            # Playwright's sync API runs an event loop in this thread: the ORM goes elsewhere.
            in_plain_thread(lambda: (make_node("web-2"), make_node("web-3", status="DRAINING")))

            page.wait_for_function(
                "([up, draining]) => document.querySelector(up)?.textContent === '2'"
                " && document.querySelector(draining)?.textContent === '1'",
                arg=[cell("web", "UP"), cell("web", "DRAINING")],
                timeout=15000,
            )
            assert page.evaluate("window.__sameDocument") is True  # no reload happened
            assert page.inner_text(cell("worker", "UP")) == "1"
            shot = tmp_path / "admin-nodes-widget.png"
            page.screenshot(path=str(shot))
            target = os.environ.get("QCLUSTER_SCREENSHOT_DIR")
            if target:
                Path(target).mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, Path(target) / shot.name)
        finally:
            browser.close()
