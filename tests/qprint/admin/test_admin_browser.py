"""The Printing admin in a real (headless) browser, against a Daphne node with its
``cluster_runtime`` on PostgreSQL and the reference agent (``python -m qprint.agent``, directory
spooler) as the device: pause and resume until the revision is "up to date", a test page printed
and its timeline, the document, reprint (a second one refused), cancel, a new token shown once,
the print overview refreshing in place, and staff without permissions seeing nothing.

Needs Playwright and Debian's Chromium (``tests/browser.py``); ``QPRINT_SCREENSHOT_DIR=docs/img``
saves the screenshots of docs/ADMIN.md.
"""

import re

import pytest
from django.urls import reverse

from qprint import api, documents
from qprint.domain import credentials
from qprint.models import Device, DevicePrinter, PrintJob
from tests.browser import (
    browser_fixture,
    live_admin_site,
    messages_on,
    new_page,
    reload_until,
    screenshot,
    session_for,
)
from tests.processes import ManagedProcess, python
from tests.qprint.factories import connect, make_device
from tests.qprint.helpers import event
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.services]

browser = browser_fixture()


@pytest.fixture
def site(subprocess_env):
    """Node node-a (Daphne + runtime), device heartbeat 1 s, overview refresh 1 s."""
    env = {
        **subprocess_env,
        "QPRINT_HEARTBEAT_SECONDS": "1",
        "QPRINT_OVERVIEW_REFRESH_SECONDS": "1",
    }
    with live_admin_site(env, "node-a") as base:
        yield base


@pytest.fixture
def agent(site, subprocess_env, tmp_path):
    """Device acme/front-desk, run by the reference agent with the directory spooler."""
    device, token = api.create_device("acme", "front-desk", description="by the door")
    token_file = tmp_path / "token"
    token_file.write_text(token)
    env = dict(subprocess_env)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    process = ManagedProcess(
        "agent",
        python(
            "-m",
            "qprint.agent",
            "--url",
            f"{site}/qprint/",
            "--token-file",
            str(token_file),
            "--state-dir",
            str(tmp_path / "state"),
            "--backoff-max",
            "2",
            "--spooler",
            "directory",
            "--spool-dir",
            str(tmp_path / "printed"),
        ),
        env,
    ).start()
    try:
        yield device, process
    finally:
        process.stop()


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("oncall", "oncall@example.com")


def console_state(page, attribute: str) -> str:
    return page.get_attribute("#qprint-device-console", f"data-{attribute}") or ""


def click_and_load(page, selector: str) -> int:
    """Click a button that posts, wait for the page it answers; that page's HTTP status."""
    with page.expect_navigation() as navigation:
        page.click(selector)
    return navigation.value.status


def test_operator_works_a_device_and_its_jobs(browser, site, agent, superuser):
    device, agent_process = agent
    base = site
    page = new_page(browser, base, session_for(superuser))
    device_url = base + reverse("admin:qprint_device_change", args=[device.pk])
    page.goto(device_url)

    def settled(gate: str) -> bool:
        return console_state(page, "gate") == gate and console_state(page, "control") == (
            "up-to-date"
        )

    reload_until(page, lambda: settled("open"), 30, f"device ready; {agent_process.log()[-2000:]}")
    assert "node-a" in page.inner_text("#qprint-connection")
    assert "since" in page.inner_text("#qprint-connection")

    # Pause, then resume: each time the device applies the new revision ("up to date").
    assert click_and_load(page, 'button[data-action="pause_devices"]') == 200
    assert "Paused 1 device." in messages_on(page)
    reload_until(page, lambda: settled("paused"), 20, "pause applied by the device")
    assert "paused" in page.inner_text("#qprint-control")
    click_and_load(page, 'button[data-action="resume_devices"]')
    assert "Resumed 1 device." in messages_on(page)
    reload_until(page, lambda: settled("open"), 20, "resume applied by the device")
    assert page.inner_text("#qprint-control") == "up to date"

    # A test page, printed by the agent; its timeline.
    click_and_load(page, 'button[data-action="send_test_page"]')
    assert "Queued a test page for 1 device." in messages_on(page)
    test_page = PrintJob.objects.get(device=device, title="Test page")
    reload_until(
        page,
        lambda: "PRINTED" in page.inner_text("#qprint-recent tbody tr:first-child"),
        30,
        "the test page PRINTED",
    )
    wait_until(lambda: DevicePrinter.objects.filter(device=device).exists(), 20, message="printers")
    # The printer's state as a CUPS queue out of paper would report it (what the agent sends).
    api.replace_printers(
        device,
        [
            {
                "name": "default",
                "is_default": True,
                "status": "stopped",
                "capabilities": {"state_reasons": ["media-empty"], "state_message": "Load A4"},
            }
        ],
    )
    page.reload()
    assert "media-empty" in page.inner_text("#qprint-printers")
    screenshot(page, "admin-device")

    page.click(f'#qprint-recent a[href*="{test_page.pk}"]')
    page.wait_for_selector("#qprint-timeline")
    types = page.eval_on_selector_all(
        "#qprint-timeline tbody tr", "rows => rows.map(r => r.dataset.type)"
    )
    assert types == ["QUEUED", "CLAIMED", "RECEIVED", "SPOOLED", "PRINTED"]
    claimed = page.inner_text('#qprint-timeline tr[data-type="CLAIMED"]')
    assert "node-a" in claimed
    assert re.search(r"\+\d+", claimed), claimed
    assert "node-a" in page.inner_text("#qprint-claim")
    screenshot(page, "admin-job-timeline")

    # The document, for staff who may view jobs; never cached.
    href = page.get_attribute("#qprint-document", "href")
    document = page.request.get(base + href)
    assert document.status == 200
    assert document.body() == documents.open_document(test_page)
    assert "no-store" in document.headers["cache-control"]

    # Reprint, and a second reprint refused with a message (a double click prints once).
    assert click_and_load(page, 'button[data-action="reprint"]') == 200
    assert "Queued a reprint" in messages_on(page)
    assert click_and_load(page, 'button[data-action="reprint"]') == 409
    refused = messages_on(page)
    assert "already reprinted" in refused and "already_reprinted" in refused
    assert PrintJob.objects.filter(reprint_of=test_page).count() == 1

    # Cancel a job that waits on a device nobody runs.
    idle = make_device(name="back-office").device
    waiting, _ = api.submit_job("acme", idle, b"invoice 7", "text/plain", title="Invoice 7")
    page.goto(base + reverse("admin:qprint_printjob_change", args=[waiting.pk]))
    assert page.get_attribute("#qprint-job-console", "data-status") == "QUEUED"
    click_and_load(page, 'button[data-action="cancel"]')
    assert "The job is cancelled." in messages_on(page)
    assert page.get_attribute("#qprint-job-console", "data-status") == "CANCELLED"
    assert page.locator('button[data-action="cancel"]').count() == 0

    # A new token: shown once, on the answer to the click; never on the device's page again.
    page.goto(device_url)
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    click_and_load(page, 'button[data-action="issue_new_tokens"]')
    assert "stops working" in asked[0]
    token = page.inner_text("code.qprint-secret").strip()
    assert Device.objects.get(pk=device.pk).token_hash == credentials.hash_secret(token)
    page.goto(device_url)
    page.reload()
    assert token not in page.content()
    # The agent's old token no longer opens a connection.
    reload_until(page, lambda: console_state(page, "gate") == "not_connected", 30, "agent out")


