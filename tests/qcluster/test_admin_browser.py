"""The Cluster admin in a real (headless) browser, against a Daphne node and live
``cluster_runtime`` processes on PostgreSQL: log in, the nodes widget refreshes in place, Drain
node -> DRAINING -> STOPPED, Cancel drain, a lease edited to hand it over, an alert acknowledged.

Needs Playwright and Debian's Chromium (``tests/browser.py``); ``QPRINT_SCREENSHOT_DIR=docs/img``
saves the screenshots of docs/ADMIN.md.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher, make_password

from qcluster import leases
from qcluster.models import ClusterAlert, ClusterLease, ClusterNode
from tests.browser import (
    browser_fixture,
    live_admin_site,
    log_in,
    messages_on,
    new_page,
    reload_until,
    run_list_action,
    screenshot,
    session_for,
)
from tests.processes import ManagedProcess, manage
from tests.qcluster.conftest import make_node
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.services]

browser = browser_fixture()
WIDGET = "#qcluster-nodes-widget"
PASSWORD = "a long enough password"


class QuickPBKDF2(PBKDF2PasswordHasher):
    """PBKDF2 with few rounds: the node verifies it without the full cost (and upgrades it)."""

    iterations = 1000


def cell(role: str, status: str) -> str:
    return f'{WIDGET} tr[data-role="{role}"] td[data-status="{status}"]'


def status(node_id: str) -> str | None:
    return ClusterNode.objects.filter(node_id=node_id).values_list("status", flat=True).first()


@pytest.fixture
def operator(django_user_model):
    """A superuser whose password the node checks quickly."""
    return django_user_model.objects.create(
        username="oncall",
        email="oncall@example.com",
        password=make_password(PASSWORD, hasher=QuickPBKDF2()),
        is_staff=True,
        is_superuser=True,
    )


@pytest.fixture
def cluster(subprocess_env, fast_cluster_settings):
    """Node web-1 (Daphne + its runtime), widget refresh 1 s, heartbeat 1 s, LOST after 3 s;
    ``start_worker(node_id, grace)`` adds a ``cluster_runtime`` of role ``worker``."""
    env = {**subprocess_env, "QCLUSTER_WIDGET_REFRESH_SECONDS": "1"}
    workers: list[ManagedProcess] = []

    def start_worker(node_id: str, grace: int) -> ManagedProcess:
        worker_env = {
            **env,
            "QQQ_NODE_ROLES": "worker",
            "QCLUSTER_DRAIN_GRACE_SECONDS": str(grace),
        }
        worker_env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        process = ManagedProcess(
            f"runtime-{node_id}", manage("cluster_runtime", "--node-id", node_id), worker_env
        ).start()
        workers.append(process)
        wait_until(lambda: status(node_id) == "UP", 30, message=f"{node_id} UP")
        return process

    with live_admin_site(env, "web-1") as base:
        wait_until(lambda: status("web-1") == "UP", 30, message="web-1 UP")
        try:
            yield base, start_worker
        finally:
            for process in workers:
                process.kill()


def test_nodes_widget_refreshes_in_place_without_a_page_reload(browser, cluster, operator):
    base, _ = cluster
    page = new_page(browser, base, session_for(operator))
    page.goto(f"{base}/admin/qcluster/")
    assert page.locator(WIDGET).count() == 1, page.content()[:2000]
    page.wait_for_function(
        "sel => document.querySelector(sel)?.textContent === '1'", arg=cell("web", "UP")
    )
    page.evaluate("window.__sameDocument = true")

    # Statuses the sweeper leaves alone, so the figures stay what the test made.
    make_node("batch-1", status="LOST", roles="batch")
    make_node("batch-2", status="STOPPED", roles="batch")
    make_node("batch-3", status="STOPPED", roles="batch")

    page.wait_for_function(
        "([lost, stopped]) => document.querySelector(lost)?.textContent === '1'"
        " && document.querySelector(stopped)?.textContent === '2'",
        arg=[cell("batch", "LOST"), cell("batch", "STOPPED")],
    )
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    assert page.inner_text(cell("web", "UP")) == "1"
    screenshot(page, "admin-nodes-widget")


def test_operator_drains_a_node_cancels_a_drain_hands_a_lease_over_and_acks_an_alert(
    browser, cluster, operator
):
    base, start_worker = cluster
    page = new_page(browser, base)
    log_in(page, base, "oncall", PASSWORD)
    assert page.get_by_role("link", name="Cluster", exact=True).count() >= 1

    # Drain node: DRAINING while web traffic moves away (the grace), then STOPPED.
    start_worker("worker-1", grace=4)
    start_worker("worker-2", grace=120)
    nodes = f"{base}/admin/qcluster/clusternode/"
    page.goto(nodes)
    run_list_action(page, "drain_nodes", "worker-1")
    assert "Drain requested for 1 node." in messages_on(page)

    def row_text(node_id: str) -> str:
        row = page.locator("#result_list tbody tr").filter(
            has=page.get_by_text(node_id, exact=True)
        )
        return row.inner_text() if row.count() else ""

    reload_until(page, lambda: "DRAINING" in row_text("worker-1"), 15, "worker-1 DRAINING")
    screenshot(page, "admin-nodes-draining")
    reload_until(page, lambda: "STOPPED" in row_text("worker-1"), 20, "worker-1 STOPPED")
    drained = ClusterNode.objects.get(node_id="worker-1")
    assert drained.drain_requested_by == "oncall"

    # Cancel drain: back to UP before the grace ends; the runtime carries on.
    run_list_action(page, "drain_nodes", "worker-2")
    reload_until(page, lambda: "DRAINING" in row_text("worker-2"), 15, "worker-2 DRAINING")
    run_list_action(page, "cancel_drain", "worker-2")
    assert "Drain cancelled for 1 node." in messages_on(page)
    reload_until(page, lambda: "UP" in row_text("worker-2").split(), 15, "worker-2 UP again")

    # An alert: the sweeper finds a node whose heartbeats stopped, marks it LOST and says so.
    make_node("web-9", age_seconds=60)
    wait_until(lambda: ClusterAlert.objects.filter(node_id="web-9").exists(), 30, message="alert")
    page.goto(f"{base}/admin/qcluster/clusteralert/")
    alert = ClusterAlert.objects.get(node_id="web-9")
    page.locator(f'input.action-select[value="{alert.pk}"]').check()
    page.select_option("select[name=action]", "acknowledge")
    page.click("button[name=index]")
    page.wait_for_load_state()
    assert "1 alert acknowledged." in messages_on(page)
    alert.refresh_from_db()
    assert (alert.acknowledged_by, alert.acknowledged_at is not None) == ("oncall", True)
    screenshot(page, "admin-alerts")

    # A lease edited by hand: a forced hand-over to the holder typed in, version bumped.
    lease = ClusterLease.objects.get(name=leases.SWEEPER_LEASE)
    page.goto(f"{base}/admin/qcluster/clusterlease/{lease.pk}/change/")
    page.fill("#id_holder_node_id", "worker-2")
    until = datetime.now(UTC) + timedelta(hours=2)  # the example project's TIME_ZONE is UTC
    page.fill("#id_expires_at_0", until.strftime("%Y-%m-%d"))
    page.fill("#id_expires_at_1", until.strftime("%H:%M:%S"))
    page.click("input[name=_save]")
    page.wait_for_url(f"{base}/admin/qcluster/clusterlease/")
    handed = ClusterLease.objects.get(name=leases.SWEEPER_LEASE)
    assert handed.holder_node_id == "worker-2"
    assert handed.version > lease.version
    row = page.locator("#result_list tbody tr").filter(has_text=leases.SWEEPER_LEASE)
    assert "worker-2" in row.inner_text()
    screenshot(page, "admin-leases")
