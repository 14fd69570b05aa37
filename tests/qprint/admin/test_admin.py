"""The qprint admin: device and job actions through the Python API, secrets shown once, state
columns read-only, "online" from the database clock, and permissions."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models.functions import Now
from django.db.models.signals import pre_save
from django.urls import reverse

from qprint import api
from qprint.domain import credentials
from qprint.models import ApplicationKey, Device, PrintJob
from tests.qprint.factories import connect, make_device

pytestmark = pytest.mark.django_db

DEVICES = reverse("admin:qprint_device_changelist")
JOBS = reverse("admin:qprint_printjob_changelist")


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="qprint", codename__in=codenames)
    )
    return user


@pytest.fixture
def operator(client):
    """Staff who may view and change devices and jobs, and view events."""
    user = staff(
        "operator",
        "view_device",
        "change_device",
        "view_printjob",
        "change_printjob",
        "view_printjobevent",
    )
    client.force_login(user)
    return user


def run_action(client, url, action, *objs):
    return client.post(
        url, {"action": action, "_selected_action": [str(o.pk) for o in objs]}, follow=True
    )


def texts(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_online_is_judged_on_the_database_clock(admin_client):
    connect(make_device(name="live").device, node="node-a")
    stale = connect(make_device(name="stale").device, node="node-b")
    Device.objects.filter(pk=stale.pk).update(
        connection_lease_expires_at=Now() - timedelta(seconds=1)
    )
    make_device(name="never")
    page = admin_client.get(DEVICES)
    assert page.status_code == 200
    rows = {d.name: d for d in page.context["cl"].result_list}
    assert rows["live"].connection_live is True
    assert rows["stale"].connection_live is False
    assert rows["never"].connection_live is False
    assert b"node-a" in page.content
    assert b"node-b" not in page.content


def test_pause_and_resume_actions_bump_the_control_revision(client, operator):
    device = make_device().device
    revision = device.control_revision
    answer = run_action(client, DEVICES, "pause_devices", device)
    assert "Paused 1 device." in texts(answer)
    device.refresh_from_db()
    assert (device.paused, device.control_revision) == (True, revision + 1)
    run_action(client, DEVICES, "resume_devices", device)
    device.refresh_from_db()
    assert (device.paused, device.control_revision) == (False, revision + 2)


def test_new_token_is_shown_once_and_replaces_the_old_one(client, operator):
    dev = make_device()
    answer = run_action(client, DEVICES, "issue_new_tokens", dev.device)
    assert answer.status_code == 200
    assert "no-store" in answer["Cache-Control"]
    token = answer.context["secrets"][0][1]
    assert token.encode() in answer.content
    assert credentials.device_for_token(token).pk == dev.device.pk
    assert credentials.device_for_token(dev.token) is None
    dev.device.refresh_from_db()
    assert dev.device.token_hash.encode() not in answer.content
    assert token not in dev.device.token_hash
    again = client.get(DEVICES)
    assert token.encode() not in again.content


def test_send_test_page_queues_a_job_for_the_device(client, operator):
    device = make_device().device
    answer = run_action(client, DEVICES, "send_test_page", device)
    assert "Queued a test page for 1 device." in texts(answer)
    job = PrintJob.objects.get(device=device)
    assert (job.status, job.content_type, job.title) == ("QUEUED", "text/plain", "Test page")
    assert job.submitted_by == "admin:operator"


def test_disable_action_locks_the_device_out(client, operator):
    dev = make_device()
    run_action(client, DEVICES, "disable_devices", dev.device)
    dev.device.refresh_from_db()
    assert dev.device.enabled is False
    claim = client.post(reverse("qprint:device-claim"), **dev.auth)
    assert claim.status_code == 403


def test_cancel_and_reprint_actions_go_through_the_api(client, operator):
    device = make_device().device
    queued, _ = api.submit_job("acme", device, b"one", "text/plain")
    done, _ = api.submit_job("acme", device, b"two", "text/plain")
    api.cancel_job(done)
    answer = run_action(client, JOBS, "cancel_jobs", queued, done)
    assert any("Cancelled 1 job" in t for t in texts(answer))
    assert any("Refused for 1 row" in t for t in texts(answer))
    queued.refresh_from_db()
    assert queued.status == "CANCELLED"

    first = run_action(client, JOBS, "reprint_jobs", queued)
    assert "Queued a reprint of 1 job." in texts(first)
    second = run_action(client, JOBS, "reprint_jobs", queued)
    assert any("already reprinted" in t for t in texts(second))
    assert PrintJob.objects.filter(reprint_of=queued).count() == 1


def test_job_page_is_read_only_and_shows_its_events(client, operator):
    device = make_device().device
    job, _ = api.submit_job("acme", device, b"one", "text/plain", title="Invoice")
    url = reverse("admin:qprint_printjob_change", args=[job.pk])
    page = client.get(url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert b"QUEUED" in page.content
    assert [row["event"].type for row in page.context["console"]["timeline"]] == ["QUEUED"]
    client.post(url, {"status": "PRINTED", "priority": 9})
    job.refresh_from_db()
    assert (job.status, job.priority) == ("QUEUED", 0)
    assert client.get(reverse("admin:qprint_printjob_add")).status_code == 403


def test_device_state_columns_are_read_only(admin_client):
    device = make_device().device
    url = reverse("admin:qprint_device_change", args=[device.pk])
    inline = {f"printers-{k}": v for k, v in {"TOTAL_FORMS": 0, "INITIAL_FORMS": 0}.items()}
    saved = admin_client.post(
        url,
        {
            "description": "by the door",
            "paused": "on",
            "control_revision": 99,
            "enabled": "",
            **inline,
        },
    )
    assert saved.status_code == 302
    device.refresh_from_db()
    assert device.description == "by the door"
    assert (device.paused, device.control_revision, device.enabled) == (False, 1, True)


def test_editing_a_device_does_not_write_back_its_connection_record(admin_client):
    """The device connects between the admin loading the row and saving it."""
    device = make_device().device
    url = reverse("admin:qprint_device_change", args=[device.pk])

    def device_connects_meanwhile(sender, instance, **kwargs):
        connect(Device.objects.get(pk=instance.pk), node="node-z")

    pre_save.connect(device_connects_meanwhile, sender=Device)
    try:
        inline = {"printers-TOTAL_FORMS": 0, "printers-INITIAL_FORMS": 0}
        saved = admin_client.post(url, {"description": "upstairs", **inline})
    finally:
        pre_save.disconnect(device_connects_meanwhile, sender=Device)
    assert saved.status_code == 302
    device.refresh_from_db()
    assert (device.description, device.connection_node) == ("upstairs", "node-z")
    assert device.connection_ready is True


def test_device_added_in_the_admin_gets_a_token_shown_once(admin_client):
    answer = admin_client.post(
        reverse("admin:qprint_device_add"),
        {"tenant": "acme", "name": "new", "kind": "agent", "description": ""},
    )
    assert answer.status_code == 200
    token = answer.context["secrets"][0][1]
    device = Device.objects.get(tenant="acme", name="new")
    assert credentials.device_for_token(token).pk == device.pk
    assert token.encode() in answer.content


def test_a_device_name_with_a_slash_is_refused_in_the_form(admin_client):
    """A device's name is one segment of its API URLs (``api/v1/devices/<name>/pause``)."""
    answer = admin_client.post(
        reverse("admin:qprint_device_add"),
        {"tenant": "acme", "name": "shop/front", "kind": "agent", "description": ""},
    )
    assert answer.status_code == 200
    assert "may not contain" in answer.content.decode()
    assert not Device.objects.filter(name="shop/front").exists()


