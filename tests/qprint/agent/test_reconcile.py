"""After a reconnect the agent answers hello's ``active_jobs`` from its journal; printers are
reported at connect and again when they change; a job's printer picks the printer; and the
journal rule holds for raw printers across an agent killed mid-job."""

import asyncio
import os
import signal
import socket
import sys
import uuid

import pytest

from qprint.agent.config import journal_path
from qprint.agent.journal import Journal
from qprint.agent.printers import Printers, SocketPrinter
from qprint.agent.spoolers import NullSpooler
from tests.qprint.agent.conftest import CountingSpooler
from tests.qprint.agent.raw import ClosingPrinter, StallingPrinter
from tests.waiting import eventually

PDF = b"%PDF-1.4\n% a document\n"
# Claim ids, as the server makes them (UUIDs).
LOST_CLAIM, CLAIM = str(uuid.uuid4()), str(uuid.uuid4())


async def test_a_job_the_journal_does_not_know_is_reported_outcome_unknown_and_not_printed(
    server, start_agent, spooler
):
    device = server.add_device()
    # The server has the job RECEIVED on this device; the agent's journal was lost with it.
    job = server.add_job(device, PDF, status="RECEIVED", claim_id=LOST_CLAIM)
    start_agent(device)
    await eventually(lambda: job.status == "OUTCOME_UNKNOWN", message="reconciled")
    event = server.events_of(job)[-1]
    assert event["claim_id"] == LOST_CLAIM
    assert event["detail"] == {"reason": "no_journal_record"}
    assert "no record" in event["message"]
    assert spooler.submitted == []


async def test_a_job_final_in_the_journal_is_reported_again_not_printed_again(
    server, start_agent, spooler, tmp_path
):
    device = server.add_device()
    job = server.add_job(device, PDF, status="SPOOLED", claim_id=CLAIM)
    journal = Journal(journal_path(tmp_path / "state", "dev"))
    journal.remember_claim(job.id, CLAIM)
    journal.advance(job.id, "PRINTED")  # its report never reached the server
    journal.close()
    start_agent(device)
    await eventually(lambda: job.status == "PRINTED", message="final state reported again")
    assert spooler.submitted == []


async def test_printers_are_sent_at_connect_and_again_only_when_they_change(
    server, start_agent, tmp_path
):
    class Changing(NullSpooler):
        state = "idle"

        def describe(self):
            return self.state, {"state_reasons": [] if self.state == "idle" else ["media-empty"]}

    changing = Changing()
    device = server.add_device()
    start_agent(device, spooler=changing, printers_poll_seconds=0.05)
    await eventually(lambda: device.printer_reports == 1, message="printers at connect")
    await asyncio.sleep(0.3)  # several polls, nothing changed
    assert device.printer_reports == 1
    changing.state = "stopped"
    await eventually(lambda: device.printer_reports == 2, message="printers after a change")
    assert device.printers[0]["status"] == "stopped"
    assert device.printers[0]["capabilities"]["state_reasons"] == ["media-empty"]


async def test_a_jobs_printer_picks_the_printer_by_name(server, start_agent, tmp_path):
    office = CountingSpooler(tmp_path / "office")
    labels = CountingSpooler(tmp_path / "labels")
    printers = Printers({"office": office, "labels": labels}, default="office")
    device = server.add_device()
    to_labels = server.add_job(device, b"^XA^XZ", printer="labels")
    to_default = server.add_job(device, PDF)
    start_agent(device, spooler=printers)
    await eventually(
        lambda: to_labels.status == to_default.status == "PRINTED", message="both printed"
    )
    assert labels.submitted == [to_labels.id]
    assert office.submitted == [to_default.id]
    await eventually(lambda: device.printers, message="printers reported")
    assert [(p["name"], p["is_default"]) for p in device.printers] == [
        ("office", True),
        ("labels", False),
    ]


async def test_an_option_the_printer_cannot_do_fails_the_job_with_its_name(
    server, start_agent, tmp_path
):
    device = server.add_device()
    listener = socket.create_server(("127.0.0.1", 0))
    printers = Printers(
        {"raw": SocketPrinter("127.0.0.1", listener.getsockname()[1])}, default="raw"
    )
    job = server.add_job(device, b"^XA^XZ", options={"copies": 2})
    start_agent(device, spooler=printers)
    await eventually(lambda: job.status == "FAILED", message="failed")
    event = server.events_of(job)[-1]
    assert "cannot apply copies" in event["message"]
    assert event["detail"] == {"reason": "spool_rejected"}
    listener.close()


async def test_a_raw_printer_lost_mid_document_makes_the_job_outcome_unknown(server, start_agent):
    device = server.add_device()
    printer = ClosingPrinter()
    job = server.add_job(
        device, b"\0" * (32 * 1024 * 1024), content_type="application/vnd.cups-raw"
    )
    start_agent(
        device, spooler=Printers({"raw": SocketPrinter("127.0.0.1", printer.port)}, default="raw")
    )
    await eventually(lambda: job.status == "OUTCOME_UNKNOWN", timeout=20, message="unknown")
    event = server.events_of(job)[-1]
    assert event["detail"] == {"reason": "interrupted_transfer"}
    assert "broke after" in event["message"]
    printer.close()


async def _agent_process(server, device, state_dir, port):
    env = {**os.environ, "QPRINT_AGENT_TOKEN": device.token}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "qprint.agent",
        "--url",
        server.base_url,
        "--state-dir",
        str(state_dir),
        "--printer",
        f"raw=socket://127.0.0.1:{port}",
        "--socket-write-timeout",
        "120",
        "--backoff-initial",
        "0.05",
        "--backoff-max",
        "0.2",
        env=env,
        stderr=asyncio.subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("journal_lost", "reason"),
    [(False, "interrupted_submission"), (True, "no_journal_record")],
    ids=["journal_kept", "journal_deleted"],
)
async def test_a_raw_job_cut_off_by_killing_the_agent_is_never_sent_again(
    server, tmp_path, journal_lost, reason
):
    """Killed mid-document, the agent reports OUTCOME_UNKNOWN when it comes back, from its
    journal (an interrupted submission) or, with the journal deleted, from the server's list of
    the jobs it holds; either way the printer never sees the job again."""
    device = server.add_device()
    job = server.add_job(
        device, b"\0" * (16 * 1024 * 1024), content_type="application/vnd.cups-raw"
    )
    printer = StallingPrinter()
    state = tmp_path / "state"
    proc = await _agent_process(server, device, state, printer.port)
    try:
        await eventually(printer.first_bytes.is_set, timeout=20, message="the printer got bytes")
        assert job.status == "RECEIVED"
        proc.send_signal(signal.SIGKILL)  # mid-document
        await proc.wait()
        if journal_lost:
            for f in state.iterdir():
                f.unlink()  # the journal is gone with its disk
        proc = await _agent_process(server, device, state, printer.port)
        await eventually(lambda: job.status == "OUTCOME_UNKNOWN", timeout=20, message="unknown")
        assert server.events_of(job)[-1]["detail"] == {"reason": reason}
        await asyncio.sleep(0.5)  # give a wrong resubmission every chance to connect
        assert printer.connections == 1
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        printer.close()
