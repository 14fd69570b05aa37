"""The server's commands to the device (``CANCEL_JOB``, ``PRINT_TEST_PAGE``, ``REPORT_PRINTERS``):
each run once (the journal remembers it) and its result reported from the journal's outbox.
"""

import logging
from typing import Any

import httpx

from qprint.agent import journal as j
from qprint.agent.journal_thread import AsyncJournal
from qprint.agent.protocol import Endpoints
from qprint.agent.spooler_thread import AsyncSpooler
from qprint.agent.worker import Reporter

logger = logging.getLogger("qprint.agent")


class CommandRunner:
    """Runs each server command once (the journal remembers it) and reports the result."""

    def __init__(
        self,
        device: str,
        journal: AsyncJournal,
        http: httpx.AsyncClient,
        reporter: Reporter,
        spooler: AsyncSpooler,
    ):
        self.device = device
        self.journal = journal
        self.http = http
        self.reporter = reporter
        self.spooler = spooler

    async def run(self, endpoints: Endpoints, command_id: str, kind: str, payload: dict) -> None:
        if not await self.journal.start_command(command_id, kind):
            await self.reporter.flush(endpoints)  # a repeat: its result may still be unsent
            return
        logger.info("command_started device=%s command=%s type=%s", self.device, command_id, kind)
        try:
            if kind == "CANCEL_JOB":
                status, result = await self._cancel_job(endpoints, str(payload.get("job_id", "")))
            elif kind == "PRINT_TEST_PAGE":
                ref = await self.spooler.test_page(payload.get("printer"))
                status, result = "DONE", {"spool_ref": ref}
            elif kind == "REPORT_PRINTERS":
                printers = await report_printers(self.http, endpoints, self.spooler)
                status, result = "DONE", {"printers": printers}
            else:
                status, result = "FAILED", {"error": "unknown_command", "message": kind}
        except Exception as exc:
            status, result = "FAILED", {"error": exc.__class__.__name__, "message": str(exc)}
        await self.journal.finish_command(command_id, status, result)
        logger.info(
            "command_finished device=%s command=%s type=%s status=%s",
            self.device,
            command_id,
            kind,
            status,
        )
        await self.reporter.flush(endpoints)

    async def _cancel_job(self, endpoints: Endpoints, job_id: str) -> tuple[str, dict[str, Any]]:
        entry = await self.journal.job(job_id)
        if entry is None:
            return "DONE", {"cancelled": False, "reason": "unknown_job"}
        if entry.may_submit and await self.journal.advance(
            job_id,
            "CANCELLED",
            event="CANCELLED",
            message="cancelled before printing",
            expect=j.SUBMITTABLE_STATES,
        ):
            return "DONE", {"cancelled": True}
        if entry.state == j.SPOOLED and entry.spool_ref:
            stopped = await self.spooler.cancel(entry.spool_ref)
            if stopped:
                # The follower may have seen the cancellation first and recorded it.
                await self.journal.advance(
                    job_id,
                    "CANCELLED",
                    event="CANCELLED",
                    message="cancelled in the spooler on request",
                    expect=frozenset({j.SPOOLED}),
                )
                entry = await self.journal.job(job_id)
                assert entry is not None
                if entry.state == "CANCELLED":
                    return "DONE", {"cancelled": True}
        entry = await self.journal.job(job_id)
        assert entry is not None
        return "DONE", {"cancelled": False, "reason": f"job is {entry.state}"}


async def report_printers(
    http: httpx.AsyncClient, endpoints: Endpoints, spooler: AsyncSpooler
) -> list[dict[str, Any]]:
    """Send the spooler's printers as the device's full list (``PUT api/v1/device/printers``)."""
    printers = await spooler.printers()
    response = await http.put(endpoints.printers, json={"printers": printers})
    response.raise_for_status()
    return printers
