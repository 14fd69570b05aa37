"""IPP Everywhere and CUPS against a printer nobody here wrote: CUPS's ``ippeveprinter``.

The printer runs in a network namespace of its own (tests/qprint/agent/ippeve.py); a private
``cupsd`` (tests/qprint/agent/cups.py) makes a queue on it with ``lpadmin -m everywhere`` for the
``cups:`` printers. What the printer received (document, ``IPP_*`` attributes) is read back from
its print command.
"""

import pytest

from qprint.agent.printers import IppPrinter
from qprint.agent.spoolers import CupsSpooler, SpoolJob, SpoolRejected
from tests.qprint.agent import cups as cups_harness
from tests.qprint.agent import ippeve
from tests.qprint.agent.cups import minimal_pdf
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

TEXT = b"qprint over IPP\n" * 50


def _start_printer(name: str) -> ippeve.IppEvePrinter:
    return ippeve.started(ippeve.IppEvePrinter(name))


@pytest.fixture(scope="module")
def printer():
    p = _start_printer("qprint-test")
    yield p
    p.stop()


@pytest.fixture
def empty_printer():
    """A printer of the test's own, out of paper: every job aborts. (A printer that ran out of
    paper keeps media-empty in its state and then holds the next jobs, as a real one does.)"""
    p = _start_printer("qprint-empty")
    p.fail_jobs(True)
    yield p
    p.stop()


@pytest.fixture
def eve(printer):
    printer.fail_jobs(False)
    printer.slow_jobs(False)
    yield printer
    printer.fail_jobs(False)
    printer.slow_jobs(False)


@pytest.fixture(scope="module")
def cups_queue(printer):
    server, queue = cups_harness.everywhere_queue(printer.uri)
    yield server, queue
    server.stop()


def _job(job_id, data=TEXT, content_type="text/plain", options=None):
    return SpoolJob(job_id, f"title {job_id}", content_type, data, None, options or {})


def _last_job(printer, count):
    jobs = wait_until(
        lambda: len(printer.jobs()) >= count and printer.jobs(),
        20,
        message="the printer's print command",
    )
    return jobs[count - 1]


# -- ipp:// directly -------------------------------------------------------------------------


def test_ipp_print_job_with_mapped_options_is_followed_to_completion(eve):
    spooler = IppPrinter(eve.uri, poll_interval=0.1)
    before = len(eve.jobs())
    ref = spooler.submit(
        _job(
            "ipp-1",
            options={
                "copies": 2,
                "duplex": True,
                "media": "iso_a4_210x297mm",
                "orientation": "landscape",
            },
        )
    )
    outcome = spooler.follow(ref, 30)
    assert outcome.status == "PRINTED", (outcome, eve.log())
    assert "job-completed-successfully" in outcome.message
    seen = _last_job(eve, before + 1)
    assert seen["document"] == TEXT
    env = seen["env"]
    assert env["IPP_COPIES"] == "2"
    assert env["IPP_SIDES"] == "two-sided-long-edge"
    assert env["IPP_MEDIA"] == "iso_a4_210x297mm"
    assert env["IPP_ORIENTATION_REQUESTED"] == "landscape"
    assert env["IPP_JOB_NAME"] == "title ipp-1"


def test_ipp_capabilities_and_state_come_from_the_printer(eve):
    status, caps = IppPrinter(eve.uri).describe()
    assert status in ("idle", "processing")
    assert "iso_a4_210x297mm" in caps["media"]
    assert caps["sides"] == ["one-sided", "two-sided-long-edge", "two-sided-short-edge"]
    assert caps["color"] is False
    assert "application/pdf" in caps["document_formats"]
    assert caps["copies_max"] == 999


def test_an_option_the_ipp_printer_cannot_do_fails_before_anything_is_sent(eve):
    spooler = IppPrinter(eve.uri)
    before = len(eve.jobs())
    with pytest.raises(SpoolRejected, match=r"option .color.*monochrome only"):
        spooler.submit(_job("ipp-color", options={"color": True}))
    with pytest.raises(SpoolRejected, match=r"option .media.*cannot do .na_a2"):
        spooler.submit(_job("ipp-media", options={"media": "na_a2_17x22in"}))
    with pytest.raises(SpoolRejected, match=r"refused the job.*document-format"):
        spooler.submit(_job("ipp-zpl", b"^XA^XZ", "application/vnd.zebra-zpl"))
    assert len(eve.jobs()) == before


