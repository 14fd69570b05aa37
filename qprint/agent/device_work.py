"""A device's work loop: what it does on each wakeup (connect, a ``wake`` frame, a pushed
assignment, after each job, the retry timer): resume what the journal holds, flush the reports,
handle pushed assignments, claim until the queue is empty. A mixin of
:class:`qprint.agent.device.DeviceAgent`, apart from its socket loop (connect, hold, frames) because
it outlives every connection: a job in progress is never cut off by a reconnect. No Django.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from qprint.agent import journal as j
from qprint.agent import protocol as p
from qprint.agent.worker import DONE, GATE_RETRY_CODES, Assignment, error_code

logger = logging.getLogger("qprint.agent")

#: Where the claim loop is (:meth:`WorkLoop.on_wake_frame`): a claim is on its way, or it handed
#: out a job that the loop handles before it claims again.
CLAIM_SENT = "sent"
CLAIM_ANSWERED_WITH_A_JOB = "answered_with_a_job"


class WorkLoop:
    """The device's work on wakeups (mixed into the device agent, whose state it reads)."""

    name: str
    wake: asyncio.Event
    stopping: asyncio.Event
    connected: bool
    push: bool
    pushed: asyncio.Queue[dict[str, Any]]
    _claim_needed: bool
    _claiming: str | None
    _woken_while_claim_sent: bool
    _retry_handle: asyncio.TimerHandle | None
    _reconcile: tuple[tuple[str, str, str], ...] | None

    async def _work(self) -> None:
        """Claim on every wakeup (connect, ``wake`` frame, after each job, retry timer)."""
        resumed = False
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.stopping.is_set():
                await self.reporter.flush(self.endpoints)
                return
            if not resumed:
                resumed = True
                for entry in await self.journal.jobs_in(j.SPOOLED):
                    await self.jobs.finish_spooled(self.endpoints, entry)
            if self._reconcile is not None:
                active, self._reconcile = self._reconcile, None
                try:
                    await self.jobs.reconcile(self.endpoints, active)
                except Exception:
                    logger.exception("reconcile_failed device=%s", self.name)
            try:
                if not await self.reporter.flush(self.endpoints):
                    self._wake_later(min(5.0, self.backoff.maximum))  # reports are retried
                elif not await self.jobs.resume_received(self.endpoints):
                    self._wake_later(self.backoff.step())  # a put-aside job is tried again
            except Exception:
                logger.exception("resume_failed device=%s", self.name)
                self._wake_later(self.backoff.maximum)
            try:
                await self._handle_pushed()
            except httpx.HTTPError as exc:
                logger.info("job_deferred device=%s error=%s", self.name, exc.__class__.__name__)
                self._claim_needed = True
                self._wake_later(self.backoff.step())
            except Exception:
                logger.exception("push_failed device=%s", self.name)
                self._claim_needed = True
                self._wake_later(self.backoff.maximum)
            if not self.connected or self.applied.paused:
                continue
            if self.push and not self._claim_needed:
                continue  # the server hands out the jobs: no claim
            self._claim_needed = False
            try:
                await self._claim_until_empty()
            except httpx.HTTPError as exc:
                logger.info("claim_deferred device=%s error=%s", self.name, exc.__class__.__name__)
                self._wake_later(self.backoff.step())
            except Exception:  # a bad answer must not end the device's work for good
                logger.exception("claim_failed device=%s", self.name)
                self._wake_later(self.backoff.maximum)

    def on_wake_frame(self) -> None:
        """A ``wake`` frame: claim, unless a claim that the loop is sure to send finds what the
        wake is for.

        The loop claims until the queue is empty: after a job whose claim said that another job
        waited behind it (or did not say), it claims again, and that claim reads what a wake that
        came meanwhile was published for. So does the claim after one that was on its way when
        the wake came, if that one handed out such a job. A wake is kept when no claim is coming:
        the loop is idle, or the claim on its way answers that there is nothing to print or hands
        out the last job (its read may have come before the wake's job). In a flood, a device is
        woken while it claims and while it prints, by each job submitted for it and each of its
        jobs that leaves CLAIMED: kept, each wake would end in one more claim, answered that the
        queue is empty."""
        if self._claiming == CLAIM_SENT:
            self._woken_while_claim_sent = True
        elif self._claiming != CLAIM_ANSWERED_WITH_A_JOB:
            self.wake.set()

    def _claim_answered(self, another_follows: bool) -> None:
        """The claim on its way was answered (or the loop ended): a wake that came meanwhile is
        kept unless ``another_follows``, a claim the loop will make after the job it handed out."""
        if self._claiming == CLAIM_SENT and self._woken_while_claim_sent and not another_follows:
            self.wake.set()
        self._claiming = CLAIM_ANSWERED_WITH_A_JOB if another_follows else None

    async def _claim_until_empty(self) -> None:
        try:
            await self._claims()
        finally:
            self._claim_answered(another_follows=False)

    async def _claims(self) -> None:
        gate_retries = 0
        last_job, repeats = None, 0
        while self.connected and not self.stopping.is_set() and not self.applied.paused:
            endpoints = self.endpoints
            # A wake kept back so far is this claim's to find.
            self._claiming, self._woken_while_claim_sent = CLAIM_SENT, False
            response = await self.api.claim(endpoints)
            status = response.status_code
            if status == 204:
                return
            if status == 200:
                assignment = Assignment.from_body(response.json())
                repeats = repeats + 1 if assignment.job_id == last_job else 0
                last_job = assignment.job_id
                if repeats >= 3:
                    logger.error("job_replayed_repeatedly device=%s job=%s", self.name, last_job)
                    self._wake_later(self.backoff.maximum)
                    return
                # When nothing waited behind this job, the loop ends with it, and a wake that came
                # while the claim was on its way, or comes from now on, is for a job the claim's
                # read did not see.
                last = p.more_queued(response) is False
                self._claim_answered(another_follows=not last)
                if await self.jobs.handle(endpoints, assignment) != DONE:
                    self._wake_later(self.backoff.step())  # it claims again, later
                    return
                if last:
                    return
                continue
            code = error_code(response)
            if status == 409 and code in GATE_RETRY_CODES and gate_retries < 5:
                gate_retries += 1
                await self._sleep(0.1 * 2**gate_retries)
                continue
            if status == 409 or status in (401, 403):
                logger.info("claim_refused device=%s status=%s error=%s", self.name, status, code)
                return
            logger.info("claim_deferred device=%s status=%s", self.name, status)
            self._wake_later(self.backoff.step())
            return

    async def _handle_pushed(self) -> None:
        """Handle the assignments the server pushed, in order. One that cannot finish now (a
        download or a report failed) is replayed by the next claim (the server pushes a held
        job again only on a new connection)."""
        while not self.pushed.empty() and not self.stopping.is_set():
            assignment = Assignment.from_body(self.pushed.get_nowait())
            if await self.jobs.handle(self.endpoints, assignment) != DONE:
                self._claim_needed = True
                self._wake_later(self.backoff.step())
                return

    def _wake_later(self, delay: float) -> None:
        if self._retry_handle is not None:
            self._retry_handle.cancel()
        self._retry_handle = asyncio.get_running_loop().call_later(delay, self.wake.set)
