"""The agent's operations over the socket: used when hello offers them, HTTP otherwise; answers
read as the HTTP responses they stand for; a closed socket fails the request like a network
error (the caller retries); a job its submission finished reports SPOOLED and PRINTED together."""

import asyncio
import base64
import hashlib
import json
import sqlite3
import uuid

import httpx
import pytest

from qprint.agent import journal as j
from qprint.agent import protocol as p
from qprint.agent.journal_thread import AsyncJournal
from qprint.agent.operations import DeviceApi, OperationUnavailable, SocketOperations
from qprint.agent.spooler_thread import AsyncSpooler
from qprint.agent.spoolers import NullSpooler, Outcome
from qprint.agent.worker import DONE, RETRY_LATER, Assignment, JobRunner, Reporter
from tests.waiting import eventually

ENDPOINTS = p.Endpoints.from_url("http://node.test/qprint/")


class Socket:
    """Answers each request frame with what ``answer(frame)`` returns, through ``ops``."""

    def __init__(self, answer):
        self.answer = answer
        self.sent: list[dict] = []
        self.ops: SocketOperations | None = None

    async def send(self, text: str) -> None:
        frame = json.loads(text)
        self.sent.append(frame)
        reply = self.answer(frame)
        if reply is not None:
            asyncio.get_running_loop().call_soon(self.ops.deliver, reply)


def http_client(seen: list, requests: list | None = None):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        if requests is not None:
            requests.append(request)
        return httpx.Response(204)

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def recorded(frame):
    return {"type": "event_recorded", "request_id": frame["request_id"], "status": 201,
            "event": {"event_id": frame["event_id"]}}  # fmt: skip


def inline_assignment(data: bytes, digest_of: bytes | None = None) -> Assignment:
    """A pushed assignment with ``data`` inline, whose ``sha256`` is that of ``digest_of``
    (``data`` itself unless given)."""
    digest = hashlib.sha256(data if digest_of is None else digest_of).hexdigest()
    body = {"job_id": str(uuid.uuid4()), "claim_id": str(uuid.uuid4()), "size": len(data),
            "sha256": digest, "content_type": "application/pdf",
            "document_base64": base64.b64encode(data).decode()}  # fmt: skip
    return Assignment.from_body(body)


def reporting_socket(answer) -> tuple[SocketOperations, Socket]:
    """Claims and events offered on a socket whose every frame ``answer`` answers."""
    ops = SocketOperations()
    sock = Socket(answer)
    sock.ops = ops
    ops.attach(sock, frozenset({"claim", "event"}))
    return ops, sock


def socket_runner(journal: AsyncJournal, spooler, answer) -> JobRunner:
    """A runner whose reports go out as frames that ``answer`` answers."""
    ops, _ = reporting_socket(answer)
    http = http_client([])
    reporter = Reporter("dev", journal, http, DeviceApi(http, ops))
    return JobRunner("dev", journal, http, reporter, AsyncSpooler(spooler, "dev"), 5)


async def test_claim_goes_over_the_socket_when_offered_and_over_http_otherwise():
    seen: list = []
    requests: list = []
    ops = SocketOperations()
    sock = Socket(lambda f: {"type": "assignment", "request_id": f["request_id"], "job_id": "j"})
    sock.ops = ops
    api = DeviceApi(http_client(seen, requests), ops)

    ops.attach(sock, frozenset({"claim", "event"}))
    reply = await api.claim(ENDPOINTS)
    assert (reply.status_code, reply.json()) == (200, {"job_id": "j"})
    # Asking for a small enough document inline, as the HTTP claim does with its header.
    assert sock.sent == [
        {"type": "claim", "request_id": sock.sent[0]["request_id"], "inline_max_bytes": 262144}
    ]
    assert seen == []

    ops.attach(sock, frozenset())  # a server that does not offer them
    assert (await api.claim(ENDPOINTS)).status_code == 204
    assert seen == [("POST", "/qprint/api/v1/device/claim")]
    assert requests[0].headers["Qprint-Inline-Max-Bytes"] == "262144"