def test_a_second_live_key_of_the_same_name_is_refused_in_the_form(admin_client):
    """One live key of a name per tenant: the form says so (it was a server error)."""
    add = reverse("admin:qprint_applicationkey_add")
    assert admin_client.post(add, {"tenant": "acme", "name": "erp"}).status_code == 200
    again = admin_client.post(add, {"tenant": "acme", "name": "erp"})
    assert again.status_code == 200
    assert "A live key acme/erp exists" in again.content.decode()
    assert ApplicationKey.objects.filter(tenant="acme", name="erp").count() == 1
    api.revoke_application_key("acme", "erp")  # a revoked key frees its name
    assert "secrets" in admin_client.post(add, {"tenant": "acme", "name": "erp"}).context


def test_application_key_is_shown_once_and_its_hash_never(admin_client):
    answer = admin_client.post(
        reverse("admin:qprint_applicationkey_add"), {"tenant": "acme", "name": "erp"}
    )
    secret = answer.context["secrets"][0][1]
    key = ApplicationKey.objects.get(tenant="acme", name="erp")
    assert credentials.key_for_secret(secret).pk == key.pk
    page = admin_client.get(reverse("admin:qprint_applicationkey_change", args=[key.pk]))
    assert key.key_hash.encode() not in page.content
    assert secret.encode() not in page.content
    assert b"key_hash" not in page.content


