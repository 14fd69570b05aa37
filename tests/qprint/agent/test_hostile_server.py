"""What a malicious or impersonated server can make the agent do: nothing beyond its own jobs.
Its token goes only to the origins the agent was configured with, whatever URL a claim names;
ids from the server (jobs, claims, commands) are UUIDs or nothing, so they never become a path;
a content type's parameters never reach ``lp`` as options, and a job cannot pick a CUPS queue
nobody configured."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from qprint.agent import protocol as p
from qprint.agent.operations import BearerToOwnOrigins
from qprint.agent.spoolers import CupsSpooler, DirectorySpooler, SpoolJob, SpoolRejected
from qprint.agent.worker import Assignment
from tests.waiting import eventually

PDF = b"%PDF-1.4\n% a document\n"


# -- the token goes to the agent's own origins only ------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://print.example.com/qprint/api/v1/device/jobs/1/document",  # TLS dropped
        "https://print.example.com:8443/qprint/api/v1/device/jobs/1/document",  # another port
        "https://evil.example/qprint/api/v1/device/jobs/1/document",  # another host
        "//evil.example/qprint/api/v1/device/jobs/1/document",  # scheme-relative
        "ftp://print.example.com/x",
    ],
)
def test_a_document_url_on_another_origin_is_refused(url):
    base = p.Endpoints.from_url("wss://print.example.com/qprint/")
    with pytest.raises(ValueError, match="leaves"):
        base.resolve(url)


def test_a_document_url_on_the_agents_own_origin_is_resolved_against_its_base():
    base = p.Endpoints.from_url("wss://print.example.com/qprint/")
    own = "https://print.example.com/qprint/api/v1/device/jobs/1/document"
    assert base.resolve("api/v1/device/jobs/1/document") == own
    assert base.resolve("/qprint/api/v1/device/jobs/1/document") == own
    assert base.resolve("https://PRINT.example.com:443/qprint/api/v1/device/jobs/1/document")


async def test_the_http_client_sends_the_token_to_its_own_origins_only():
    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("Authorization")))
        return httpx.Response(204)

    origins = [p.Endpoints.from_url(u).origin for u in ("wss://a.example/q/", "https://b:8443/")]
    auth = BearerToOwnOrigins("s3cret", origins)
    async with httpx.AsyncClient(auth=auth, transport=httpx.MockTransport(answer)) as http:
        for url in ("https://a.example/q/x", "https://b:8443/y", "http://a.example/q/x"):
            await http.get(url)
        await http.get("https://c.example/z")
    assert seen == [
        ("https://a.example/q/x", "Bearer s3cret"),
        ("https://b:8443/y", "Bearer s3cret"),
        ("http://a.example/q/x", None),
        ("https://c.example/z", None),
    ]


async def test_a_claim_naming_another_origin_is_downloaded_from_the_agents_own_server(
    server, start_agent, spooler
):
    """The claim's document URL points at a listener of the server's choosing: it never sees a
    request (nor the token); the agent downloads from its own base and prints."""
    requests: list[bytes] = []

    async def listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.read(65536))
        writer.close()

    elsewhere = await asyncio.start_server(listener, "127.0.0.1", 0)
    port = elsewhere.sockets[0].getsockname()[1]
    try:
        device = server.add_device()
        job = server.add_job(device, PDF)
        job.document_url = f"http://127.0.0.1:{port}/qprint/api/v1/device/jobs/{job.id}/document"
        start_agent(device)
        await eventually(lambda: job.status == "PRINTED", message="job printed")
        assert spooler.submitted == [job.id]
        assert requests == []
    finally:
        elsewhere.close()
        await elsewhere.wait_closed()


# -- ids from the server never become paths ---------------------------------------------------


def assignment(**fields) -> dict:
    return {
        "job_id": str(uuid.uuid4()),
        "claim_id": str(uuid.uuid4()),
        "size": 1,
        "sha256": "0" * 64,
        "content_type": "application/pdf",
        **fields,
    }


@pytest.mark.parametrize("field", ["job_id", "claim_id"])
@pytest.mark.parametrize("value", ["/../../tmp/x", "../x", "a/b", "", 7, None])
def test_an_assignment_whose_ids_are_not_uuids_is_refused(field, value):
    with pytest.raises(p.ProtocolError, match=field):
        Assignment.from_body(assignment(**{field: value}))


@pytest.mark.parametrize("command_id", ["../../jobs/x/events", "c1", ""])
def test_a_command_whose_id_is_not_a_uuid_is_refused(command_id):
    frame = {"type": "command", "command_id": command_id, "command_type": "REPORT_PRINTERS"}
    with pytest.raises(p.ProtocolError, match="command_id"):
        p.parse_command(frame)


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"results": "ok"},
        {"results": [{"status": 201}]},  # fewer answers than events sent
        {"results": [{"status": 201}, {"status": True}]},
        {"results": [{"status": 201}, {"status": "201"}]},
        {"results": [{"status": 201}, "201"]},
    ],
)
def test_an_answer_to_a_list_of_events_that_is_not_one_per_event_is_not_read(body):
    """The agent then settles nothing from it, and sends the events one by one."""
    assert p.event_list_answers(body, 2) is None


def test_each_answer_to_a_list_of_events_is_read_in_order():
    body = {"results": [{"status": 201, "event": {}}, {"status": 409, "error": "backwards"}]}
    assert p.event_list_answers(body, 2) == [(201, ""), (409, "backwards")]


def test_the_directory_spooler_writes_nothing_outside_its_directory(tmp_path):
    spool = tmp_path / "spool"
    spooler = DirectorySpooler(spool)
    for job_id in ("../escaped", "/../../" + str(tmp_path / "abs"), "a/b", ".hidden"):
        with pytest.raises(SpoolRejected):
            spooler.submit(SpoolJob(job_id, "t", "application/pdf", PDF))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["spool"]


# -- job options never ride on the content type; no CUPS queue nobody configured -------------


class RecordingCups(CupsSpooler):
    """The cups spooler with ``lp``/``lpstat`` answered here, recording every command."""

    def __init__(self, queue: str | None = None):
        super().__init__(queue=queue)
        self.commands: list[tuple[str, ...]] = []

    def _run(self, *args: str, data: bytes | None = None, timeout: float = 30) -> str:
        self.commands.append(args)
        if args[0] == "lp":
            return "request id is Office-7 (1 file(s))\n"
        if args[:2] == ("lpstat", "-d"):
            return "system default destination: Office\n"
        if args[:2] == ("lpstat", "-p"):
            return (
                "printer Office is idle.  enabled since Jan 1\n"
                "printer Payroll is idle.  enabled since Jan 1\n"
            )
        return ""

    def _ipp(self, queue):
        return None


def test_only_the_base_content_type_reaches_lp():
    cups = RecordingCups(queue="Office")
    job = SpoolJob("job-1", "t", "application/pdf; copies=500 job-hold-until=indefinite", PDF, None)
    assert cups.submit(job) == "Office-7"
    lp = next(c for c in cups.commands if c[0] == "lp")
    formats = [lp[i + 1] for i, arg in enumerate(lp) if arg == "-o"]
    assert formats == ["document-format=application/pdf"]
    assert not any("copies" in arg or "hold" in arg for arg in lp)


@pytest.mark.parametrize("content_type", ["application/pdf,copies=5", "a b/c", "x=y/z"])
def test_a_content_type_that_is_not_a_media_type_is_refused_before_lp(content_type):
    cups = RecordingCups(queue="Office")
    with pytest.raises(SpoolRejected):
        cups.submit(SpoolJob("job-1", "t", content_type, PDF))
    assert not any(c[0] == "lp" for c in cups.commands)


@pytest.mark.parametrize("queue", ["Office", None])
def test_the_legacy_cups_spooler_prints_only_to_its_configured_queue(queue):
    cups = RecordingCups(queue=queue)
    with pytest.raises(SpoolRejected, match="Payroll"):
        cups.submit(SpoolJob("job-1", "t", "application/pdf", PDF, printer="Payroll"))
    assert not any(c[0] == "lp" for c in cups.commands)
    for printer in (None, "Office"):
        cups.submit(SpoolJob("job-2", "t", "application/pdf", PDF, printer=printer))
    lps = [c for c in cups.commands if c[0] == "lp"]
    assert all("Payroll" not in c for c in lps) and len(lps) == 2
    assert [printer["name"] for printer in cups.printers()] == ["Office"]
