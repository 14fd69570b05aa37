"""The Python API host code calls (and the HTTP layer and the admin call under it)."""

import pytest
from django.test import override_settings

from qprint import api
from qprint.core.errors import Conflict, DocumentTooLarge, Invalid, NotFound, UnsupportedContentType
from qprint.core.states import JobStatus
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import CommandStatus, Device, DeviceCommand, PrintJob, PrintJobEvent
from tests.qprint.helpers import (
    PDF,
    connect,
    documents_in_a_storage,
    event,
    make_device,
    recording_wakeups,
    submit,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def woken():
    yield from recording_wakeups()


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """``with committed():`` runs the block's after-commit callbacks (wakeups) at its end."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def device():
    return connect(make_device().device)


# ---- submit ------------------------------------------------------------------------------------


def test_submit_queues_the_job_with_its_document_and_wakes_the_device_after_commit(
    device, woken, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job, created = api.submit_job(
            "acme", "front-desk", PDF, "application/pdf", title="T", submitted_by="app"
        )
        assert list(woken) == []  # nothing leaves before the commit
    for callback in callbacks:
        callback()
    assert created
    assert (job.status, job.title, job.submitted_by, job.tenant) == ("QUEUED", "T", "app", "acme")
    assert list(woken) == [("acme", device.pk, "job_queued")]
    assert list(job.events.values_list("type", "source")) == [("QUEUED", "SERVER")]


def test_same_idempotency_key_and_body_returns_the_same_job(device):
    first, created1 = api.submit_job(
        "acme", "front-desk", PDF, "application/pdf", idempotency_key="inv-42"
    )
    again, created2 = api.submit_job(
        "acme", "front-desk", PDF, "application/pdf", idempotency_key="inv-42"
    )
    assert (created1, created2) == (True, False)
    assert again.pk == first.pk
    assert PrintJob.objects.count() == 1


def test_same_idempotency_key_with_another_body_is_an_idempotency_conflict(device):
    api.submit_job("acme", "front-desk", PDF, "application/pdf", idempotency_key="inv-42")
    with pytest.raises(Conflict) as refused:
        api.submit_job(
            "acme", "front-desk", PDF + b"x", "application/pdf", idempotency_key="inv-42"
        )
    assert (refused.value.code, refused.value.status) == ("idempotency_conflict", 409)
    assert PrintJob.objects.count() == 1


def test_unknown_device_is_404_unknown_device_and_tenants_do_not_see_each_other(device):
    make_device("globex", "lobby")
    with pytest.raises(NotFound) as refused:
        api.submit_job("acme", "lobby", PDF, "application/pdf")
    assert (refused.value.code, refused.value.status) == ("unknown_device", 404)


@override_settings(QPRINT={"MAX_DOCUMENT_BYTES": 10})
def test_a_document_over_the_limit_is_413(device):
    with pytest.raises(DocumentTooLarge) as refused:
        api.submit_job("acme", "front-desk", b"x" * 11, "text/plain")
    assert (refused.value.code, refused.value.status) == ("document_too_large", 413)
    job, _ = api.submit_job("acme", "front-desk", b"x" * 10, "text/plain")
    assert job.size == 10


def test_an_unsupported_content_type_is_415_and_parameters_are_ignored(device):
    with pytest.raises(UnsupportedContentType) as refused:
        api.submit_job("acme", "front-desk", b"<html>", "text/html")
    assert refused.value.status == 415
    job, _ = api.submit_job("acme", "front-desk", b"hi", "text/plain; charset=utf-8")
    assert job.content_type == "text/plain"  # parameters never reach the device


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"options": [1]}, "options"),
        ({"priority": "high"}, "priority"),
        ({"expires_in": 0}, "expires_in"),
        ({"title": "t" * 300}, "title"),
    ],
)
def test_invalid_fields_are_422_naming_the_field(device, fields, field):
    with pytest.raises(Invalid) as refused:
        api.submit_job("acme", "front-desk", PDF, "application/pdf", **fields)
    assert f"'{field}'" in refused.value.message


def test_an_empty_document_is_refused(device):
    with pytest.raises(Invalid):
        api.submit_job("acme", "front-desk", b"", "application/pdf")


# ---- cancel ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["QUEUED", "CLAIMED"])
def test_cancel_before_the_device_has_the_job_cancels_at_once(device, status, woken, committed):
    job = submit(device)
    if status == "CLAIMED":
        claim_next_job(device.pk)
    with committed():
        cancelled = api.cancel_job(job, by="alice")
    assert (device.tenant, device.pk) in {(t, d) for t, d, _ in woken}
    job.refresh_from_db()
    assert job.status == cancelled.status == JobStatus.CANCELLED
    assert job.finished_at is not None
    assert not job.cancel_requested
    assert job.events.filter(type="CANCELLED", source="SERVER").count() == 1
    assert not DeviceCommand.objects.exists()


@pytest.mark.parametrize("path", [["RECEIVED"], ["RECEIVED", "SPOOLED"]])
def test_cancel_once_the_device_has_the_job_asks_the_device(device, path):
    job = submit(device)
    claim_next_job(device.pk)
    job.refresh_from_db()
    for t in path:
        record_device_event(device, job.pk, event(job, t))
    api.cancel_job(job)
    api.cancel_job(job)  # a second click asks once
    job.refresh_from_db()
    assert job.status == path[-1]
    assert job.cancel_requested
    command = DeviceCommand.objects.get()
    assert (command.type, command.status, command.device_id) == ("CANCEL_JOB", "PENDING", device.pk)
    assert command.payload == {"job_id": str(job.pk), "claim_id": str(job.claim_id)}


@pytest.mark.parametrize("final", ["PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED", "EXPIRED"])
def test_cancel_of_a_final_job_is_409_job_final(device, final):
    job = submit(device)
    PrintJob.objects.filter(pk=job.pk).update(status=final)
    with pytest.raises(Conflict) as refused:
        api.cancel_job(job)
    assert (refused.value.code, refused.value.status) == ("job_final", 409)
    assert PrintJob.objects.get(pk=job.pk).status == final


def test_cancel_is_scoped_to_the_tenant(device):
    job = submit(device)
    with pytest.raises(NotFound):
        api.cancel_job(job.pk, tenant="globex")


# ---- reprint -----------------------------------------------------------------------------------


def test_reprint_makes_a_new_job_with_the_same_document(device):
    job = submit(device, title="Label", options={"copies": 3}, priority=2)
    PrintJob.objects.filter(pk=job.pk).update(status=JobStatus.PRINTED)
    reprint = api.reprint_job(job, by="bob")
    assert reprint.pk != job.pk
    assert reprint.reprint_of_id == job.pk
    assert (reprint.status, reprint.title, reprint.options, reprint.priority) == (
        "QUEUED",
        "Label",
        {"copies": 3},
        2,
    )
    assert bytes(reprint.document.content) == PDF
    assert reprint.sha256 == job.sha256
    assert PrintJob.objects.get(pk=job.pk).status == JobStatus.PRINTED  # never re-queued
    assert job.events.filter(type="REPRINTED").count() == 1


def test_reprinting_the_same_job_twice_is_409_unless_forced(device):
    job = submit(device)
    api.reprint_job(job)
    with pytest.raises(Conflict) as refused:
        api.reprint_job(job)
    assert (refused.value.code, refused.value.status) == ("already_reprinted", 409)
    api.reprint_job(job, force=True)
    assert PrintJob.objects.filter(reprint_of=job).count() == 2


# ---- device control, settings, commands, printers, summary -------------------------------------


def test_pause_and_resume_bump_the_control_revision_once_and_wake(device, woken, committed):
    before = device.control_revision
    with committed():
        paused = api.pause_device(device)
        api.pause_device(device)  # already paused: nothing changes
    assert (paused.paused, paused.control_revision) == (True, before + 1)
    with committed():
        resumed = api.resume_device(device)
    assert (resumed.paused, resumed.control_revision) == (False, before + 2)
    assert [r for _, _, r in woken] == ["paused", "resumed"]


def test_update_settings_replaces_values_and_bumps_the_revision(device, woken, committed):
    before = device.settings_revision
    with committed():
        fresh = api.update_settings(device, {"duplex": True})
    assert (fresh.settings, fresh.settings_revision) == ({"duplex": True}, before + 1)
    assert ("acme", device.pk, "settings") in woken
    with pytest.raises(Invalid):
        api.update_settings(device, ["not", "a", "dict"])


def test_send_command_and_record_its_result(device, woken, committed):
    with committed():
        command = api.send_command(device, "PRINT_TEST_PAGE", {"printer": "Laser"})
    assert (command.status, command.payload) == ("PENDING", {"printer": "Laser"})
    assert ("acme", device.pk, "command") in woken
    done = api.record_command_result(device, command.pk, "DONE", {"ok": True})
    assert (done.status, done.result) == (CommandStatus.DONE, {"ok": True})
    assert done.finished_at is not None
    again = api.record_command_result(device, command.pk, "FAILED", None)  # a retried report
    assert again.status == CommandStatus.DONE
    other = make_device(name="other").device
    with pytest.raises(NotFound):
        api.record_command_result(other, command.pk, "DONE", None)
    with pytest.raises(Invalid):
        api.record_command_result(device, command.pk, "MAYBE", None)


def test_replace_printers_replaces_the_whole_list(device):
    api.replace_printers(device, [{"name": "A", "is_default": True}, {"name": "B"}])
    api.replace_printers(device, [{"name": "B", "status": "idle", "capabilities": {"color": 1}}])
    printers = list(device.printers.values_list("name", "is_default", "status", "capabilities"))
    assert printers == [("B", False, "idle", {"color": 1})]
    with pytest.raises(Invalid) as refused:
        api.replace_printers(device, [{"status": "idle"}])
    assert "printers[0].name" in refused.value.message


def test_device_summary_reports_online_ready_paused_node_and_queue_depth(device):
    submit(device)
    submit(device)
    api.replace_printers(device, [{"name": "Laser", "is_default": True}])
    summary = api.device_summary("acme", "front-desk")
    assert (summary.online, summary.ready, summary.paused, summary.node) == (
        True,
        True,
        False,
        "node-test",
    )
    assert summary.queue_depth == 2
    assert [p.name for p in summary.printers] == ["Laser"]
    Device.objects.filter(pk=device.pk).update(connection_id=None)
    offline = api.list_devices("acme")[0]
    assert (offline.online, offline.ready, offline.node) == (False, False, "")
    with pytest.raises(NotFound):
        api.device_summary("globex", "front-desk")


def test_get_job_is_scoped_to_the_tenant(device):
    job = submit(device)
    assert api.get_job("acme", str(job.pk)).pk == job.pk
    for tenant, job_id in (("globex", job.pk), ("acme", "not-a-uuid")):
        with pytest.raises(NotFound):
            api.get_job(tenant, job_id)


def test_credentials_rotate_disable_and_revoke(device):
    from qprint.domain import credentials

    new_device, token = api.create_device("acme", "kiosk")
    assert credentials.device_for_token(token).pk == new_device.pk
    rotated = api.rotate_device_token(new_device)
    assert credentials.device_for_token(token) is None
    assert credentials.device_for_token(rotated).pk == new_device.pk
    with pytest.raises(Conflict):
        api.create_device("acme", "kiosk")
    key, secret = api.create_application_key("acme", "backend")
    assert credentials.key_for_secret(secret).pk == key.pk
    assert PrintJobEvent.objects.count() == 0
    api.revoke_application_key("acme", "backend")
    assert credentials.key_for_secret(secret) is None
    assert credentials.key_for_secret("") is None


def test_a_key_records_its_last_use_without_a_write_per_request():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from qprint.domain import credentials

    key, secret = api.create_application_key("acme", "backend")
    assert key.last_used_at is None
    credentials.key_for_secret(secret)
    key.refresh_from_db()
    assert key.last_used_at is not None
    with CaptureQueriesContext(connection) as queries:
        credentials.key_for_secret(secret)
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT"]


def test_reprint_of_a_job_whose_document_is_gone_is_not_found(device):
    from qprint import documents
    from qprint.models import PrintDocument

    job = submit(device)
    PrintDocument.objects.filter(job=job).delete()
    with pytest.raises(NotFound):
        documents.open_document(job)
    with pytest.raises(NotFound):
        api.reprint_job(job)
    assert not PrintJob.objects.filter(reprint_of=job).exists()


def test_documents_can_live_in_a_django_storage(device, tmp_path, settings):
    from qprint import documents
    from qprint.models import PrintDocument

    documents_in_a_storage(settings, tmp_path)
    job = submit(device)
    assert (tmp_path / "qprint" / str(job.pk)).read_bytes() == PDF
    assert not PrintDocument.objects.filter(job=job).exists()
    assert documents.open_document(job.pk) == PDF
    reprint = api.reprint_job(job)
    assert documents.open_document(reprint) == PDF
    documents.delete_documents([job.pk])
    with pytest.raises(NotFound):
        documents.open_document(job)


ODD = ["app\x00", "app\ud800", 42]


@pytest.mark.parametrize(
    "call",
    [
        *(lambda d, by=by: api.submit_job("acme", d, PDF, "application/pdf", submitted_by=by)
          for by in ODD),
        *(lambda d, by=by: api.cancel_job(api.submit_job("acme", d, PDF, "application/pdf")[0],
                                          by=by) for by in ODD),
        *(lambda d, by=by: api.reprint_job(api.submit_job("acme", d, PDF, "application/pdf")[0],
                                           by=by) for by in ODD),
        *(lambda d, tenant=tenant: api.get_job(tenant, "0" * 32) for tenant in ODD),
        *(lambda d, tenant=tenant: api.get_device(tenant, "front-desk") for tenant in ODD),
        *(lambda d, tenant=tenant: api.submit_job(tenant, "front-desk", PDF, "application/pdf")
          for tenant in ODD),
        lambda d: api.revoke_application_key("acme\x00", "k"),
        lambda d: api.pause_device(None),
        lambda d: api.set_device_enabled("front-desk", False),
        lambda d: api.send_command(2**70, "PING"),
    ],
)  # fmt: skip
def test_host_code_with_odd_arguments_gets_a_qprint_error(device, call):
    """docs/JOBS.md: refusals raise qprint.core.errors exceptions, never the database's error
    nor a TypeError from inside."""
    from qprint.core.errors import QPrintError

    with pytest.raises(QPrintError):
        call(device)


def test_a_tenant_no_row_can_have_lists_no_device():
    assert api.list_devices("acme\x00") == []
