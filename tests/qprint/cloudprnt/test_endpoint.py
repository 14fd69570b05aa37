"""A CloudPRNT printer against the endpoint, in-process: every state of its jobs, the printer's
own state, and what the endpoint refuses."""

import base64
import logging

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from qprint import api
from qprint.core.errors import Conflict, Invalid, NotFound
from qprint.domain import cloudprnt
from qprint.models import Device, DevicePrinter, PrintJob, PrintJobEvent, WebhookDelivery
from qprint.webhooks import endpoints
from tests.qprint.cloudprnt.endpoint import STARPRNT, event_types, job_of, submit
from tests.qprint.cloudprnt.simulator import StarPrinter
from tests.qprint.factories import connect, make_device, make_key

pytestmark = pytest.mark.django_db


def test_a_job_goes_claimed_received_printed(printer):
    job = submit(options={"cut": "partial", "buzzer_end": 2})

    answer = printer.poll()
    assert answer["jobReady"] is True
    assert answer["mediaTypes"] == ["application/vnd.star.starprnt"]
    assert answer["deleteMethod"] == "DELETE"
    token = answer["jobToken"]
    assert job_of(job).status == "CLAIMED"
    assert str(job_of(job).claim_id) == token

    # The claim is replayed at every poll until the printer fetched it.
    assert printer.poll()["jobToken"] == token

    reply = printer.fetch(token, "application/vnd.star.starprnt")
    assert reply.status == 200
    assert reply.body == STARPRNT
    assert reply.headers["Content-Type"] == "application/vnd.star.starprnt"
    assert reply.headers["X-Star-Cut"] == "partial; feed=true"
    assert reply.headers["X-Star-Buzzerendpattern"] == "2"
    assert job_of(job).status == "RECEIVED"

    # A repeated GET answers the same bytes and records nothing new.
    recorded = event_types(job)
    again = printer.fetch(token, "application/vnd.star.starprnt")
    assert again.body == STARPRNT
    assert event_types(job) == recorded

    # While the printer prints, the next job waits.
    submit(b"second")
    assert printer.poll(printing=True)["jobReady"] is False

    confirmed = printer.confirm(token, "200 OK")
    assert confirmed.status == 200
    assert confirmed.json() == {"status": "PRINTED", "recorded": True}
    assert job_of(job).status == "PRINTED"
    assert event_types(job) == ["QUEUED", "CLAIMED", "RECEIVED", "PRINTED"]
    # Confirmed again (a retried DELETE): nothing changes.
    assert printer.confirm(token, "200 OK").json() == {"status": "PRINTED", "recorded": False}
    assert event_types(job) == ["QUEUED", "CLAIMED", "RECEIVED", "PRINTED"]


def test_an_error_code_fails_the_job_with_its_meaning(printer):
    job = submit()
    token = printer.poll()["jobToken"]
    printer.fetch(token, "application/vnd.star.starprnt")
    printer.delete_with_get = True  # the GET form of the confirmation
    reply = printer.confirm(token, "410 Out of paper")
    assert reply.status == 200
    failed = job_of(job)
    assert failed.status == "FAILED"
    assert failed.status_reason == "410 Out of paper (media-empty)"
    event = PrintJobEvent.objects.get(job_id=job.pk, type="FAILED")
    assert event.detail["code"] == "410"
    assert event.detail["printer_state_reasons"] == ["media-empty"]


def test_every_round_of_the_simulated_printer_prints_each_job_once(printer):
    jobs = [submit(f"receipt {n}".encode(), "text/plain") for n in range(3)]
    printer.supports = ("text/plain",)
    for _ in range(5):
        printer.print_next()
    assert [p.content for p in printer.printed] == [b"receipt 0", b"receipt 1", b"receipt 2"]
    assert {job_of(j).status for j in jobs} == {"PRINTED"}


