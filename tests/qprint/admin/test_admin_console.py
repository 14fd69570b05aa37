"""The admin as a console: a job's timeline, document and buttons; a device's connection, gate,
queue and printers with its buttons; the print overview and its JSON refresh. All through the
Django test client; the same pages in a real browser are in ``test_admin_browser.py``."""

import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection as database
from django.db.models.functions import Now
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from qprint import api
from qprint.domain import connection, overview
from qprint.models import Device, DevicePrinter, PrintJob
from tests.qprint.admin.test_admin import staff
from tests.qprint.factories import connect, make_device
from tests.qprint.helpers import event, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client):
    """Staff who may view and change devices and jobs (logged in on ``client``)."""
    user = staff("operator", "view_device", "change_device", "view_printjob", "change_printjob")
    client.force_login(user)
    return user


def job_page(job) -> str:
    return reverse("admin:qprint_printjob_change", args=[job.pk])


def device_page(device) -> str:
    return reverse("admin:qprint_device_change", args=[device.pk])


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def printed_job(device, node="node-7"):
    """Claim the device's next job (a new one when it has none) and report it PRINTED."""
    if not PrintJob.objects.filter(device=device, status="QUEUED").exists():
        submit(device, title="Invoice 12")
    assignment = api.claim_next_job(device.pk, node=node)
    assert assignment is not None
    job = PrintJob.objects.get(claim_id=assignment.claim_id)
    for kind in ("RECEIVED", "SPOOLED", "PRINTED"):
        api.record_device_event(device, job.pk, event(job, kind))
    job.refresh_from_db()
    return job


def test_job_page_shows_the_timeline_with_nodes_and_milliseconds(client, operator):
    device = connect(make_device().device)
    job = printed_job(device)
    page = client.get(job_page(job))
    assert page.status_code == 200
    console = page.context["console"]
    rows = console["timeline"]
    assert [r["event"].type for r in rows] == [
        "QUEUED",
        "CLAIMED",
        "RECEIVED",
        "SPOOLED",
        "PRINTED",
    ]
    assert [r["event"].source for r in rows] == ["SERVER", "SERVER", "DEVICE", "DEVICE", "DEVICE"]
    assert rows[0]["since_previous_ms"] is None
    assert all(
        isinstance(r["since_previous_ms"], int) and r["since_previous_ms"] >= 0 for r in rows[1:]
    )
    assert rows[1]["node"] == "node-7"
    span = rows[-1]["event"].recorded_at - rows[0]["event"].recorded_at
    assert console["total_ms"] == round(span.total_seconds() * 1000)
    # Each step is rounded on its own: their sum is the span within a millisecond per step.
    assert abs(sum(r["since_previous_ms"] for r in rows[1:]) - console["total_ms"]) < len(rows)
    html = page.content.decode()
    assert 'id="qprint-timeline"' in html and "node-7" in html
    assert re.search(r"data-ms>\+\d+<", html)
    assert str(job.claim_id) in html
    assert b'name="_save"' not in page.content  # still read-only


def test_document_is_served_never_cached_to_staff_who_may_view_jobs(client, operator):
    device = make_device().device
    job = submit(device, b"%PDF-1.4 bytes", title="Doc")
    url = reverse("admin:qprint_printjob_document", args=[job.pk])
    answer = client.get(url)
    assert answer.status_code == 200
    assert answer.content == b"%PDF-1.4 bytes"
    assert "no-store" in answer["Cache-Control"]
    assert answer["Content-Type"] == "application/pdf"
    assert "attachment" in answer["Content-Disposition"]

    other = Client()
    other.force_login(staff("devices-only", "view_device"))
    assert other.get(url).status_code == 403
    assert b"qprint-document" not in other.get(job_page(job)).content


def test_cancel_button_cancels_through_the_api_and_needs_post_csrf_and_permission(client, operator):
    device = make_device().device
    job = submit(device)
    url = reverse("admin:qprint_printjob_cancel", args=[job.pk])
    assert client.get(url).status_code == 405

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(url).status_code == 403

    viewer = Client()
    viewer.force_login(staff("viewer", "view_printjob"))
    assert b'data-action="cancel"' not in viewer.get(job_page(job)).content
    assert viewer.post(url).status_code == 403
    job.refresh_from_db()
    assert job.status == "QUEUED"

    assert b'data-action="cancel"' in client.get(job_page(job)).content
    answer = client.post(url, follow=True)
    assert answer.redirect_chain[-1][0] == job_page(job)
    assert "The job is cancelled." in messages_of(answer)
    job.refresh_from_db()
    assert job.status == "CANCELLED"
    assert job.events.filter(type="CANCELLED", detail__by="admin:operator").exists()
    assert b'data-action="cancel"' not in answer.content  # a final job offers no cancel

    again = client.post(url)
    assert again.status_code == 409
    assert any("job_final" in m for m in messages_of(again))


