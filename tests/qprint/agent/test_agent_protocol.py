"""The agent against a scripted server speaking wire v1: frames, claims, events, commands,
close codes. (The real server is exercised by the end-to-end tests.)"""

import asyncio
import hashlib
import os
import signal
import sys
import uuid

from qprint.agent.config import journal_path
from qprint.agent.journal import Journal
from qprint.agent.spoolers import NullSpooler
from tests.waiting import eventually

PDF = b"%PDF-1.4\n% a document\n"
# Command ids, as the server makes them (UUIDs).
C1, C2, C3 = (str(uuid.uuid4()) for _ in range(3))
CLAIM = str(uuid.uuid4())


async def test_agent_prints_a_job_and_reports_received_spooled_printed(
    server, start_agent, spooler
):
    device = server.add_device()
    device.control_revision, device.settings_revision = 3, 5
    job = server.add_job(device, PDF)
    start_agent(device)

    await eventually(lambda: job.status == "PRINTED", message="job printed")
    assert spooler.submitted == [job.id]
    assert (spooler.directory / f"{job.id}.pdf").read_bytes() == PDF
    events = server.events_of(job)
    assert [e["type"] for e in events] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert {e["claim_id"] for e in events} == {job.claim_id}
    assert len({e["event_id"] for e in events}) == 3
    assert {"type": "state", "control_revision": 3, "settings_revision": 5} in server.frames
    await eventually(lambda: device.printers, message="printers reported")
    assert device.printers[0]["name"] == "directory"


async def test_agent_claims_when_woken_and_pings_every_heartbeat(server, start_agent):
    device = server.add_device()
    start_agent(device)
    await eventually(lambda: device.ready, message="ready")
    claims = server.claims
    job = server.add_job(device, PDF)
    await server.send(device, {"type": "wake"})
    await eventually(lambda: job.status == "PRINTED", message="printed after wake")
    assert server.claims > claims
    await eventually(lambda: any(f["type"] == "ping" for f in server.frames), message="ping")


async def test_control_and_settings_are_applied_and_answered_with_state(server, start_agent):
    device = server.add_device()
    start_agent(device)
    await eventually(lambda: device.ready)
    device.control_revision, device.paused = 2, True
    await server.send(device, {"type": "control", "revision": 2, "paused": True})
    await eventually(lambda: device.applied == (2, 1), message="control applied")
    job = server.add_job(device, PDF)
    claims = server.claims
    await server.send(device, {"type": "wake"})
    device.settings_revision, device.settings = 2, {"copies": 1}
    await server.send(device, {"type": "settings", "revision": 2, "values": {"copies": 1}})
    await eventually(lambda: device.applied == (2, 2), message="settings applied")
    assert job.status == "QUEUED" and server.claims == claims  # paused: no claim at all
    device.control_revision, device.paused = 3, False
    await server.send(device, {"type": "control", "revision": 3, "paused": False})
    await eventually(lambda: job.status == "PRINTED", message="printed after resume")


async def test_checksum_mismatch_fails_the_job_without_printing(server, start_agent, spooler):
    device = server.add_device()
    job = server.add_job(device, PDF, sha256_override=hashlib.sha256(b"other").hexdigest())
    start_agent(device)
    await eventually(lambda: job.status == "FAILED", message="failed")
    assert spooler.submitted == []
    assert server.events_of(job)[-1]["detail"] == {"reason": "checksum_mismatch"}


async def test_replayed_assignment_of_a_final_job_is_never_spooled_again(
    server, start_agent, spooler, tmp_path
):
    device = server.add_device()
    job = server.add_job(device, PDF)
    job.status, job.claim_id = "CLAIMED", CLAIM
    journal = Journal(journal_path(tmp_path / "state", "dev"))
    journal.remember_claim(job.id, CLAIM)
    journal.advance(job.id, "PRINTED")  # printed; the report was lost with the old journal row
    journal.close()

    start_agent(device)
    await eventually(lambda: job.status == "PRINTED", message="final reported again")
    assert spooler.submitted == []
    assert [e["type"] for e in server.events_of(job)] == ["PRINTED"]


async def test_interrupted_submission_is_reported_outcome_unknown_not_reprinted(
    server, start_agent, spooler, tmp_path
):
    device = server.add_device()
    job = server.add_job(device, PDF)
    job.status, job.claim_id = "RECEIVED", CLAIM
    journal = Journal(journal_path(tmp_path / "state", "dev"))
    journal.remember_claim(job.id, CLAIM)
    journal.advance(job.id, "RECEIVED")
    journal.advance(job.id, "SUBMITTING")  # then the agent died
    journal.close()

    start_agent(device)
    await eventually(lambda: job.status == "OUTCOME_UNKNOWN", message="outcome unknown")
    assert spooler.submitted == []