def test_revoke_action_stops_the_key(admin_client):
    answer = admin_client.post(
        reverse("admin:qprint_applicationkey_add"), {"tenant": "acme", "name": "erp"}
    )
    secret = answer.context["secrets"][0][1]
    key = ApplicationKey.objects.get(name="erp")
    run_action(admin_client, reverse("admin:qprint_applicationkey_changelist"), "revoke_keys", key)
    assert credentials.key_for_secret(secret) is None


def test_staff_without_permissions_sees_nothing_of_qprint(client):
    client.force_login(staff("nobody"))
    make_device()
    index = client.get(reverse("admin:index"))
    assert index.status_code == 200
    assert b"/admin/qprint/" not in index.content
    for name in ("device", "printjob", "devicecommand", "applicationkey", "printjobevent"):
        assert client.get(reverse(f"admin:qprint_{name}_changelist")).status_code == 403, name


def test_view_only_staff_cannot_run_actions(client):
    client.force_login(staff("viewer", "view_device", "view_printjob"))
    device = make_device().device
    job, _ = api.submit_job("acme", device, b"one", "text/plain")
    old_hash = device.token_hash
    assert client.get(DEVICES).status_code == 200
    page = client.get(JOBS)
    assert page.status_code == 200
    assert b"cancel_jobs" not in page.content
    run_action(client, DEVICES, "pause_devices", device)
    run_action(client, DEVICES, "issue_new_tokens", device)
    run_action(client, JOBS, "cancel_jobs", job)
    device.refresh_from_db()
    job.refresh_from_db()
    assert device.paused is False
    assert job.status == "QUEUED"
    assert device.token_hash == old_hash


def test_every_qprint_admin_page_renders_for_a_superuser(admin_client):
    device = connect(make_device().device)
    job, _ = api.submit_job("acme", device, b"one", "text/plain")
    command = api.send_command(device, "PING")
    key = api.create_application_key("acme", "erp")[0]
    event = job.events.first()
    pages = [
        reverse("admin:index"),
        reverse("admin:app_list", args=["qprint"]),
        reverse("admin:qprint_device_add"),
        reverse("admin:qprint_applicationkey_add"),
    ]
    for name, obj in [
        ("device", device),
        ("printjob", job),
        ("devicecommand", command),
        ("applicationkey", key),
        ("printjobevent", event),
    ]:
        pages += [
            reverse(f"admin:qprint_{name}_changelist"),
            reverse(f"admin:qprint_{name}_change", args=[obj.pk]),
        ]
    for url in pages:
        assert admin_client.get(url).status_code == 200, url
    assert admin_client.get(JOBS + "?status__exact=QUEUED&tenant=acme").status_code == 200


def test_queue_depth_counts_the_devices_queued_jobs(admin_client):
    busy = make_device(name="busy").device
    make_device(name="idle")
    for i in range(3):
        api.submit_job("acme", busy, bytes([i + 1]), "text/plain")
    done, _ = api.submit_job("acme", busy, b"x", "text/plain")
    api.cancel_job(done)
    rows = {d.name: d for d in admin_client.get(DEVICES).context["cl"].result_list}
    assert (rows["busy"].queue_depth, rows["idle"].queue_depth) == (3, 0)


