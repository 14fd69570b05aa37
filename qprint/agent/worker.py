"""The device's work: claim, download, verify, spool, report (the server's commands are
``commands``'s).

Everything that changes the world (the spooler, a cancellation) is preceded by a journal write,
and every report to the server comes from the journal's outbox (see ``journal``). The worker
outlives the socket: a job in progress is finished and reported over HTTP even while the device
reconnects.
"""

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from qprint.agent import journal as j
from qprint.agent import protocol as p
from qprint.agent.journal_thread import AsyncJournal, OutboxRead
from qprint.agent.operations import DeviceApi
from qprint.agent.protocol import Endpoints, uuid_text
from qprint.agent.spooler_thread import AsyncSpooler
from qprint.agent.spoolers import (
    AlreadySpooled,
    Outcome,
    SpoolInterrupted,
    SpoolJob,
    SpoolRejected,
)
from qprint.core import wire

logger = logging.getLogger("qprint.agent")

T = TypeVar("T")

# Claim answers that mean "the gate is not open yet" right after (re)connecting: the server may
# not have processed our ``state`` frame. Retried a few times, then left to the next wakeup.
GATE_RETRY_CODES = frozenset({"not_connected", "not_ready", "stale_control", "stale_settings"})

#: Reports sent at once on the socket before their answers are awaited.
PIPELINE_DEPTH = 64


def error_code(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("error", "")) if isinstance(body, dict) else ""