async def test_a_job_received_late_is_finished_even_when_its_download_fails_at_first(
    server, start_agent, spooler, tmp_path
):
    """RECEIVED was acknowledged after the agent put the job aside (the connection dropped while
    it waited for the answer): no claim hands the job out again, so the agent resumes it from its
    journal, and a download that fails then is tried again until the job is printed."""
    device = server.add_device()
    job = server.add_job(device, PDF)
    job.status, job.claim_id = "RECEIVED", CLAIM
    body = {
        "job_id": job.id,
        "claim_id": CLAIM,
        "printer": None,
        "title": "doc",
        "content_type": "application/pdf",
        "size": len(PDF),
        "sha256": hashlib.sha256(PDF).hexdigest(),
        "options": {},
        "priority": 0,
        "created_at": "2026-12-01T00:00:00+00:00",
        "document_url": f"api/v1/device/jobs/{job.id}/document",
    }
    journal = Journal(journal_path(tmp_path / "state", "dev"))
    journal.remember_claim(job.id, CLAIM, assignment=body)
    journal.advance(job.id, "RECEIVED", event="RECEIVED")
    journal.acknowledge(journal.pending()[0].seq, "ok")  # the late acknowledgement
    journal.close()
    server.fail_downloads = 2

    start_agent(device)
    await eventually(lambda: job.status == "PRINTED", message="printed after the retries")
    assert spooler.submitted == [job.id] and server.fail_downloads == 0


async def test_events_are_retried_with_the_same_ids_until_acknowledged(
    server, start_agent, spooler
):
    device = server.add_device()
    job = server.add_job(device, PDF)
    server.fail_event_posts = 3
    start_agent(device)
    await eventually(lambda: job.status == "PRINTED", timeout=20, message="printed")
    assert spooler.submitted == [job.id]
    ids = [e["event_id"] for e in server.events_of(job)]
    assert len(ids) == len(set(ids)) == 3


async def test_a_jobs_spooled_and_printed_go_in_one_request(server, start_agent, spooler):
    device = server.add_device()
    job = server.add_job(device, PDF)
    start_agent(device)
    await eventually(lambda: job.status == "PRINTED", message="printed")
    # RECEIVED, answered before the job is printed; then SPOOLED and PRINTED, journaled together.
    assert server.event_posts == [1, 2]
    assert [e["type"] for e in server.events_of(job)] == ["RECEIVED", "SPOOLED", "PRINTED"]


async def test_a_server_that_takes_one_event_per_request_gets_them_one_by_one(
    server, start_agent, spooler
):
    device = server.add_device()
    server.takes_event_lists = False
    first = server.add_job(device, PDF)
    start_agent(device)
    await eventually(lambda: first.status == "PRINTED", message="first printed")
    second = server.add_job(device, PDF)
    await server.send(device, {"type": "wake"})
    await eventually(lambda: second.status == "PRINTED", message="second printed")
    # The one list refused whole (nothing recorded), its events sent again one by one; no list
    # after it.
    assert server.event_posts == [1, 2, 1, 1, 1, 1, 1]
    for job in (first, second):
        assert [e["type"] for e in server.events_of(job)] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert all(status == 201 for _, _, status in server.event_log)


async def test_an_event_of_a_list_left_unrecorded_is_sent_again_alone(server, start_agent, spooler):
    device = server.add_device()
    job = server.add_job(device, PDF)
    server.fail_event_types = ["PRINTED"]
    start_agent(device)
    await eventually(lambda: job.status == "PRINTED", timeout=20, message="printed")
    assert server.event_posts == [1, 2, 1]  # SPOOLED recorded from the list, PRINTED again
    assert [e["type"] for e in server.events_of(job)] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert spooler.submitted == [job.id]


async def test_a_list_about_a_job_not_the_devices_is_settled_whole_and_lists_go_on(
    server, start_agent, spooler, tmp_path
):
    device, other = server.add_device(), server.add_device()
    gone = server.add_job(other, PDF)  # reassigned since: no longer this device's
    journal = Journal(journal_path(tmp_path / "state", "dev"))
    journal.remember_claim(gone.id, CLAIM)
    journal.advance(gone.id, "RECEIVED", event="RECEIVED")
    journal.advance(gone.id, "FAILED", event="FAILED", message="paper jam")
    journal.close()
    job = server.add_job(device, PDF)

    start_agent(device)
    await eventually(lambda: job.status == "PRINTED", message="printed")
    # The list about the other job answered 404 whole, each of its events settled; lists go on.
    assert server.event_posts == [2, 1, 2]
    assert server.events_of(gone) == [] and gone.status == "QUEUED"


async def test_reports_left_by_a_previous_run_are_sent_on_start(server, start_agent, tmp_path):
    device = server.add_device()
    job = server.add_job(device, PDF)
    job.status, job.claim_id = "CLAIMED", CLAIM
    journal = Journal(journal_path(tmp_path / "state", "dev"))
    journal.remember_claim(job.id, CLAIM)
    journal.advance(job.id, "FAILED", event="FAILED", message="paper jam")
    event_id = journal.pending()[0].key
    journal.close()

    start_agent(device)
    await eventually(lambda: job.status == "FAILED", message="failed reported")
    assert [e["event_id"] for e in server.events_of(job)] == [event_id]


