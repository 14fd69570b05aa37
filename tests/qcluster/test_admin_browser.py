"""The admin's nodes widget in a real (headless) browser: it refreshes without a page reload.

Needs the ``playwright`` package and a Chromium at ``/usr/bin/chromium`` (Debian's ``chromium``);
skipped with the reason otherwise. ``QCLUSTER_SCREENSHOT_DIR=docs/img`` also saves a screenshot.
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.processes import daphne_node, free_port, port_open, wait_until
from tests.qcluster.conftest import make_node

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
WIDGET = "#qcluster-nodes-widget"


def cell(role: str, status: str) -> str:
    return f'{WIDGET} tr[data-role="{role}"] td[data-status="{status}"]'


@pytest.fixture
def admin_node(subprocess_env, django_user_model):
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    # Hashed with a hasher the example project knows (the test settings use a fast one it lacks).
    hasher = PBKDF2PasswordHasher()
    admin = django_user_model.objects.create_superuser("admin", "admin@example.com")
    admin.password = hasher.encode("pw", hasher.salt())
    admin.save()
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
        yield f"http://127.0.0.1:{port}"
    finally:
        node.stop()


@pytest.mark.slow
def test_nodes_widget_refreshes_in_place_without_a_page_reload(admin_node, monkeypatch, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian package 'chromium')")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls below are plain
    # synchronous test code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    make_node("web-1")
    make_node("worker-1", roles="worker")

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 700})
            page.goto(f"{admin_node}/admin/login/?next=/admin/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "pw")
            page.click("input[type=submit]")
            page.wait_for_selector(WIDGET)
            assert page.inner_text(cell("web", "UP")) == "1"
            page.evaluate("window.__sameDocument = true")

            make_node("web-2")
            make_node("web-3", status="DRAINING")

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
