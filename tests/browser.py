"""The admin in a real browser: Debian's Chromium driven by Playwright, against live processes.

- :func:`browser_fixture` makes a module-scoped fixture: one Chromium per test module, launched
  headless with an empty profile (Playwright gives each launch a fresh temporary user data dir).
  Without the ``playwright`` package or a Chromium at ``$CHROMIUM`` (``/usr/bin/chromium``,
  Debian's ``chromium``) the tests skip with the reason, or fail under
  ``QPRINT_REQUIRE_SERVICES=1`` (CI installs both).
- :func:`live_admin_site` starts a Daphne node of the example project and its ``cluster_runtime``
  (same node id), as a pod would run them.
- :func:`log_in` goes through the admin's login form; :func:`session_for` gives a browser context
  the session of a user logged in by the test client (no password hashing on the node).
- :func:`screenshot` saves a PNG under a deterministic name into ``$QPRINT_SCREENSHOT_DIR`` when
  it is set (``QPRINT_SCREENSHOT_DIR=docs/img`` refreshes the pictures of docs/ADMIN.md).
- Playwright's sync API keeps an event loop running in the test's thread, where Django's ORM
  refuses to run; the browser fixture sets ``DJANGO_ALLOW_ASYNC_UNSAFE`` for the module's tests
  (the test's own ORM calls run one at a time, never inside a coroutine) and never passes it on
  to the live processes.

Every wait is for a condition with a deadline (Playwright's ``wait_for_*`` or
:func:`tests.waiting.wait_until`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from tests import services as service_discovery
from tests.processes import ManagedProcess, daphne_node, free_port, manage, port_open
from tests.waiting import wait_until

T = TypeVar("T")

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 960}
ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"
#: Playwright's own waits (milliseconds).
TIMEOUT_MS = 20000


def _unavailable(reason: str) -> None:
    if service_discovery.required():  # CI installs them: a missing browser is a failure there
        pytest.fail(reason)
    pytest.skip(reason)


def browser_fixture():
    """A module-scoped fixture yielding a launched Chromium (one per test module)."""

    @pytest.fixture(scope="module")
    def browser():
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            _unavailable("the 'playwright' package is not installed")
        if not shutil.which(CHROMIUM):
            _unavailable(f"no Chromium at {CHROMIUM} (Debian package 'chromium')")
        previous = os.environ.get(ASYNC_UNSAFE)
        os.environ[ASYNC_UNSAFE] = "1"
        try:
            with sync_playwright() as playwright:
                launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    yield launched
                finally:
                    launched.close()
        finally:
            if previous is None:
                os.environ.pop(ASYNC_UNSAFE, None)
            else:
                os.environ[ASYNC_UNSAFE] = previous

    return browser


@contextmanager
def live_admin_site(
    env: dict[str, str], node_id: str = "web-1", *, runtime: bool = True
) -> Iterator[str]:
    """A Daphne node (static files served: ``DEBUG=1``) and, unless told not to, its
    ``cluster_runtime``; yields the node's base URL. Both are stopped at the end."""
    env = {**env, "DEBUG": "1", "QQQ_NODE_ID": node_id}
    env.pop(ASYNC_UNSAFE, None)
    port = free_port()
    started: list[ManagedProcess] = [daphne_node(f"admin-{node_id}", port, env).start()]
    try:
        if runtime:
            started.append(
                ManagedProcess(
                    f"runtime-{node_id}", manage("cluster_runtime", "--node-id", node_id), env
                ).start()
            )
        web = started[0]
        wait_until(lambda: port_open(port) or not web.alive(), 30, message="daphne up")
        assert web.alive(), web.log()[-3000:]
        yield f"http://127.0.0.1:{port}"
    finally:
        for process in reversed(started):
            process.stop()


def session_for(user) -> str:
    """A session id of ``user``, stored in the test database the node reads."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def new_page(browser, base: str, session_id: str | None = None):
    """A page in a context of its own (its own cookies), logged in when ``session_id`` is given."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    if session_id:
        context.add_cookies([{"name": "sessionid", "value": session_id, "url": base}])
    return context.new_page()


def log_in(page, base: str, username: str, password: str) -> None:
    """Through the admin's login form, as a person would."""
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def messages_on(page) -> str:
    """The text of the admin's messages on the page ('' when there is none)."""
    locator = page.locator("ul.messagelist")
    return locator.inner_text() if locator.count() else ""


def run_list_action(page, action: str, *row_names: str) -> None:
    """Tick the rows (by the link text of their first column) and run ``action``."""
    for name in row_names:
        row = page.locator("#result_list tbody tr").filter(
            has=page.get_by_role("link", name=name, exact=True)
        )
        row.locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")
    page.wait_for_load_state()


def reload_until(page, predicate: Callable[[], bool], timeout: float, message: str) -> None:
    """Reload ``page`` until ``predicate()`` holds (for pages rendered once, such as a list)."""

    def check() -> bool:
        page.reload()
        return predicate()

    if not predicate():
        wait_until(check, timeout, interval=0.3, message=message)


def screenshot(page, name: str, *, full_page: bool = False) -> Path | None:
    """Save ``<name>.png`` into ``$QPRINT_SCREENSHOT_DIR`` when it is set."""
    target = os.environ.get("QPRINT_SCREENSHOT_DIR")
    if not target:
        return None
    path = Path(target) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path