def test_a_second_reprint_is_refused_with_a_message_unless_forced(client, operator):
    device = make_device().device
    job = submit(device)
    url = reverse("admin:qprint_printjob_reprint", args=[job.pk])
    first = client.post(url, follow=True)
    assert any("Queued a reprint" in m for m in messages_of(first))
    assert PrintJob.objects.filter(reprint_of=job).count() == 1

    second = client.post(url)
    assert second.status_code == 409
    assert any("already reprinted" in m and "already_reprinted" in m for m in messages_of(second))
    assert PrintJob.objects.filter(reprint_of=job).count() == 1
    assert b'data-action="force-reprint"' in second.render().content

    forced = client.post(url, {"force": "1"})
    assert forced.status_code == 302
    assert PrintJob.objects.filter(reprint_of=job).count() == 2


def test_device_page_shows_connection_gate_queue_printers_and_recent_jobs(client, operator):
    device = connect(make_device().device, node="node-b", lease_seconds=60)
    DevicePrinter.objects.create(
        device=device,
        name="front",
        is_default=True,
        status="stopped",
        capabilities={"state_reasons": ["media-empty"], "state_message": "Load paper"},
    )
    low = submit(device, title="low", priority=0)
    high = submit(device, title="high", priority=5)
    done = printed_job(device)  # claims "high" first: priority
    assert done.pk == high.pk
    page = client.get(device_page(device))
    console = page.context["console"]
    assert (console["live"], console["node"], console["ready"]) == (True, "node-b", True)
    assert 0 < console["lease_left_seconds"] <= 60
    assert console["control"] == "up to date"
    assert console["gate_code"] == "open"
    assert [j.pk for j in console["queue"]] == [low.pk]
    assert console["printers"][0]["reasons"] == ["media-empty"]
    assert [j.pk for j in console["recent"]][:2] == [high.pk, low.pk]
    html = page.content.decode()
    assert "media-empty" in html and "Load paper" in html and "node-b" in html


def test_pause_button_leaves_the_revision_waiting_for_the_device(client, operator):
    device = connect(make_device().device)
    url = reverse("admin:qprint_device_act", args=[device.pk, "pause_devices"])
    answer = client.post(url, follow=True)
    assert answer.redirect_chain[-1][0] == device_page(device)
    console = answer.context["console"]
    assert console["control"].startswith("waiting for the device")
    assert console["gate_code"] == "stale_control"
    assert [row[0] for row in console["actions"]][:1] == ["resume_devices"]
    device.refresh_from_db()
    assert device.paused is True
    assert (
        client.post(reverse("admin:qprint_device_act", args=[device.pk, "nope"])).status_code == 404
    )


def test_new_token_button_shows_the_token_once(client, operator):
    device = make_device().device
    old_hash = device.token_hash
    answer = client.post(reverse("admin:qprint_device_act", args=[device.pk, "issue_new_tokens"]))
    assert answer.status_code == 200
    assert "no-store" in answer["Cache-Control"]
    token = re.search(r'class="qprint-secret">([^<]+)<', answer.content.decode()).group(1)
    device.refresh_from_db()
    assert device.token_hash != old_hash
    assert token not in client.get(device_page(device)).content.decode()


def test_overview_counts_and_lists_what_needs_a_look(admin_client):
    online = connect(make_device(name="online").device)
    offline = make_device(name="offline").device
    for _ in range(2):
        submit(offline)
    waiting = submit(online, title="waits")
    PrintJob.objects.filter(pk=waiting.pk).update(created_at=Now() - timedelta(minutes=5))
    failed = submit(online, title="jammed")
    api.cancel_job(submit(online))
    PrintJob.objects.filter(pk=failed.pk).update(
        status="FAILED", status_reason="paper jam", finished_at=Now()
    )
    old = submit(online)
    PrintJob.objects.filter(pk=old.pk).update(created_at=Now() - timedelta(hours=3))

    data = overview.print_overview()
    assert data["last_hour"]["QUEUED"] == 3
    assert data["last_day"]["QUEUED"] == 3 + 1
    assert (data["last_hour"]["FAILED"], data["last_hour"]["CANCELLED"]) == (1, 1)
    assert [j["title"] for j in data["to_look_at"]] == ["jammed"]
    assert data["to_look_at_total"] == 1
    assert [(d["device"], d["queue_depth"]) for d in data["offline_with_queue"]] == [
        ("acme/offline", 2)
    ]
    assert data["oldest_queued"]["id"] == old.pk
    assert data["oldest_queued"]["age_seconds"] >= 3 * 3600

    answer = admin_client.get(reverse("admin:qprint_printjob_overview"))
    assert answer.status_code == 200
    assert "no-store" in answer["Cache-Control"]
    body = answer.json()
    assert body["to_look_at"][0]["url"] == job_page(failed)
    assert body["to_look_at"][0]["id"] == str(failed.pk)
    assert isinstance(body["to_look_at"][0]["finished_at"], str)
    assert body["oldest_queued"]["url"] == job_page(old)
    assert body["offline_with_queue"][0]["url"] == device_page(offline)
    assert body["refresh_seconds"] == 15

    app_page = admin_client.get(reverse("admin:app_list", args=["qprint"]))
    assert b'id="qprint-overview"' in app_page.content
    assert b"acme/offline" in app_page.content