def test_the_job_list_filters_jobs_the_device_has_held_longer_than_the_setting(
    admin_client, settings
):
    settings.QPRINT = {"STUCK_JOB_SECONDS": 600}
    make_device(name="held")
    jobs = {
        name: api.submit_job("acme", "held", b"%PDF-1.4", "application/pdf", title=name)[0]
        for name in ("old-received", "old-spooled", "new-received", "old-printed", "queued")
    }
    old, new = Now() - timedelta(seconds=900), Now() - timedelta(seconds=60)
    for name, status, received in (
        ("old-received", "RECEIVED", old),
        ("old-spooled", "SPOOLED", old),
        ("new-received", "RECEIVED", new),
        ("old-printed", "PRINTED", old),
    ):
        PrintJob.objects.filter(pk=jobs[name].pk).update(status=status, received_at=received)
    page = admin_client.get(JOBS, {"stuck": "yes"})
    assert page.status_code == 200
    assert sorted(j.title for j in page.context["cl"].result_list) == [
        "old-received",
        "old-spooled",
    ]
    assert b"longer than 10.0 min" in page.content


# -- for operators: what a list and a page say at a glance ---------------------------------


def test_the_job_list_shows_why_a_job_failed_and_its_times_to_the_second(admin_client):
    device = connect(make_device().device)
    job, _ = api.submit_job("acme", device, b"%PDF-1.4", "application/pdf", title="Contract")
    claim = api.claim_next_job(device.pk)
    api.record_device_event(
        device,
        job.pk,
        {
            "event_id": "8a1d5a3e-5d7e-4a53-9c62-4f1f7b2c7c11",
            "type": "FAILED",
            "claim_id": str(claim.claim_id),
            "occurred_at": "2026-01-01T00:00:00Z",
            "message": "media-jam: paper jam in tray 2",
        },
    )
    page = admin_client.get(JOBS).content.decode()
    assert "media-jam: paper jam in tray 2" in page
    created = PrintJob.objects.get(pk=job.pk).created_at
    assert created.strftime("%Y-%m-%d %H:%M:%S") in page  # the example project's zone is UTC


def test_devices_filter_by_online_and_offline(admin_client):
    connect(make_device(name="front-desk").device)
    make_device(name="warehouse")
    online = admin_client.get(DEVICES, {"online": "yes"}).content.decode()
    offline = admin_client.get(DEVICES, {"online": "no"}).content.decode()
    assert "front-desk" in online and "warehouse" not in online
    assert "warehouse" in offline and "front-desk" not in offline


def test_a_device_page_has_no_raw_duplicate_of_its_console_and_no_add_another(admin_client):
    device = connect(make_device().device)
    page = admin_client.get(reverse("admin:qprint_device_change", args=[device.pk]))
    html = page.content.decode()
    fieldsets = page.context["adminform"].fieldsets
    raw = dict(fieldsets)["Stored values"]
    assert "collapse" in raw["classes"]
    for shown_by_the_console in ("paused", "enabled", "connection_node", "last_seen_at"):
        assert shown_by_the_console not in raw["fields"]
    assert 'name="_addanother"' not in html and 'name="_continue"' in html
    assert 'id="qprint-enabled"' in html
    listing = admin_client.get(DEVICES).content.decode()
    assert "icon-no" not in listing.split('class="field-pause"')[1][:200]  # "no", not a red icon
    add = admin_client.get(reverse("admin:qprint_device_add")).content.decode()
    assert 'name="_addanother"' not in add


def test_a_job_page_keeps_the_stored_values_collapsed_and_without_the_console_s(admin_client):
    device = make_device().device
    job, _ = api.submit_job("acme", device, b"%PDF-1.4", "application/pdf")
    page = admin_client.get(reverse("admin:qprint_printjob_change", args=[job.pk]))
    ((title, raw),) = page.context["adminform"].fieldsets
    assert title == "Stored values" and "collapse" in raw["classes"]
    assert not {"status", "status_reason", "device", "claim_id", "attempts"} & set(raw["fields"])