def test_a_lost_confirmation_ends_outcome_unknown_and_is_never_offered_again(printer):
    job = submit()
    printed = printer.print_next(confirm=False)
    assert printed is not None
    assert job_of(job).status == "RECEIVED"
    with override_settings(QPRINT={"CLOUDPRNT_CONFIRM_SECONDS": 3600}):
        assert cloudprnt.expire_unconfirmed() == 0
    PrintJob.objects.filter(pk=job.pk).update(
        received_at=job_of(job).received_at - __import__("datetime").timedelta(seconds=121)
    )
    assert cloudprnt.expire_unconfirmed() == 1
    ended = job_of(job)
    assert ended.status == "OUTCOME_UNKNOWN"
    assert "did not confirm" in ended.status_reason
    assert printer.poll()["jobReady"] is False
    assert printer.fetch(printed.token, printed.media_type).status == 404
    # The late confirmation changes nothing.
    assert printer.confirm(printed.token).json() == {"status": "OUTCOME_UNKNOWN", "recorded": False}


def test_the_maintenance_task_runs_the_unconfirmed_sweep(printer):
    from qprint.domain import maintenance

    job = submit()
    printer.print_next(confirm=False)
    with override_settings(QPRINT={"CLOUDPRNT_CONFIRM_SECONDS": 0.001}):
        maintenance.expire()
    assert job_of(job).status == "OUTCOME_UNKNOWN"


def test_pdf_png_and_jpeg_are_offered_as_rendered_png(printer):
    job = submit(b"%PDF-1.4\n%%EOF\n", "application/pdf")
    answer = printer.poll()
    assert answer["mediaTypes"] == ["image/png"]
    assert job_of(job).status == "CLAIMED"


def test_a_png_job_is_offered_as_it_is_first(made):
    device, _ = made
    assert cloudprnt.offered(device.settings, "image/png") == ("image/png",)
    assert cloudprnt.offered(device.settings, "image/jpeg") == ("image/jpeg", "image/png")
    assert cloudprnt.offered({"media_types": ["image/png"]}, "image/jpeg") == ("image/png",)
    assert cloudprnt.offered({"media_types": ["text/plain"]}, "application/pdf") == ()


def test_a_type_that_was_not_offered_is_415(printer):
    submit()
    token = printer.poll()["jobToken"]
    reply = printer.fetch(token, "image/png")
    assert reply.status == 415
    assert reply.json()["error"] == "unsupported_media_type"