def test_print_overview_refreshes_and_staff_without_permissions_see_nothing(
    browser, site, superuser, django_user_model
):
    base = site
    page = new_page(browser, base, session_for(superuser))
    page.goto(f"{base}/admin/qprint/")
    page.wait_for_selector("#qprint-overview")
    page.evaluate("window.__sameDocument = true")
    figure = '#qprint-overview [data-figure="{}"]'
    assert page.inner_text(figure.format("to-look-at")) == "0"

    # Work arrives: a device offline with two queued jobs, a job that failed on another.
    offline = make_device(name="warehouse").device
    for n in range(2):
        api.submit_job("acme", offline, f"label {n}".encode(), "text/plain", title=f"Label {n}")
    online = connect(make_device(name="front-desk").device, node="node-a")
    api.submit_job("acme", online, b"%PDF-1.4", "application/pdf", title="Contract")
    assignment = api.claim_next_job(online.pk, node="node-a")
    failed = PrintJob.objects.get(pk=assignment.job_id)
    api.record_device_event(online, failed.pk, event(failed, "RECEIVED"))
    api.record_device_event(
        online, failed.pk, event(failed, "FAILED", message="media-jam: paper jam in tray 2")
    )

    page.wait_for_function(
        "([look, offline]) => document.querySelector(look)?.textContent === '1'"
        " && document.querySelector(offline)?.textContent === '1'",
        arg=[figure.format("to-look-at"), figure.format("offline-with-queue")],
    )
    assert page.evaluate("window.__sameDocument") is True  # refreshed in place
    assert "acme/warehouse" in page.inner_text(
        '#qprint-overview table[data-table="offline-with-queue"]'
    )
    assert "Contract" in page.inner_text('#qprint-overview table[data-table="to-look-at"]')
    queued_last_hour = '#qprint-overview tr[data-window="last_hour"] td[data-status="QUEUED"]'
    assert page.inner_text(queued_last_hour) == "2"
    screenshot(page, "admin-print-overview")

    # Staff without any permission: nothing of either app, and no data from their endpoints.
    nobody = django_user_model.objects.create_user("nobody", is_staff=True)
    other = new_page(browser, base, session_for(nobody))
    other.goto(f"{base}/admin/")
    body = other.inner_text("#content")
    assert "Printing" not in body and "Cluster" not in body
    assert other.locator("#qprint-overview, #qcluster-nodes-widget").count() == 0
    for app in ("qprint", "qcluster"):
        assert other.goto(f"{base}/admin/{app}/").status == 404
    for model in ("printjob", "device"):
        assert other.goto(f"{base}/admin/qprint/{model}/").status == 403
    assert other.goto(f"{base}/admin/qcluster/clusternode/").status == 403
    overview = other.request.get(f"{base}/admin/qprint/printjob/overview/")
    assert overview.status == 403
    assert other.request.get(f"{base}/admin/qcluster/clusternode/widget/").status == 403