def test_a_job_the_printer_aborts_out_of_paper_is_failed_with_its_reasons(empty_printer):
    spooler = IppPrinter(empty_printer.uri, poll_interval=0.1)
    outcome = spooler.follow(spooler.submit(_job("ipp-paper")), 30)
    assert outcome.status == "FAILED", outcome
    assert "aborted" in outcome.message
    _status, caps = spooler.describe()
    assert any(r.startswith("media-empty") for r in caps["state_reasons"]), caps


def test_a_job_the_agent_cancels_on_the_ipp_printer_is_cancelled(eve):
    spooler = IppPrinter(eve.uri, poll_interval=0.1)
    eve.slow_jobs(True)
    ref = spooler.submit(_job("ipp-cancel"))
    assert spooler.cancel(ref)
    outcome = spooler.follow(ref, 30)
    assert outcome.status == "CANCELLED", outcome


def test_an_unreachable_ipp_printer_fails_the_job():
    with pytest.raises(SpoolRejected, match="refused the job"):
        IppPrinter("ipp://127.0.0.1:9/ipp/print", timeout=2).submit(_job("ipp-none"))


# -- cups: on an IPP Everywhere queue --------------------------------------------------------


def test_cups_queue_prints_with_real_options(eve, cups_queue):
    server, queue = cups_queue
    spooler = CupsSpooler(queue=queue, server=server.server, poll_interval=0.2)
    before = len(eve.jobs())
    ref = spooler.submit(
        _job(
            "cups-1",
            minimal_pdf("cups"),
            "application/pdf",
            {"copies": 2, "sides": "two-sided-long-edge", "media": "iso_a4_210x297mm"},
        )
    )
    outcome = spooler.follow(ref, 60)
    assert outcome.status == "PRINTED", (outcome, server.log())
    env = _last_job(eve, before + 1)["env"]
    assert env["IPP_SIDES"] == "two-sided-long-edge"
    # CUPS sends the size as media-col (21000 x 29700 hundredths of mm is A4)
    media = env.get("IPP_MEDIA", "") + env.get("IPP_MEDIA_COL", "")
    assert "iso_a4" in media or "x-dimension=21000 y-dimension=29700" in media, env
    assert env["IPP_COPIES"] == "2", env


def test_cups_queue_capabilities_come_from_the_queue(eve, cups_queue):
    server, queue = cups_queue
    status, caps = CupsSpooler(queue=queue, server=server.server).describe()
    assert status in ("idle", "processing")
    assert "iso_a4_210x297mm" in caps["media"]
    assert "two-sided-long-edge" in caps["sides"]
    with pytest.raises(SpoolRejected, match="option 'media'"):
        CupsSpooler(queue=queue, server=server.server).submit(
            _job("cups-media", minimal_pdf(), "application/pdf", {"media": "na_a2_17x22in"})
        )


def test_a_job_the_printer_aborts_through_cups_is_failed_not_cancelled(cups_queue, empty_printer):
    server, _ = cups_queue
    queue = server.add_queue("EMPTY", empty_printer.uri, "-o", "printer-error-policy=abort-job")
    spooler = CupsSpooler(queue=queue, server=server.server, poll_interval=0.2)
    outcome = spooler.follow(
        spooler.submit(_job("cups-paper", minimal_pdf(), "application/pdf")), 60
    )
    assert outcome.status == "FAILED", (outcome, server.log())
    assert "without being asked" in outcome.message or "aborted" in outcome.message


def test_a_cups_job_the_agent_cancels_is_cancelled(eve, cups_queue):
    server, queue = cups_queue
    spooler = CupsSpooler(queue=queue, server=server.server, poll_interval=0.2)
    eve.slow_jobs(True)
    ref = spooler.submit(_job("cups-cancel", minimal_pdf(), "application/pdf"))
    assert spooler.cancel(ref)
    outcome = spooler.follow(ref, 60)
    assert outcome.status == "CANCELLED", outcome


def test_a_cups_job_that_disappears_is_outcome_unknown(eve, cups_queue):
    server, queue = cups_queue
    spooler = CupsSpooler(queue=queue, server=server.server, poll_interval=0.2)
    outcome = spooler.follow(f"{queue}-99999", 10)
    assert outcome.status == "OUTCOME_UNKNOWN", outcome
