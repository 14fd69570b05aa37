"""The fit check where jobs are made: the HTTP submission, the Python API and the reprint refuse a
PDF that fits none of the target printer's media (422 ``media_mismatch``, nothing queued), accept
it with ``fit: "scale"``, and say in the QUEUED event when the printer reported no media."""

import base64
import json
from pathlib import Path

import pytest
from django.urls import reverse

from qprint import api
from qprint.core.errors import QPrintError
from qprint.documents import render
from qprint.documents.media import MediaMismatch
from qprint.models import PrintJob, PrintJobEvent
from tests.qprint.documents import pdfs
from tests.qprint.documents.pdfs import Page
from tests.qprint.factories import make_device, make_key
from tests.qprint.helpers import documents_in_a_storage

pytestmark = pytest.mark.django_db

MEDIA = Path(__file__).resolve().parents[1] / "documents" / "media"
A4 = pdfs.pdf([Page(210, 297, [(10, 10, 50, 50)])])
LABEL = pdfs.pdf([Page(101.6, 152.4)])


@pytest.fixture(autouse=True, scope="module")
def stop_workers():
    yield
    render.workers.close()


def recorded(name: str) -> list[str]:
    return json.loads((MEDIA / f"{name}.json").read_text())["media"]


@pytest.fixture
def device():
    device = make_device("acme", "warehouse").device
    api.replace_printers(
        device,
        [
            {
                "name": "zebra",
                "is_default": True,
                "status": "idle",
                "capabilities": {"media": recorded("ippeveprinter-label")},
            },
            {
                "name": "office",
                "status": "idle",
                "capabilities": {"media": recorded("cups-everywhere")},
            },
            {"name": "unknown", "status": "idle", "capabilities": {}},
        ],
    )
    return device


def labels_only(device) -> None:
    """The device's one printer, ``unknown``, now reports 4 x 6 in labels only."""
    media = {"media": ["oe_4x6-label_4x6in"]}
    api.replace_printers(
        device, [{"name": "unknown", "is_default": True, "status": "idle", "capabilities": media}]
    )


def queued_event(job) -> PrintJobEvent:
    return PrintJobEvent.objects.get(job=job, type="QUEUED")


def post(client, key, content, **fields):
    return client.post(
        reverse("qprint:jobs"),
        {
            "device": "warehouse",
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(content).decode(),
            **fields,
        },
        content_type="application/json",
        **key.auth,
    )


def test_an_a4_page_for_the_label_printer_is_refused_and_nothing_is_queued(client, device):
    key = make_key("acme")
    answer = post(client, key, A4)
    assert answer.status_code == 422
    body = answer.json()
    assert body["error"] == "media_mismatch"
    assert body["message"].startswith(
        "The document is 210 × 297 mm (A4); printer `zebra` has 4 × 6 in, "
        "4 × 4 in labels and 4 × 6 in labels."
    )
    assert not PrintJob.objects.exists()
    # The office printer (named in the job) has A4.
    assert post(client, key, A4, printer="office").status_code == 201


def test_fit_scale_accepts_it_and_the_queued_event_says_so(client, device):
    answer = post(client, make_key("acme"), A4, options={"fit": "scale"})
    assert answer.status_code == 201, answer.content
    job = PrintJob.objects.get(pk=answer.json()["id"])
    assert job.options == {"fit": "scale"}
    event = queued_event(job)
    assert event.detail["fit"] == "scale"
    assert event.detail["submitted_by"] == "key:backend"
    assert "the printer is asked to scale it" in event.message


def test_a_fitting_document_records_the_medium(client, device):
    job = PrintJob.objects.get(pk=post(client, make_key("acme"), LABEL).json()["id"])
    assert queued_event(job).detail["fit"] == "fits"
    assert queued_event(job).message == ""


def test_a_printer_that_reported_no_media_passes_unchecked_with_a_server_event(client, device):
    answer = post(client, make_key("acme"), A4, printer="unknown")
    assert answer.status_code == 201
    event = queued_event(answer.json()["id"])
    assert event.source == "SERVER"
    assert event.detail["fit"] == "unchecked"
    assert event.message == (
        "Printer `unknown` reported no media: the document's page size was not checked."
    )
    events = client.get(
        reverse("qprint:job-detail", args=[answer.json()["id"]]), **make_key("acme", "b").auth
    ).json()["events"]
    assert events[0]["type"] == "QUEUED" and "was not checked" in events[0]["message"]


def test_the_python_api_checks_the_same(device):
    with pytest.raises(MediaMismatch) as refused:
        api.submit_job("acme", device, A4, "application/pdf")
    assert (refused.value.status, refused.value.code) == (422, "media_mismatch")
    job, created = api.submit_job("acme", device, A4, "application/pdf", options={"fit": "scale"})
    assert created and queued_event(job).detail["fit"] == "scale"


def test_documents_kept_in_a_storage_record_the_same_note(device, settings, tmp_path):
    documents_in_a_storage(settings, tmp_path)
    job, _ = api.submit_job("acme", device, A4, "application/pdf", printer="unknown")
    assert queued_event(job).detail["fit"] == "unchecked"
    with pytest.raises(MediaMismatch):
        api.submit_job("acme", device, A4, "application/pdf")


def test_a_reprint_is_checked_against_the_media_reported_now(device):
    job, _ = api.submit_job("acme", device, A4, "application/pdf", printer="unknown")
    # The printer now reports label media only.
    labels_only(device)
    with pytest.raises(MediaMismatch) as refused:
        api.reprint_job(job)
    assert "printer `unknown` has 4 × 6 in labels" in refused.value.message
    assert not PrintJob.objects.filter(reprint_of=job).exists()
    scaled, _ = api.submit_job(
        "acme", device, A4, "application/pdf", printer="unknown", options={"fit": "scale"}
    )
    reprint = api.reprint_job(scaled)
    assert queued_event(reprint).detail["fit"] == "scale"


def test_the_admin_reprint_shows_the_refusal(client, device, django_user_model):
    job, _ = api.submit_job("acme", device, A4, "application/pdf", printer="unknown")
    labels_only(device)
    client.force_login(django_user_model.objects.create_superuser("oncall", "o@example.com"))
    answer = client.post(reverse("admin:qprint_printjob_reprint", args=[job.pk]))
    assert answer.status_code == 422
    text = answer.content.decode()
    assert "media_mismatch" in text and "4 × 6 in labels" in text
    assert not PrintJob.objects.filter(reprint_of=job).exists()


def test_unreadable_pdfs_are_not_refused_by_the_check(device):
    job, _ = api.submit_job("acme", device, pdfs.encrypted(), "application/pdf")
    assert queued_event(job).detail == {
        "submitted_by": "",
        "fit": "unchecked",
        "reason": "encrypted_document",
    }
    assert isinstance(MediaMismatch(), QPrintError)
