"""The spooler as a device's event loop sees it: its calls on the device's own threads.

A spooler's calls block: ``submit`` writes a file, sends bytes to a raw printer or hands the
document to CUPS, ``follow`` asks CUPS or an IPP printer until the job is printed (up to
``follow_timeout``, ten minutes by default), ``cancel`` and ``printers`` ask CUPS. On asyncio's
default executor they would share its few threads (``min(32, cores + 4)``) with every device of
the process and with the loop's own name lookups: a handful of devices following long jobs would
hold them all, and another device's submission, a cancel command or a reconnect's DNS lookup
would wait for one of those jobs to end.

:class:`AsyncSpooler` gives each device two threads of its own (:class:`qprint.core.handoff.Workers`
of one thread each, started with their first call): one for the job's calls (``submit``, then
``follow``, one at a time as the device's work loop makes them), one for the rest (``cancel``,
``printers``, the test page), so that a cancel reaches the spooler while the job it cancels is
being followed. The spooler itself may be shared by the devices of a process (its calls must be
safe from several threads, as they always had to be). The threads are daemons: a process that
stops does not wait for a job being followed; the journal holds it ``SPOOLED``, and the next start
follows it again.
"""

from __future__ import annotations

import functools

from qprint.agent.spoolers import Outcome, Spooler, SpoolJob
from qprint.core.handoff import Workers


class AsyncSpooler:
    """One device's calls of ``spooler``, each awaited on the device's threads."""

    def __init__(self, spooler: Spooler, name: str):
        self.spooler = spooler
        self._job = Workers(1, f"spooler-{name}")
        self._other = Workers(1, f"spooler-{name}-other")

    async def submit(self, job: SpoolJob) -> str:
        return await self._job.run(functools.partial(self.spooler.submit, job))

    async def follow(self, ref: str, timeout: float) -> Outcome:
        return await self._job.run(functools.partial(self.spooler.follow, ref, timeout))

    def settled(self, ref: str) -> Outcome | None:
        """:meth:`Spooler.settled`: what the submission already knows, no I/O."""
        return self.spooler.settled(ref)

    async def cancel(self, ref: str) -> bool:
        return await self._other.run(functools.partial(self.spooler.cancel, ref))

    async def printers(self) -> list[dict]:
        return await self._other.run(self.spooler.printers)

    async def test_page(self, printer: str | None) -> str:
        return await self._other.run(functools.partial(self.spooler.test_page, printer))

    def close(self) -> None:
        """Let the threads end once their calls are done (a call in progress is not waited for)."""
        self._job.shutdown(wait=False)
        self._other.shutdown(wait=False)