class Reporter:
    """Sends the journal's outbox, oldest first, until each report is acknowledged.

    A 2xx acknowledges; a 4xx that no retry can change (409 conflict/backwards/cancelled/stale,
    404, 422) is acknowledged as rejected and logged; 401/403/429, 5xx and network errors leave
    the report for the next flush, and stop this one so the order of a job's events holds.
    """

    def __init__(
        self,
        device: str,
        journal: AsyncJournal,
        http: httpx.AsyncClient,
        api: DeviceApi | None = None,
    ):
        self.device = device
        self.journal = journal
        self.http = http
        self.api = api or DeviceApi(http, None)  # over the socket when the server offers it
        #: Whether a job's events waiting together go in one request (until the server, an
        #: older one, does not answer a list).
        self.event_lists = True
        self._lock = asyncio.Lock()
        self._in_flight: dict[int, asyncio.Future] = {}
        self._background: set[asyncio.Future] = set()
        #: The journal's count of queued reports (:attr:`AsyncJournal.reports_queued`) when a
        #: read of the outbox found every report in it answered: while the count is the same and
        #: nothing is in flight, there is nothing to send, and a flush reads nothing.
        self._settled_at: int | None = None
        #: Acknowledgements made so far (each takes a report out of what the outbox holds).
        self._acknowledged = 0
        #: The outbox read with the last :meth:`write`, and :attr:`_acknowledged` before it: the
        #: next flush's read while nothing was queued or acknowledged since.
        self._kept: tuple[int, OutboxRead] | None = None

    async def write(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A journal write that queues reports (``method``, a
        :class:`~qprint.agent.journal.Journal` method, unbound, called with ``args``), with the
        outbox read that the flush after it needs, in the same hand-off to the journal's thread."""
        acknowledged = self._acknowledged
        result, read = await self.journal.written_then_read(method, PIPELINE_DEPTH, *args, **kwargs)
        self._kept = (acknowledged, read)
        return result

    async def _pending(self, limit: int) -> tuple[int, list[j.Report]]:
        """The outbox's first ``limit`` reports, with the count of queued reports as of the read:
        the read made with the last :meth:`write` while nothing was queued or acknowledged since
        (it is what a read now would find), else a read now."""
        kept, self._kept = self._kept, None
        if kept is not None:
            acknowledged, read = kept
            if acknowledged == self._acknowledged and read.queued == self.journal.reports_queued:
                return read.queued, read.reports[:limit]
        queued = self.journal.reports_queued
        return queued, await self.journal.pending(limit)

    async def flush(self, endpoints: Endpoints) -> bool:
        """True when nothing is left to send. Over HTTP the events of one job that wait together
        (a job's SPOOLED and how it ended) go in one request, as a list, while the server takes
        lists. The outbox is not read when nothing was queued since every report was answered
        (a device's work loop flushes at every wakeup, a pushed assignment's included)."""
        if self._settled_at == self.journal.reports_queued and not self._in_flight:
            return True
        if self.pipelined:
            return await self._flush_pipelined(endpoints)
        async with self._lock:
            while True:
                queued, reports = await self._pending(p.EVENTS_PER_REQUEST)
                if not reports:
                    self._settled_at = queued
                    return True
                together = self._together(reports)
                if together > 1:
                    sent = await self._send_list(endpoints, reports[:together])
                else:
                    sent = await self._send(endpoints, reports[0])
                if not sent:
                    return False

    def _together(self, reports: list[j.Report]) -> int:
        """How many reports from the first on are events of one job (one path), sent in one
        request while the server takes lists."""
        first = reports[0].path
        if not self.event_lists or Endpoints.events_job(first) is None:
            return 1
        count = 1
        while count < len(reports) and reports[count].path == first:
            count += 1
        return count

    async def _send_list(self, endpoints: Endpoints, reports: list[j.Report]) -> bool:
        """Send the events of ``reports`` (one job's) in one request, and settle each by its own
        answer, in order. A server that does not answer a list (an older one) answers it whole:
        the reports stay, and from then on go one by one."""
        try:
            response = await self.http.post(
                endpoints.base + reports[0].path, json=[report.body for report in reports]
            )
        except httpx.HTTPError as exc:
            self._deferred(reports[0], f"error={exc.__class__.__name__}")
            return False
        status = response.status_code
        if _retried(status):
            self._deferred(reports[0], f"status={status}")
            return False
        try:
            body = response.json() if status == 200 else None
        except ValueError:
            body = None
        answers = p.event_list_answers(body, len(reports))
        if answers is None and status == 404:  # not the device's job: so for each of its events
            answers = [(status, error_code(response))] * len(reports)
        if answers is None:
            self.event_lists = False
            logger.info("event_lists_not_taken device=%s status=%s", self.device, status)
            return True  # nothing settled: the next round sends them one by one
        for report, (status, code) in zip(reports, answers, strict=True):
            if not await self._settle(report, status, code):
                return False
        return True

    def flush_soon(self, endpoints: Endpoints) -> None:
        """Start sending the outbox without waiting for the answers (on the socket, whose
        answers come in order); a later :meth:`flush` waits for them. Over HTTP nothing starts
        here: the next :meth:`flush` sends in order, one request at a time."""
        if self.pipelined:
            task = asyncio.ensure_future(self._flush_pipelined(endpoints))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    @property
    def pipelined(self) -> bool:
        """Reports travel on the socket (answered in order): sent without waiting for each."""
        return self.api.ordered(Endpoints.events_path("-"))

    async def _flush_pipelined(self, endpoints: Endpoints) -> bool:
        """Send every report of the outbox at once as frames, then take the answers as they come
        (in order). A report already in flight (sent by another flush) is not sent twice: its
        answer is awaited. Journal order is kept: a report is in the outbox (committed) before
        it is sent."""
        while True:
            async with self._lock:
                queued, reports = await self._pending(PIPELINE_DEPTH)
                waiting = []
                for report in reports:
                    task = self._in_flight.get(report.seq)
                    if task is None:
                        task = asyncio.ensure_future(self._deliver(endpoints, report))
                        self._in_flight[report.seq] = task
                    waiting.append(task)
            if not waiting:
                self._settled_at = queued
                return True
            if not all(await asyncio.gather(*waiting)):
                return False
            if len(reports) < PIPELINE_DEPTH and self.journal.reports_queued == queued:
                self._settled_at = queued
                return True  # all were read and answered, and none was queued since the read

    async def _deliver(self, endpoints: Endpoints, report: j.Report) -> bool:
        try:
            return await self._send(endpoints, report, socket_only=True)
        finally:
            self._in_flight.pop(report.seq, None)

    async def _send(
        self, endpoints: Endpoints, report: j.Report, *, socket_only: bool = False
    ) -> bool:
        """Send ``report`` and settle it by the answer: False when it is not acknowledged (stop
        this flush). ``socket_only``: as :meth:`DeviceApi.report` says."""
        try:
            response = await self.api.report(
                endpoints, report.path, report.body, socket_only=socket_only
            )
        except httpx.HTTPError as exc:
            self._deferred(report, f"error={exc.__class__.__name__}")
            return False
        status = response.status_code
        code = error_code(response) if status >= 400 else ""
        return await self._settle(report, status, code)

    def _acknowledge(self, report: j.Report, outcome: str) -> None:
        self._acknowledged += 1
        self.journal.acknowledge(report.seq, outcome)

    def _deferred(self, report: j.Report, why: str) -> None:
        logger.info("report_deferred device=%s key=%s %s", self.device, report.key, why)

    async def _settle(self, report: j.Report, status: int, code: str) -> bool:
        """Acknowledge ``report`` by the server's answer (``status``, the error ``code``), or
        leave it for the next flush (False): as the class says."""
        if status in (200, 201):
            self._acknowledge(report, "ok")
            return True
        if _retried(status):
            self._deferred(report, f"status={status}")
            return False
        self._acknowledge(report, f"{status}:{code}")
        logger.warning(
            "report_rejected device=%s key=%s job=%s type=%s status=%s error=%s",
            self.device,
            report.key,
            report.job_id,
            report.body.get("type"),
            status,
            code,
        )
        if code == "job_cancelled" and report.job_id:
            # Cancelled before we received it: never print it.
            await self.journal.advance(report.job_id, "CANCELLED", expect=j.SUBMITTABLE_STATES)
        return True


def _retried(status: int) -> bool:
    """Whether a report answered ``status`` stays for the next flush (not acknowledged)."""
    return status in (401, 403, 408, 429) or status >= 500


@dataclass(frozen=True)
class Assignment:
    job_id: str
    claim_id: str
    title: str
    content_type: str
    size: int
    sha256: str
    printer: str | None
    options: dict[str, Any]
    document_url: str
    body: dict[str, Any]
    #: The document the assignment carried inline (checked like a download), else None.
    inline: bytes | None = None

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "Assignment":
        """The assignment in a claim's answer or a pushed ``assignment`` frame; the journal keeps
        ``body`` without the inline document (it is not needed once the job is RECEIVED).
        ``ProtocolError`` unless its ids are UUIDs (they become file names and URL paths here)."""
        inline = p.inline_document(body)
        body = {k: v for k, v in body.items() if k not in (wire.DOCUMENT_BASE64, "type", "pushed")}
        return cls(
            job_id=uuid_text(body.get("job_id"), "job_id"),
            claim_id=uuid_text(body.get("claim_id"), "claim_id"),
            title=str(body.get("title") or ""),
            content_type=str(body.get("content_type") or "application/octet-stream"),
            size=int(body["size"]),
            sha256=str(body["sha256"]).lower(),
            printer=body.get("printer") or None,
            options=dict(body.get("options") or {}),
            document_url=str(body.get("document_url") or ""),
            body=body,
            inline=inline,
        )


# What handling an assignment led to.
DONE = "done"  # the job reached a state the server was told about; claim the next one
RETRY_LATER = "retry_later"  # the server or the network failed us; claim again after a delay


class JobRunner:
    """Takes one assignment from claim to a final report, guarded by the journal."""

    def __init__(
        self,
        device: str,
        journal: AsyncJournal,
        http: httpx.AsyncClient,
        reporter: Reporter,
        spooler: AsyncSpooler,
        follow_timeout: float,
    ):
        self.device = device
        self.journal = journal
        self.http = http
        self.reporter = reporter
        self.spooler = spooler
        self.follow_timeout = follow_timeout
        #: Whether a job may wait in the journal as RECEIVED for :meth:`resume_received`: from
        #: the start (a job left by the last run), and after any job not handled to DONE.
        self.may_hold_received = True

    async def handle(self, endpoints: Endpoints, assignment: Assignment) -> str:
        handled = RETRY_LATER
        try:
            handled = await self._handle(endpoints, assignment)
        finally:
            if handled != DONE:
                self.may_hold_received = True
        return handled

    async def _handle(self, endpoints: Endpoints, assignment: Assignment) -> str:
        a = assignment
        # A document that came inline is checked as a download is; one that matches is received
        # with the record, in one commit.
        checked = None if a.inline is None else _mismatch(a, a.inline)
        inline = a.inline is not None and checked is None
        # Recorded, or the entry of a job already known (a replay changes nothing).
        entry = await self.reporter.write(
            j.Journal.remember_claim, a.job_id, a.claim_id, a.title, a.body, received=inline
        )
        if not entry.may_submit:
            # Submitted before (or final): never again. Tell the server what we know.
            if entry.final and not await self.journal.has_pending(a.job_id):
                await self.journal.requeue_final_event(a.job_id, a.claim_id)
            logger.info(
                "job_replay_not_resubmitted device=%s job=%s state=%s",
                self.device,
                a.job_id,
                entry.state,
            )
            if entry.state == j.SPOOLED and entry.spool_ref:
                await self.finish_spooled(endpoints, entry)
            return await self._told(endpoints)
        logger.info(
            "job_claimed device=%s job=%s claim=%s document=%s",
            self.device,
            a.job_id,
            a.claim_id,
            "inline" if a.inline is not None else "download",
        )

        if a.inline is not None:
            data, failure = a.inline, checked
        else:
            data, failure = await self._download(endpoints, a)
        if failure == RETRY_LATER:
            return RETRY_LATER
        if failure is not None:
            await self.journal.advance(
                a.job_id,
                "FAILED",
                event="FAILED",
                message=failure[1],
                detail={"reason": failure[0]},
                expect=j.SUBMITTABLE_STATES,
            )
            logger.warning(
                "job_failed device=%s job=%s reason=%s", self.device, a.job_id, failure[0]
            )
            return await self._told(endpoints)

        if not inline:
            await self.journal.advance(
                a.job_id, j.RECEIVED, event="RECEIVED", expect=frozenset({j.CLAIMED})
            )
        if not await self.reporter.flush(endpoints):
            return RETRY_LATER  # RECEIVED not acknowledged yet: the next claim replays this job
        # The point of no return, journaled before the spooler sees the document; a job whose
        # RECEIVED the server refused (stale claim, cancelled) is not ours, and is not printed.
        submitting, state = await self.journal.submitting(a.job_id)
        if not submitting:
            logger.info("job_not_printed device=%s job=%s state=%s", self.device, a.job_id, state)
            return DONE

        await self._submit(endpoints, a, data)
        return await self._told(endpoints)

    async def _told(self, endpoints: Endpoints) -> str:
        """DONE once the server has acknowledged what the journal has to tell it; RETRY_LATER
        while a report waits (the device's loop flushes it again after a delay)."""
        return DONE if await self.reporter.flush(endpoints) else RETRY_LATER

    async def resume_received(self, endpoints: Endpoints) -> bool:
        """Finish jobs whose RECEIVED the server acknowledged after we had to put them aside.

        Once RECEIVED, the server no longer hands the job out, so the claim loop would never
        bring it back. False when one could not be finished now (its download or a report
        failed): the caller tries again later, since nothing else will. The journal is not read
        when no job can be waiting (:attr:`may_hold_received`).
        """
        if not self.may_hold_received:
            return True
        self.may_hold_received = False  # until a job is found waiting, or handled but not DONE
        try:
            journal = self.journal
            for entry in await journal.jobs_in(j.RECEIVED):
                job_id = entry.job_id
                if await journal.has_pending(job_id) or await journal.received_refused(job_id):
                    self.may_hold_received = True  # its answer is still to come (or never ours)
                    continue
                body = await journal.assignment(job_id)
                if body and await self.handle(endpoints, Assignment.from_body(body)) != DONE:
                    return False
        except BaseException:
            self.may_hold_received = True
            raise
        return True

    async def reconcile(
        self, endpoints: Endpoints, active_jobs: tuple[tuple[str, str, str], ...]
    ) -> None:
        """Answer the server's list of this device's RECEIVED/SPOOLED jobs from the journal.

        A job the journal has no record of is reported OUTCOME_UNKNOWN and never printed; a job
        final here whose outcome the server has not recorded is reported again; jobs still
        in progress here (received, being submitted, spooled) are finished by the worker as
        always and need nothing more.
        """
        for job_id, claim_id, status in active_jobs:
            entry = await self.journal.job(job_id)
            if entry is None:
                await self.journal.record_unknown(
                    job_id,
                    claim_id,
                    f"the server has this job {status} but the agent's journal has no record "
                    "of it (journal lost or reset); it was not printed again",
                )
                logger.warning(
                    "job_outcome_unknown device=%s job=%s reason=no_journal_record",
                    self.device,
                    job_id,
                )
            elif entry.final and not await self.journal.has_pending(job_id):
                await self.journal.requeue_final_event(job_id, claim_id)
                logger.info(
                    "job_final_reported_again device=%s job=%s state=%s",
                    self.device,
                    job_id,
                    entry.state,
                )
        await self.reporter.flush(endpoints)

    async def _download(
        self, endpoints: Endpoints, a: Assignment
    ) -> tuple[bytes, tuple[str, str] | str | None]:
        url = endpoints.document(a.job_id)
        if a.document_url:
            try:
                url = endpoints.resolve(a.document_url)
            except ValueError:  # never follow it: the document is fetched from our own server
                logger.warning(
                    "document_url_refused device=%s job=%s reason=other_origin",
                    self.device,
                    a.job_id,
                )
        try:
            response = await self.http.get(url, timeout=httpx.Timeout(10, read=120))
        except httpx.HTTPError as exc:
            logger.info(
                "download_deferred device=%s job=%s error=%s",
                self.device,
                a.job_id,
                exc.__class__.__name__,
            )
            return b"", RETRY_LATER
        if response.status_code == 404:
            return b"", ("document_not_found", "the server has no document for this claim")
        if response.status_code != 200:
            logger.info(
                "download_deferred device=%s job=%s status=%s",
                self.device,
                a.job_id,
                response.status_code,
            )
            return b"", RETRY_LATER
        data = response.content
        return data, _mismatch(a, data)

    async def _submit(self, endpoints: Endpoints, a: Assignment, data: bytes) -> None:
        """Hand a job journaled ``SUBMITTING`` to the spooler and journal how that went."""
        job = SpoolJob(a.job_id, a.title, a.content_type, data, a.printer, a.options)
        try:
            ref = await self.spooler.submit(job)
        except SpoolRejected as exc:
            await self._finish(
                a.job_id, "FAILED", f"spooler refused the document: {exc}", "spool_rejected"
            )
            return
        except SpoolInterrupted as exc:  # part of the document may have been printed
            await self._finish(a.job_id, "OUTCOME_UNKNOWN", str(exc), "interrupted_transfer")
            return
        except AlreadySpooled as exc:
            await self._finish(
                a.job_id, "PRINTED", f"document already written: {exc}", "already_spooled"
            )
            return
        except Exception as exc:  # the spooler may or may not have the job: never guess
            await self._finish(
                a.job_id, "OUTCOME_UNKNOWN", f"spooler failed: {exc!r}", "spool_error"
            )
            return
        settled = self.spooler.settled(ref)
        ended = None if settled is None else (settled.status, settled.message)
        # Submitting may have finished it: then SPOOLED and how it ended are journaled in one
        # commit, go out together (the caller's flush), and the server records them in one
        # transaction.
        moved = await self.reporter.write(j.Journal.spooled, a.job_id, ref, ended)
        logger.info("job_spooled device=%s job=%s ref=%s", self.device, a.job_id, ref)
        if settled is not None:
            if moved:
                self._log_end(a.job_id, settled.status, settled.message)
            return
        # On the socket SPOOLED goes out now and its answer is taken with PRINTED's; over HTTP
        # it is sent (and answered) before the job is followed, as before.
        if self.reporter.pipelined:
            self.reporter.flush_soon(endpoints)
        else:
            await self.reporter.flush(endpoints)
        spooled = j.JobEntry(a.job_id, a.claim_id, j.SPOOLED, ref, a.title)
        await self.finish_spooled(endpoints, spooled)

    async def finish_spooled(self, endpoints: Endpoints, entry: j.JobEntry) -> None:
        """Follow a spooled job until the spooler has finished it, then report how it ended."""
        assert entry.spool_ref is not None
        try:
            outcome = await self.spooler.follow(entry.spool_ref, self.follow_timeout)
        except Exception as exc:  # the spooler has the job; we cannot tell how it ends
            outcome = Outcome("OUTCOME_UNKNOWN", f"could not follow {entry.spool_ref}: {exc!r}")
        await self._finish(
            entry.job_id, outcome.status, outcome.message, None, expect=frozenset({j.SPOOLED})
        )

    async def _finish(
        self,
        job_id: str,
        status: str,
        message: str,
        reason: str | None,
        expect: frozenset[str] = frozenset({j.SUBMITTING}),
    ) -> None:
        detail = {"reason": reason} if reason else {}
        if await self.journal.advance(
            job_id, status, event=status, message=message, detail=detail, expect=expect
        ):
            self._log_end(job_id, status, message)

    def _log_end(self, job_id: str, status: str, message: str) -> None:
        log = logger.info if status == "PRINTED" else logger.warning
        log("job_%s device=%s job=%s message=%s", status.lower(), self.device, job_id, message)


def _mismatch(a: Assignment, data: bytes) -> tuple[str, str] | None:
    """Why the document is not the job's (size, then sha256), or None."""
    if len(data) != a.size:
        return ("size_mismatch", f"expected {a.size} bytes, got {len(data)}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != a.sha256:
        return ("checksum_mismatch", f"expected sha256 {a.sha256}, got {digest}")
    return None