async def test_event_and_command_result_frames_and_their_answers():
    ops = SocketOperations()

    def answer(frame):
        if frame["type"] == "event":
            return {"type": "event_recorded", "request_id": frame["request_id"], "status": 201,
                    "event": {"event_id": frame["event_id"]}}  # fmt: skip
        return {"type": "refused", "request_id": frame["request_id"], "status": 422,
                "error": "invalid", "message": "status: must be DONE or FAILED"}  # fmt: skip

    sock = Socket(answer)
    sock.ops = ops
    ops.attach(sock, frozenset({"claim", "event", "command_result"}))
    api = DeviceApi(http_client([]), ops)
    body = {"event_id": "e1", "type": "RECEIVED", "claim_id": "c", "occurred_at": "t"}
    reply = await api.report(ENDPOINTS, p.Endpoints.events_path("job-1"), body)
    assert (reply.status_code, reply.json()) == (201, {"event_id": "e1"})
    assert sock.sent[-1] == {
        "type": "event", "request_id": sock.sent[-1]["request_id"], "job_id": "job-1",
        "event_type": "RECEIVED", "event_id": "e1", "claim_id": "c", "occurred_at": "t",
    }  # fmt: skip
    reply = await api.report(ENDPOINTS, p.Endpoints.command_result_path("cmd-1"), {"status": "X"})
    assert reply.status_code == 422 and reply.json()["error"] == "invalid"
    assert sock.sent[-1]["command_id"] == "cmd-1" and sock.sent[-1]["type"] == "command_result"


async def test_a_closed_socket_fails_the_request_in_flight_like_a_network_error():
    ops = SocketOperations()
    sock = Socket(lambda frame: None)  # never answers
    sock.ops = ops
    ops.attach(sock, frozenset({"claim"}))
    api = DeviceApi(http_client([]), ops)
    pending = asyncio.ensure_future(api.claim(ENDPOINTS))
    for _ in range(100):  # until the request is on the wire
        if sock.sent:
            break
        await asyncio.sleep(0)
    assert sock.sent and not pending.done()
    ops.detach()
    with pytest.raises(OperationUnavailable):
        await pending
    assert issubclass(OperationUnavailable, httpx.TransportError)  # retried like one


class SlowSpooler(NullSpooler):
    """Holds the job until :meth:`follow` says how it ended (as CUPS does)."""

    def follow(self, ref, timeout):
        return Outcome("PRINTED")


@pytest.mark.parametrize(
    ("spooler", "together"),
    [(NullSpooler(), True), (SlowSpooler(), False)],
    ids=["settled", "held"],
)
async def test_spooled_and_printed_go_out_together_when_submitting_finished_the_job(
    tmp_path, spooler, together
):
    log: list[tuple[str, str]] = []

    def answer(frame):
        log.append(("sent", frame["event_type"]))
        asyncio.get_running_loop().call_soon(log.append, ("answered", frame["event_type"]))
        return recorded(frame)

    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    runner = socket_runner(journal, spooler, answer)
    try:
        assert await runner.handle(ENDPOINTS, inline_assignment(b"%PDF-1.4 together")) == DONE
    finally:
        await journal.close()
    sent = [kind for what, kind in log if what == "sent"]
    assert sent == ["RECEIVED", "SPOOLED", "PRINTED"]
    # Together: PRINTED is on the wire before SPOOLED's answer, as one flush sends both (the
    # server records them in one transaction). Held: SPOOLED went out before the job was followed.
    printed_sent = log.index(("sent", "PRINTED"))
    assert (printed_sent < log.index(("answered", "SPOOLED"))) is together


class CountingSpooler(NullSpooler):
    def __init__(self):
        self.submitted: list[str] = []

    def submit(self, job):
        self.submitted.append(job.job_id)
        return super().submit(job)


async def handle_pushed(
    tmp_path, answer, document: bytes, digest_of: bytes | None = None
) -> tuple[str, list[str], str, bool]:
    """One pushed job with ``document`` inline (:func:`inline_assignment`), taken by a runner
    whose reports ``answer`` answers: its id, the jobs the spooler was handed, its state in the
    journal, whether the journal's outbox is empty."""
    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    spooler = CountingSpooler()
    assignment = inline_assignment(document, digest_of)
    try:
        runner = socket_runner(journal, spooler, answer)
        assert await runner.handle(ENDPOINTS, assignment) == DONE
        state = (await journal.job(assignment.job_id)).state
        outbox_empty = not await journal.has_pending()
    finally:
        await journal.close()
    return assignment.job_id, spooler.submitted, state, outbox_empty


def counted_journal_calls(monkeypatch) -> list[str]:
    """The journal calls awaited from now on (each a hand-off to the journal's thread)."""
    calls: list[str] = []
    run = AsyncJournal._run

    async def counted(self, fn, *args, **kwargs):
        calls.append(fn.__name__)
        return await run(self, fn, *args, **kwargs)

    monkeypatch.setattr(AsyncJournal, "_run", counted)
    return calls