def test_a_submission_reads_the_printers_formats_in_its_one_read_of_the_device(made):
    """What a CloudPRNT printer takes is read with the device, in the submission's first
    statement: a refused format costs no other."""
    with CaptureQueriesContext(connection) as seen, pytest.raises(Invalid) as refused:
        submit(b"^XA^XZ", "application/vnd.zebra-zpl")
    assert refused.value.code == "unsupported_format" and len(seen) == 1, seen.captured_queries
    with CaptureQueriesContext(connection) as seen:
        submit()
    # The device, then the job (in the test's transaction: within a savepoint).
    sent = [q["sql"] for q in seen.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert [sql for sql in sent if sql.startswith("SELECT")] == sent[:1], sent
    if connection.vendor == "postgresql":  # the job, its document and its event: one statement
        assert len(sent) == 2, sent


def test_a_format_the_printer_cannot_take_is_refused_at_submission(client, made):
    key = make_key()
    response = client.post(
        reverse("qprint:jobs"),
        {
            "device": "counter",
            "content_type": "application/vnd.zebra-zpl",
            "content_base64": base64.b64encode(b"^XA^XZ").decode(),
        },
        content_type="application/json",
        **key.auth,
    )
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "unsupported_format"
    assert "application/vnd.star.starprnt" in body["message"]
    assert "application/pdf" in body["message"]
    assert not PrintJob.objects.exists()
    with pytest.raises(Exception) as refused:
        submit(options={"cut": "sideways"})
    assert refused.value.code == "unsupported_option"


def test_the_first_poll_binds_the_mac_and_another_mac_is_refused(printer, made):
    device, _ = made
    printer.poll()
    assert Device.objects.get(pk=device.pk).printer_mac == printer.mac
    job = submit()
    impostor = StarPrinter(printer.send, printer.name, printer.token, mac="00:11:62:ff:ff:ff")
    reply = impostor.poll_raw()
    assert reply.status == 403
    assert reply.json()["error"] == "printer_mismatch"
    assert job_of(job).status == "QUEUED"  # nothing was handed out
    assert Device.objects.get(pk=device.pk).agent_info["refused_mac"] == "00:11:62:ff:ff:ff"
    # The job requests of another MAC are refused too.
    token = printer.poll()["jobToken"]
    assert impostor.fetch(token, "application/vnd.star.starprnt").status == 403
    assert job_of(job).status == "CLAIMED"
    # Forgetting the printer lets the next one bind.
    api.forget_printer(device)
    assert impostor.poll()["jobReady"] is True
    assert Device.objects.get(pk=device.pk).printer_mac == impostor.mac


def test_forgetting_the_printer_of_an_agent_s_device_is_refused_and_leaves_its_socket_s_row():
    """An agent's connection is its socket's: forgetting a printer it does not have is refused
    (409 ``not_cloudprnt``) and leaves the connection the row names; an unknown device is 404."""
    agent = connect(make_device(name="desk-agent").device)
    with pytest.raises(Conflict) as refused:
        api.forget_printer(agent)
    assert refused.value.code == "not_cloudprnt" and refused.value.status == 409
    assert agent.connection_id is not None
    assert Device.objects.get(pk=agent.pk).connection_id == agent.connection_id
    with pytest.raises(NotFound):
        api.forget_printer(agent.pk + 1000)


def test_the_poll_keeps_the_printer_state_and_what_it_says_of_itself(printer, made):
    device, _ = made
    first = printer.poll()
    assert [a["request"] for a in first["clientAction"]] == [
        "ClientType",
        "ClientVersion",
        "Encodings",
        "GetPollInterval",
    ]
    second = printer.poll()  # answers the requests
    assert "clientAction" not in second
    row = DevicePrinter.objects.get(device=device)
    assert row.status == "idle"
    assert row.is_default
    caps = row.capabilities
    assert caps["model"] == "Star mC-Print3"
    assert caps["firmware"] == "5.1 CPv1.3"
    assert caps["poll_interval"] == 5
    assert "application/vnd.star.starprnt" in caps["encodings"]
    assert "application/pdf" in caps["document_formats"]
    assert Device.objects.get(pk=device.pk).agent_info["model"] == "Star mC-Print3"

    printer.status_code = "420 Cover open"
    printer.poll()
    row.refresh_from_db()
    assert row.status == "stopped"
    assert row.capabilities["state_reasons"] == ["cover-open"]
    assert row.capabilities["status_code"] == "420"

    summary = api.device_summary("acme", "counter")
    assert summary.kind == "cloudprnt"
    assert summary.online and summary.ready
    assert summary.printers[0].status == "stopped"


def test_an_unchanged_poll_writes_no_printer_row(printer, made, django_assert_max_num_queries):
    printer.poll()
    printer.poll()
    with django_assert_max_num_queries(1):  # the poll's one statement, its authentication in it
        answer = printer.poll()
    assert answer == {"jobReady": False}


@override_settings(QPRINT={"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"]})
def test_a_new_printer_state_is_announced_to_webhooks(printer):
    endpoints.create_endpoint("acme", "http://127.0.0.1:9/hooks")
    printer.poll()
    assert not WebhookDelivery.objects.filter(type="device.printer_state").exists()
    printer.status_code = "410 Out of paper"
    printer.poll()
    delivery = WebhookDelivery.objects.get(type="device.printer_state")
    data = delivery.payload["data"]
    assert data["device"]["name"] == "counter"
    assert data["device"]["kind"] == "cloudprnt"
    assert data["printer"]["status"] == "stopped"
    assert data["printer"]["capabilities"]["state_reasons"] == ["media-empty"]
    printer.poll()
    assert WebhookDelivery.objects.filter(type="device.printer_state").count() == 1
    assert WebhookDelivery.objects.filter(type="device.connected").count() == 1


def test_a_paused_device_gets_no_job_and_resumes(printer):
    job = submit()
    api.pause_device(Device.objects.get(name="counter"))
    assert printer.poll()["jobReady"] is False
    assert job_of(job).status == "QUEUED"
    api.resume_device(Device.objects.get(name="counter"))
    assert printer.poll()["jobReady"] is True


def test_a_job_cancelled_before_the_get_is_not_printed(printer):
    job = submit()
    token = printer.poll()["jobToken"]
    api.cancel_job(job_of(job))
    assert job_of(job).status == "CANCELLED"
    assert printer.fetch(token, "application/vnd.star.starprnt").status == 404
    assert printer.poll()["jobReady"] is False


