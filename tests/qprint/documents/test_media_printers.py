"""Against real printers (CUPS's ``ippeveprinter`` in a network of its own, a private ``cupsd``):
the media lists recorded in ``media/`` are what they report, and ``fit: "scale"`` reaches them as
IPP ``print-scaling=fit`` and CUPS ``fit-to-page``."""

import json
from pathlib import Path

import pytest

from qprint.agent.ipp import IppClient
from qprint.agent.printers import IppPrinter
from qprint.agent.spoolers import CupsSpooler, SpoolJob
from tests.qprint.agent import cups as cups_harness
from tests.qprint.agent import ippeve
from tests.qprint.documents import pdfs
from tests.qprint.documents.pdfs import Page
from tests.qprint.documents.record_media import LABEL_ATTRIBUTES, AttributesPrinter
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

MEDIA = Path(__file__).resolve().parent / "media"
A4 = pdfs.pdf([Page(210, 297, [(10, 10, 50, 50)])])


def recorded(name: str) -> list[str]:
    return json.loads((MEDIA / f"{name}.json").read_text())["media"]


@pytest.fixture(scope="module")
def printer():
    started = ippeve.started(ippeve.IppEvePrinter("qprint-fit"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def cups(printer):
    server, queue = cups_harness.everywhere_queue(printer.uri)
    yield server, queue
    server.stop()


def test_the_recorded_lists_are_what_the_printers_report(printer, cups):
    server, queue = cups
    assert IppPrinter(printer.uri).describe()[1]["media"] == recorded("ippeveprinter")
    everywhere = CupsSpooler(queue=queue, server=server.server).describe()[1]["media"]
    assert everywhere == recorded("cups-everywhere")
    cups_pdf = CupsSpooler(queue=server.queue, server=server.server).describe()[1]["media"]
    assert cups_pdf == recorded("cups-pdf")
    label = ippeve.started(AttributesPrinter("qprint-fit-label", attributes=LABEL_ATTRIBUTES))
    try:
        assert IppPrinter(label.uri).describe()[1]["media"] == recorded("ippeveprinter-label")
    finally:
        label.stop()


def _job(job_id: str, options: dict) -> SpoolJob:
    return SpoolJob(job_id, f"title {job_id}", "application/pdf", A4, None, options)


def _last(printer, count: int) -> dict:
    jobs = wait_until(
        lambda: len(printer.jobs()) >= count and printer.jobs(), 30, message="the printed job"
    )
    return jobs[count - 1]


def test_fit_scale_asks_an_ipp_printer_for_print_scaling_fit(printer):
    spooler = IppPrinter(printer.uri, poll_interval=0.1)
    before = len(printer.jobs())
    outcome = spooler.follow(spooler.submit(_job("fit-ipp", {"fit": "scale"})), 30)
    assert outcome.status == "PRINTED", (outcome, printer.log())
    assert _last(printer, before + 1)["env"].get("IPP_PRINT_SCALING") == "fit"


def test_fit_scale_goes_through_cups_as_fit_to_page(printer, cups):
    server, queue = cups
    spooler = CupsSpooler(queue=queue, server=server.server, poll_interval=0.2)
    before = len(printer.jobs())
    ref = spooler.submit(_job("fit-cups", {"fit": "scale"}))
    outcome = spooler.follow(ref, 60)
    assert outcome.status == "PRINTED", (outcome, server.log())
    _last(printer, before + 1)  # the printer got it
    # The job as CUPS kept it: asked to fit the page.
    queue_client = IppClient(f"ipp://{server.server}/printers/{queue}", timeout=10)
    job = queue_client.request(
        "Get-Job-Attributes",
        [("integer", "job-id", ref.rsplit("-", 1)[1]), ("keyword", "requested-attributes", "all")],
    )
    assert job.ok, job
    assert job.attributes.get("fit-to-page") is True, job.attributes
