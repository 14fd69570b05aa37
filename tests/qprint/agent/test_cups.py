"""The ``cups`` spooler against a real CUPS scheduler with the cups-pdf virtual printer."""

import pytest

from qprint.agent.spoolers import CupsSpooler, SpoolJob, SpoolRejected
from tests import services
from tests.qprint.agent.cups import CupsServer, minimal_pdf, unavailable_reason
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cups():
    reason = unavailable_reason()
    if reason:
        if services.required():
            pytest.fail(f"QPRINT_REQUIRE_SERVICES=1 but CUPS cannot run: {reason}")
        pytest.skip(f"CUPS cannot run here: {reason}")
    server = CupsServer()
    try:
        server.start()
    except Exception as exc:
        server.stop()
        if services.required():
            raise
        pytest.skip(f"CUPS did not start: {exc!r}")
    yield server
    server.stop()


def test_cups_spooler_prints_a_pdf_through_the_queue_and_follows_it_to_completion(cups):
    spooler = CupsSpooler(queue=cups.queue, server=cups.server, poll_interval=0.1)
    document = minimal_pdf("hello from qprint")
    job = SpoolJob("4f1c", "invoice 42", "application/pdf", document)

    ref = spooler.submit(job)
    assert ref.startswith(f"{cups.queue}-")
    outcome = spooler.follow(ref, timeout=30)

    assert outcome.status == "PRINTED", (outcome, cups.log())
    pdfs = wait_until(cups.pdfs, 10, message="cups-pdf output")
    assert len(pdfs) == 1
    assert pdfs[0].read_bytes().startswith(b"%PDF")


def test_printers_are_reported_from_lpstat(cups):
    printers = CupsSpooler(queue=cups.queue, server=cups.server).printers()
    assert {
        "name": cups.queue,
        "is_default": True,
        "status": "idle",
        "capabilities": {},
    } in printers


def test_unknown_queue_is_refused_before_anything_is_printed(cups):
    spooler = CupsSpooler(queue="NO_SUCH_QUEUE", server=cups.server)
    with pytest.raises(SpoolRejected):
        spooler.submit(SpoolJob("x", "t", "application/pdf", minimal_pdf()))