async def test_a_pushed_job_awaits_its_journal_thread_three_times(tmp_path, monkeypatch):
    """Each awaited journal call is a hand-off to the device's journal thread and back, a few per
    job (docs/PERFORMANCE.md): a pushed job whose document came inline and whose printer finished
    it as it took it awaits the record with RECEIVED (and the outbox's read for the flush that
    sends it, in the same call), SUBMITTING, and SPOOLED with PRINTED (and the outbox's read);
    the server's three acknowledgements are queued on the thread in their place, not awaited; no
    read of an outbox that nothing was queued to since the last."""
    calls = counted_journal_calls(monkeypatch)
    acknowledge = AsyncJournal.acknowledge

    def queued(self, seq, outcome):
        calls.append("acknowledge, queued")
        acknowledge(self, seq, outcome)

    monkeypatch.setattr(AsyncJournal, "acknowledge", queued)
    job_id, submitted, state, outbox_empty = await handle_pushed(
        tmp_path, recorded, b"%PDF-1.4 pushed"
    )
    assert submitted == [job_id] and state == "PRINTED" and outbox_empty
    assert calls[: calls.index("job")] == [
        "remember_claim, then pending", "acknowledge, queued",
        "submitting", "spooled, then pending", "acknowledge, queued", "acknowledge, queued",
    ]  # fmt: skip


async def test_a_wakeup_with_nothing_to_send_or_to_resume_reads_no_journal(tmp_path, monkeypatch):
    """A device's work loop flushes the outbox and looks for jobs put aside at every wakeup, a
    pushed assignment's included, before it handles the job. The first time it reads both from
    the journal (what the last run left); once every report was answered and every job handled
    to the end, and nothing was queued since, neither reads; a report queued since is read and
    sent."""
    calls = counted_journal_calls(monkeypatch)
    sent: list[str] = []

    def answer(frame):
        sent.append(frame["event_type"])
        return recorded(frame)

    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    runner = socket_runner(journal, NullSpooler(), answer)
    try:
        assert await runner.reporter.flush(ENDPOINTS)
        assert await runner.resume_received(ENDPOINTS)
        assert calls == ["pending", "jobs_in"]
        assert await runner.handle(ENDPOINTS, inline_assignment(b"%PDF-1.4 first")) == DONE
        calls.clear()
        assert await runner.reporter.flush(ENDPOINTS)
        assert await runner.resume_received(ENDPOINTS)
        assert calls == []
        job_id = str(uuid.uuid4())
        await journal.remember_claim(job_id, str(uuid.uuid4()))
        await journal.advance(job_id, "RECEIVED", event="RECEIVED")
        calls.clear()
        assert await runner.reporter.flush(ENDPOINTS)
        assert calls[0] == "pending" and sent[-1] == "RECEIVED"
        assert not await journal.has_pending()
    finally:
        await journal.close()


async def test_a_job_put_aside_is_resumed_once_its_received_is_answered(tmp_path):
    """A job whose RECEIVED the server could not answer yet (503) waits in the journal as
    RECEIVED; once a later flush has it answered, the next look for jobs put aside downloads
    its document again (the journal keeps no inline document) and prints it."""
    unavailable = [True]
    spooler = CountingSpooler()
    document = b"%PDF-1.4 put aside"

    def answer(frame):
        if unavailable[0]:
            return {"type": "refused", "request_id": frame["request_id"], "status": 503,
                    "error": "unavailable", "message": "try again"}  # fmt: skip
        return recorded(frame)

    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    ops, _ = reporting_socket(answer)
    http = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=document))
    )
    reporter = Reporter("dev", journal, http, DeviceApi(http, ops))
    runner = JobRunner("dev", journal, http, reporter, AsyncSpooler(spooler, "dev"), 5)
    assignment = inline_assignment(document)
    try:
        assert await runner.resume_received(ENDPOINTS)  # nothing left by a last run
        assert await runner.handle(ENDPOINTS, assignment) == RETRY_LATER
        assert (await journal.job(assignment.job_id)).state == "RECEIVED"
        assert spooler.submitted == []
        unavailable[0] = False
        assert await runner.reporter.flush(ENDPOINTS)
        assert await runner.resume_received(ENDPOINTS)
        assert spooler.submitted == [assignment.job_id]
        assert (await journal.job(assignment.job_id)).state == "PRINTED"
    finally:
        await journal.close()
        await http.aclose()