async def test_refused_token_stops_the_agent_and_says_so(server, start_agent, caplog):
    device = server.add_device()
    server.refuse_upgrade = 403
    run = start_agent(device)
    assert await asyncio.wait_for(run.task, 10) == "credentials_refused"
    assert "credentials_refused" in caplog.text


async def test_server_errors_at_upgrade_are_retried_until_the_server_answers(server, start_agent):
    device = server.add_device()
    server.refuse_upgrade = 503
    start_agent(device)
    # Served 503 twice (the agent tried again after the first): it neither stopped nor connected.
    await eventually(lambda: server.refused_upgrades >= 2, message="two upgrades answered 503")
    assert (server.claims, device.connections) == (0, 0)
    server.refuse_upgrade = None
    await eventually(lambda: device.ready, message="connected after 503s")


async def test_close_4001_stops_the_device(server, start_agent):
    device = server.add_device()
    run = start_agent(device)
    await eventually(lambda: device.ready)
    await server.close(device, 4001, "disabled")
    assert await asyncio.wait_for(run.task, 10) == "disabled"


async def test_close_4003_moves_to_the_next_url_at_once(server, start_agent):
    device = server.add_device()
    other = server.base_url.replace("127.0.0.1", "localhost")
    run = start_agent(device, urls=[server.base_url, other])
    await eventually(lambda: device.ready)
    await server.close(device, 4003, "draining")
    await eventually(lambda: device.connections == 2 and device.ready, message="reconnected")
    assert run.agent.endpoints.base == other


async def test_lost_socket_and_server_restart_codes_reconnect(server, start_agent):
    device = server.add_device()
    start_agent(device)
    for code, expected in ((1012, 2), (4408, 3), (1001, 4)):
        await eventually(lambda: device.ready)
        await server.close(device, code)
        await eventually(lambda n=expected: device.connections == n and device.ready)


async def test_commands_run_once_and_report_their_results(server, start_agent):
    device = server.add_device()
    start_agent(device)
    await eventually(lambda: device.ready)
    frame = {
        "type": "command",
        "command_id": C1,
        "command_type": "REPORT_PRINTERS",
        "payload": {},
    }
    await server.send(device, frame)
    await server.send(device, frame)
    await server.send(
        device,
        {
            "type": "command",
            "command_id": C2,
            "command_type": "CANCEL_JOB",
            "payload": {"job_id": "unknown"},
        },
    )
    await server.send(
        device,
        {"type": "command", "command_id": C3, "command_type": "PRINT_TEST_PAGE", "payload": {}},
    )
    await eventually(lambda: len(server.command_results) == 3, message="3 results")
    assert server.command_results[C1]["status"] == "DONE"
    assert server.command_results[C1]["result"]["printers"][0]["name"] == "directory"
    assert server.command_results[C2] == {
        "status": "DONE",
        "result": {"cancelled": False, "reason": "unknown_job"},
    }
    assert server.command_results[C3]["status"] == "DONE"


async def test_cancel_job_command_stops_a_job_not_yet_submitted(server, start_agent, tmp_path):
    device = server.add_device()
    job = server.add_job(device, PDF)
    job.status, job.claim_id = "RECEIVED", CLAIM
    journal = Journal(journal_path(tmp_path / "state", "dev"))
    journal.remember_claim(job.id, CLAIM)
    journal.advance(job.id, "RECEIVED")
    journal.close()
    start_agent(device, spooler=NullSpooler())
    await eventually(lambda: device.ready)
    await server.send(
        device,
        {
            "type": "command",
            "command_id": C1,
            "command_type": "CANCEL_JOB",
            "payload": {"job_id": job.id},
        },
    )
    await eventually(lambda: job.status == "CANCELLED", message="cancelled")
    await eventually(lambda: C1 in server.command_results)
    assert server.command_results[C1]["result"] == {"cancelled": True}


async def test_sigterm_stops_the_agent_process_cleanly(server, tmp_path):
    device = server.add_device()
    env = {**os.environ, "QPRINT_AGENT_TOKEN": device.token}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "qprint.agent",
        "--url",
        server.base_url,
        "--state-dir",
        str(tmp_path),
        "--spooler",
        "null",
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await eventually(lambda: device.ready, timeout=20, message="subprocess connected")
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 15)
        log = (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    assert "connected device=device node=fake" in log
    assert "agent_stopped status=0" in log


def test_hello_active_jobs_are_parsed_and_a_malformed_entry_is_left_out():
    from qprint.agent import protocol as p

    base = {
        "type": "hello",
        "heartbeat_seconds": 20,
        "control": {"revision": 1},
        "settings": {"revision": 1},
    }
    assert p.parse_hello(base).active_jobs is None
    hello = p.parse_hello(
        {
            **base,
            "active_jobs": [
                {"job_id": C1, "claim_id": C2, "status": "RECEIVED"},
                {"job_id": C3, "claim_id": None, "status": "SPOOLED"},
                {"job_id": "../../etc/x", "claim_id": C2, "status": "SPOOLED"},
                "junk",
            ],
        }
    )
    assert hello.active_jobs == ((C1, C2, "RECEIVED"),)