def test_an_expired_job_is_not_offered(printer):
    from qprint.domain import maintenance

    job = submit(expires_in=1)
    PrintJob.objects.filter(pk=job.pk).update(
        expires_at=job_of(job).created_at - __import__("datetime").timedelta(seconds=1)
    )
    assert printer.poll()["jobReady"] is False
    maintenance.expire_jobs()
    assert job_of(job).status == "EXPIRED"


def test_an_older_firmware_without_token_gets_the_held_job(printer):
    """Without ``token`` the GET and the confirmation are of the job the printer holds, never of
    one that was cancelled before anything claimed it (it has no claim time)."""
    never_claimed = submit()
    api.cancel_job(never_claimed)
    job = submit()
    printer.poll()
    reply = printer.fetch(None, "application/vnd.star.starprnt")
    assert reply.status == 200 and reply.body == STARPRNT
    assert printer.confirm(None).json()["status"] == "PRINTED"
    assert job_of(job).status == "PRINTED"
    assert job_of(never_claimed).status == "CANCELLED"


@pytest.mark.parametrize("request_kind", ["job request", "confirmation"])
def test_a_job_request_from_another_mac_is_logged_and_kept_as_a_poll_is(
    printer, made, caplog, request_kind
):
    """docs/CLOUDPRNT.md, "Security": a GET or a confirmation from another MAC with the same
    credential is refused 403, changes nothing, is logged and kept in ``agent_info`` for the
    admin, as a poll from it is."""
    device, _ = made
    job = submit()
    token = printer.poll()["jobToken"]
    impostor = StarPrinter(printer.send, printer.name, printer.token, mac="00:11:62:ff:ff:ff")
    with caplog.at_level(logging.WARNING, logger="qprint.cloudprnt"):
        if request_kind == "job request":
            reply = impostor.fetch(token, "application/vnd.star.starprnt")
        else:
            reply = impostor.confirm(token)
    assert reply.status == 403 and reply.json()["error"] == "printer_mismatch"
    assert f"a {request_kind} came from 00:11:62:ff:ff:ff" in reply.json()["message"]
    assert "cloudprnt_mac_refused" in caplog.text
    assert Device.objects.get(pk=device.pk).agent_info["refused_mac"] == impostor.mac
    assert job_of(job).status == "CLAIMED"


def test_answers_are_never_cached(printer):
    reply = printer.poll_raw()
    assert "no-store" in reply.headers["Cache-Control"]
    assert reply.headers["Pragma"] == "no-cache"
    assert reply.headers["Expires"] == "0"


# --- rendered for the printer -------------------------------------------------------------------


@pytest.fixture
def stop_render_workers():
    from qprint.documents import render

    yield
    render.workers.close()


def test_a_pdf_is_fetched_as_one_bit_png_at_the_device_dots_pages_stacked(
    printer, made, stop_render_workers
):
    import io

    from PIL import Image

    from tests.qprint.documents import pdfs

    device, _ = made
    api.update_settings(device, {"dots": 384})
    receipt = pdfs.pdf(
        [pdfs.Page(80, 100, [(10, 10, 20, 20)]), pdfs.Page(80, 50, [(10, 10, 60, 30)])]
    )
    job = submit(receipt, "application/pdf")
    answer = printer.poll()
    assert answer["mediaTypes"] == ["image/png"]
    reply = printer.fetch(answer["jobToken"], "image/png")
    assert reply.status == 200, reply.body[:300]
    assert reply.headers["Content-Type"] == "image/png"
    image = Image.open(io.BytesIO(reply.body))
    assert image.mode == "1"
    assert image.width == 384
    assert image.height == pytest.approx(384 * 150 / 80, abs=3)  # both pages, one under the other
    # The second page's wide box is in the lower part of the image.
    lower = image.crop((0, int(384 * 100 / 80), 384, image.height)).convert("L")
    assert lower.getextrema()[0] == 0
    assert job_of(job).status == "RECEIVED"
    assert printer.fetch(answer["jobToken"], "image/png").body == reply.body