async def test_a_report_whose_acknowledgement_failed_is_sent_again(tmp_path, monkeypatch):
    """An answered report whose acknowledgement the journal could not write is still in the
    outbox: it is sent again (the server answers the replay), by the flush that was waiting for
    its answer when the failure came first, else by the next one."""
    sent: list[str] = []

    def answer(frame):
        sent.append(frame["event_type"])
        return recorded(frame)

    failing = [True]
    transaction = j.Journal._tx

    def failing_once(self, durable=True):
        """The next write without an fsync fails: the acknowledgement's."""
        if not durable and failing:
            failing.clear()
            raise sqlite3.OperationalError("disk I/O error")
        return transaction(self, durable)

    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    ops, _ = reporting_socket(answer)
    http = http_client([])
    reporter = Reporter("dev", journal, http, DeviceApi(http, ops))
    job_id = str(uuid.uuid4())
    try:
        await journal.remember_claim(job_id, str(uuid.uuid4()))
        await journal.advance(job_id, "RECEIVED", event="RECEIVED")
        monkeypatch.setattr(j.Journal, "_tx", failing_once)
        assert await reporter.flush(ENDPOINTS)
        await journal.pending()  # the thread has run the acknowledgement (its calls keep order)
        assert await reporter.flush(ENDPOINTS)
        assert sent == ["RECEIVED", "RECEIVED"] and not failing
        assert not await journal.has_pending()
    finally:
        await journal.close()


@pytest.mark.parametrize("error", ["stale_claim", "job_cancelled"])
async def test_a_job_whose_received_the_server_refuses_is_cancelled_here_and_never_printed(
    tmp_path, error
):
    """A refused RECEIVED says the job is not this device's to print (another claim holds it,
    or it was cancelled): the journal ends it CANCELLED, with no report of its own, and the
    spooler never sees it."""
    sent: list[str] = []

    def answer(frame):
        sent.append(frame["event_type"])
        return {"type": "refused", "request_id": frame["request_id"], "status": 409,
                "error": error, "message": "not yours"}  # fmt: skip

    _, submitted, state, outbox_empty = await handle_pushed(tmp_path, answer, b"%PDF-1.4 not ours")
    assert sent == ["RECEIVED"] and submitted == []
    assert state == "CANCELLED" and outbox_empty


@pytest.mark.parametrize("matches", [True, False], ids=["matching", "other-document"])
async def test_an_inline_document_is_received_with_its_record_or_failed_without_printing(
    tmp_path, matches
):
    """A pushed document that matches its assignment is received (journaled with the record,
    test_journal.py) and printed; one that does not is FAILED (checksum_mismatch), never RECEIVED
    nor printed, as after a download."""
    sent: list[tuple[str, dict]] = []

    def answer(frame):
        sent.append((frame["event_type"], frame.get("detail") or {}))
        return recorded(frame)

    data = b"%PDF-1.4 inline"
    job_id, submitted, state, _ = await handle_pushed(
        tmp_path, answer, data, None if matches else b"another document"
    )
    if matches:
        assert [kind for kind, _ in sent] == ["RECEIVED", "SPOOLED", "PRINTED"]
        assert submitted == [job_id] and state == "PRINTED"
    else:
        assert sent == [("FAILED", {"reason": "checksum_mismatch"})]
        assert submitted == [] and state == "FAILED"


@pytest.mark.parametrize("written", ["by-the-journal", "by-the-reporter"])
async def test_a_report_queued_while_a_flush_awaits_its_answers_goes_out_in_that_flush(
    tmp_path, written
):
    """The flush reads the outbox again only when a report was queued since its last read, and
    then does: a report queued while the answers were on their way is sent before it returns,
    and the report answered meanwhile is not sent twice. Queued by a write of the reporter, the
    report comes with a read of the outbox made in the same call, while the other report still
    waited for its answer: the flush uses such a read only while nothing was queued or
    acknowledged since, so here it reads the outbox again."""
    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    held: list[dict] = []

    def answer(frame):
        if not held:  # the first report's answer waits for the test
            held.append(frame)
            return None
        return recorded(frame)

    ops, sock = reporting_socket(answer)
    http = http_client([])
    reporter = Reporter("dev", journal, http, DeviceApi(http, ops))
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        for job_id in (first, second):
            await journal.remember_claim(job_id, str(uuid.uuid4()))
        await journal.advance(first, "RECEIVED", event="RECEIVED")
        flush = asyncio.ensure_future(reporter.flush(ENDPOINTS))
        await eventually(lambda: held, message="the first report on the wire")
        if written == "by-the-journal":
            await journal.advance(second, "RECEIVED", event="RECEIVED")
        else:
            await reporter.write(j.Journal.advance, second, "RECEIVED", event="RECEIVED")
        ops.deliver(recorded(held[0]))
        assert await asyncio.wait_for(flush, 10)
        assert [frame["job_id"] for frame in sock.sent] == [first, second]
        assert not await journal.has_pending()
    finally:
        await journal.close()
