"""What a submission may carry: the accepted content types (a setting) and options the target
printer can do, judged on the capabilities its agent reported (qprint.domain.formats)."""

import pytest
from django.test import override_settings

from qprint import api
from qprint.agent.printers import SocketPrinter
from qprint.core.checks import check_qprint_settings
from qprint.core.errors import Invalid, UnsupportedContentType
from qprint.models import PrintJob
from tests.qprint.factories import connect, make_key, submitted_and_claimed
from tests.qprint.helpers import PDF, make_device

LASER = {
    "media": ["iso_a4_210x297mm", "na_letter_8.5x11in"],
    "sides": ["one-sided", "two-sided-long-edge"],
    "color": False,
    "document_formats": ["application/pdf", "text/plain"],
}


# What the agent reports for a socket:// printer.
RAW = SocketPrinter("printer.example").describe()[1]


@pytest.fixture
def device(db):
    device = make_device("acme", "front-desk").device
    api.replace_printers(
        device,
        [
            {"name": "Laser", "is_default": True, "status": "idle", "capabilities": LASER},
            {"name": "Labels", "status": "unknown", "capabilities": RAW},
        ],
    )
    return device


@pytest.mark.parametrize(
    "content_type",
    [
        "application/vnd.cups-raw",
        "application/octet-stream",
        "application/vnd.zebra-zpl",
        "application/zpl",
        "application/x-zpl",
        "application/vnd.eltron-epl",
        "application/x-epl",
        "application/vnd.escpos",
        "application/x-escpos",
    ],
)
def test_the_raw_formats_of_label_and_receipt_printers_are_accepted(device, content_type):
    job, _ = api.submit_job("acme", "front-desk", b"^XA^XZ", content_type, printer="Labels")
    assert job.content_type == content_type


def test_the_accepted_content_types_are_a_setting(device):
    with override_settings(QPRINT={"ACCEPTED_CONTENT_TYPES": ["application/vnd.zebra-zpl"]}):
        api.submit_job(
            "acme", "front-desk", b"^XA^XZ", "application/vnd.zebra-zpl", printer="Labels"
        )
        with pytest.raises(UnsupportedContentType) as refused:
            api.submit_job("acme", "front-desk", PDF, "application/pdf")
    assert refused.value.status == 415
    assert "application/vnd.zebra-zpl" in refused.value.message


@pytest.mark.parametrize(
    "value",
    [[], "application/pdf", ["application/pdf; charset=utf-8"], ["pdf"], [None]],
)
def test_a_bad_list_of_content_types_is_named_by_manage_py_check(value):
    with override_settings(QPRINT={"ACCEPTED_CONTENT_TYPES": value}):
        assert [m.id for m in check_qprint_settings()] == ["qprint.E008"]


def test_options_the_reported_printer_can_do_are_queued(device):
    job, _ = api.submit_job(
        "acme",
        "front-desk",
        PDF,
        "application/pdf",
        options={"copies": 2, "duplex": True, "media": "iso_a4_210x297mm"},
    )
    assert job.options["media"] == "iso_a4_210x297mm"


@pytest.mark.parametrize(
    ("options", "printer", "option"),
    [
        ({"duplex": "short-edge"}, None, "sides"),
        ({"media": "iso_a3_297x420mm"}, None, "media"),
        ({"color": True}, "Laser", "color"),
        ({"copies": "two"}, None, "copies"),
        ({"copies": 2}, "Labels", "copies"),
        ({"duplex": True}, "Labels", "sides"),
    ],
)
def test_an_option_the_printer_cannot_do_is_422_naming_it_and_nothing_is_queued(
    device, options, printer, option
):
    before = PrintJob.objects.count()
    with pytest.raises(Invalid) as refused:
        api.submit_job(
            "acme", "front-desk", PDF, "application/pdf", printer=printer, options=options
        )
    assert refused.value.status == 422
    assert refused.value.code == "unsupported_option"
    assert f"option '{option}'" in refused.value.message
    assert PrintJob.objects.count() == before


def test_a_format_the_printer_does_not_take_is_422(device):
    with pytest.raises(Invalid) as refused:
        api.submit_job("acme", "front-desk", b"\x89PNG", "image/png")
    assert "option 'content_type'" in refused.value.message
    assert "does not take image/png" in refused.value.message


def test_without_reported_capabilities_only_the_shape_of_options_is_checked(db):
    make_device("acme", "kiosk")
    api.submit_job("acme", "kiosk", PDF, "application/pdf", options={"duplex": True, "tray": 2})
    with pytest.raises(Invalid, match="option 'copies'"):
        api.submit_job("acme", "kiosk", PDF, "application/pdf", options={"copies": 0})


def test_content_type_parameters_are_dropped_so_none_reaches_the_printer_as_an_option(client, db):
    """libcups splits ``document-format=application/pdf; copies=500`` into options: the job
    keeps the base type only, and that is all its device is given."""
    key, dev = make_key(), make_device()
    connect(dev.device)
    job, assignment = submitted_and_claimed(
        client, key, dev, PDF, "Application/PDF; copies=500; job-hold-until=indefinite"
    )
    assert job["content_type"] == "application/pdf"
    assert PrintJob.objects.get(pk=job["id"]).content_type == "application/pdf"
    assert assignment["content_type"] == "application/pdf"
    document = client.get(assignment["document_url"], **dev.auth)
    assert document["Content-Type"] == "application/pdf"