def test_a_printer_fetching_again_gets_the_image_drawn_the_first_time(printer, stop_render_workers):
    """The image is kept in the process's render cache: a printer's second GET of the job (a
    retry) is not drawn again. Shown by a renderer that would now refuse it: not asked."""
    from tests.qprint.documents import pdfs

    submit(pdfs.pdf([pdfs.Page(80, 100, [(10, 10, 20, 20)])]), "application/pdf")
    token = printer.poll()["jobToken"]
    first = printer.fetch(token, "image/png")
    assert first.status == 200, first.body[:300]
    with override_settings(QPRINT={"RENDER_MAX_PIXELS": 1}):
        again = printer.fetch(token, "image/png")
    assert (again.status, again.body) == (200, first.body)


def test_pages_too_many_pixels_together_are_refused_before_any_is_drawn(
    printer, stop_render_workers
):
    """Each page within the bounds, but the one image the printer would get is not: 422
    ``too_many_pixels`` from the page sizes, in the renderer's time limit (every page drawn would
    take longer than that), and the job stays the printer's to confirm as failed."""
    from tests.qprint.documents import pdfs

    long_receipts = pdfs.pdf([pdfs.Page(80, 5080, [(10, 10, 60, 4000)])] * 20)
    job = submit(long_receipts, "application/pdf")
    token = printer.poll()["jobToken"]
    with override_settings(QPRINT={"RENDER_TIMEOUT_SECONDS": 2}):
        reply = printer.fetch(token, "image/png")
    assert reply.status == 422, reply.body[:300]
    assert reply.json()["error"] == "too_many_pixels"
    assert "20 pages at 576 wide" in reply.json()["message"]
    assert job_of(job).status == "CLAIMED"
    assert printer.confirm(token, "520 Job download error").status == 200
    assert job_of(job).status == "FAILED"


def test_a_jpeg_is_offered_as_it_is_and_as_png(printer, stop_render_workers):
    import io

    from PIL import Image

    picture = io.BytesIO()
    Image.new("RGB", (1000, 200), "white").save(picture, "JPEG")
    submit(picture.getvalue(), "image/jpeg")
    printer.supports = ("image/png",)
    answer = printer.poll()
    assert answer["mediaTypes"] == ["image/jpeg", "image/png"]
    reply = printer.fetch(answer["jobToken"], printer.choose(answer["mediaTypes"]))
    assert Image.open(io.BytesIO(reply.body)).width == 576


def test_the_admin_makes_a_cloudprnt_device_and_lists_its_kind_and_printer(admin_client, printer):
    answer = admin_client.post(
        reverse("admin:qprint_device_add"),
        {"tenant": "acme", "name": "bar", "kind": "cloudprnt", "description": ""},
    )
    assert answer.status_code == 200
    token = answer.context["secrets"][0][1]
    assert Device.objects.get(name="bar").kind == "cloudprnt"
    from qprint.domain import credentials

    assert credentials.device_for_token(token, kind="cloudprnt").name == "bar"
    printer.status_code = "410 Out of paper"
    printer.poll()
    listing = admin_client.get(reverse("admin:qprint_device_changelist"))
    assert b"CloudPRNT printer" in listing.content
    assert b"stopped" in listing.content
    device = Device.objects.get(name="counter")
    page = admin_client.get(reverse("admin:qprint_device_change", args=[device.pk]))
    assert printer.mac.encode() in page.content
    assert b"media-empty" in page.content
    forgot = admin_client.post(
        reverse("admin:qprint_device_act", args=[device.pk, "forget_printers"])
    )
    assert forgot.status_code == 302
    assert Device.objects.get(pk=device.pk).printer_mac == ""


def test_metrics_count_printers_by_state_and_requests_by_answer(printer):
    from qprint.metrics import collectors, instruments

    printer.status_code = "410 Out of paper"
    printer.poll()
    StarPrinter(printer.send, printer.name, "wrong").poll_raw()
    text = collectors.render()
    assert 'qprint_cloudprnt_printers{code="410",state="stopped"} 1.0' in text
    from prometheus_client import generate_latest

    exposed = generate_latest(instruments.PROCESS).decode()
    assert 'qprint_cloudprnt_requests_total{answer="none",request="poll",status="200"}' in exposed
    assert 'answer="unauthorized",request="poll",status="401"' in exposed