def test_overview_is_refused_and_hidden_without_view_printjob(client):
    client.force_login(staff("devices", "view_device"))
    answer = client.get(reverse("admin:qprint_printjob_overview"))
    assert answer.status_code == 403
    assert answer.json()["error"] == "permission_denied"
    page = client.get(reverse("admin:app_list", args=["qprint"]))
    assert page.status_code == 200
    assert b"qprint-overview" not in page.content


def test_disabled_offline_device_with_queued_jobs_is_listed(db):
    device = make_device(name="off").device
    submit(device)
    api.disable_device(device)
    rows, total = overview.offline_devices_with_queued_jobs()
    assert total == 1 and rows[0]["enabled"] is False
    connect(Device.objects.get(pk=device.pk))
    assert overview.offline_devices_with_queued_jobs() == ([], 0)


@pytest.mark.services
def test_overview_queries_of_the_job_table_are_served_by_indexes(db):
    """EXPLAIN every statement of the overview on PostgreSQL, sequential scans discouraged: none
    reads the job table sequentially (each has an index to range over)."""
    if database.vendor != "postgresql":
        pytest.skip("EXPLAIN plans are PostgreSQL's")
    device = make_device().device
    submit(device)
    with CaptureQueriesContext(database) as captured:
        overview.print_overview()
    statements = [q["sql"] for q in captured.captured_queries]
    assert len(statements) == 7
    with database.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            plans = []
            for sql in statements:
                cursor.execute(f"EXPLAIN {sql}")
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
        finally:
            cursor.execute("RESET enable_seqscan")
    for sql, plan in zip(statements, plans, strict=True):
        assert "Seq Scan on qprint_job " not in plan + " ", f"{sql}\n{plan}"
    # Which of the job table's indexes the planner picks for the newest jobs depends on the
    # statistics earlier statements left (created_at alone, or device + created_at): either is
    # a range over an index. The trouble and queue figures have one index each.
    used = "\n".join(plans)
    assert "qprint_job_created_idx" in used or "qprint_job_recent_idx" in used, used
    for index in ("qprint_job_trouble_idx", "qprint_job_queued_idx"):
        assert index in used, used


def test_device_page_says_since_when_the_connection_holds_the_device(client, operator):
    device = make_device().device
    connection.take(device.pk, uuid.uuid4(), "node-c", 20)
    console = client.get(device_page(device)).context["console"]
    assert (console["live"], console["node"], console["ready"]) == (True, "node-c", False)
    assert console["since"] is not None
    assert console["gate_code"] == "not_ready"


def test_each_widget_appears_once_on_the_index_and_on_its_own_app_page_only(admin_client):
    # The example project's admin/index.html opts in to both; every app page extends it.
    pages = {
        url: admin_client.get(url).content.decode()
        for url in ("/admin/", "/admin/qprint/", "/admin/qcluster/", "/admin/auth/")
    }
    counts = {
        url: (page.count('id="qprint-overview"'), page.count('id="qcluster-nodes-widget"'))
        for url, page in pages.items()
    }
    assert counts == {
        "/admin/": (1, 1),
        "/admin/qprint/": (1, 0),
        "/admin/qcluster/": (0, 1),
        "/admin/auth/": (0, 0),
    }


def test_a_bad_overview_refresh_is_named_by_the_checks(settings):
    from django.core import checks

    settings.QPRINT = {"OVERVIEW_REFRESH_SECONDS": 0}
    messages = [m.msg for m in checks.run_checks() if m.id == "qprint.E003"]
    assert any("OVERVIEW_REFRESH_SECONDS" in m for m in messages)
