"""The journal as the event loop sees it: every call runs on the journal's own thread, awaited
(all but the acknowledgements of reports, which guard no act: see :meth:`AsyncJournal.acknowledge`).

A journal write is a ``synchronous=FULL`` commit (an fsync); made on the event loop it would
stop every device of the process until the disk answers. ``AsyncJournal`` runs each call of
one device's ``Journal`` on a thread of its own (:class:`qprint.core.handoff.Workers` of one
thread: the lightest hand-off from the loop and back, a few per job), so:

- the SQLite connection is used from that one thread only, and the calls run one at a time in
  the order they were made (a device's writes keep their order);
- the caller awaits the call, so "the write is committed, then the act" holds exactly as with
  the synchronous journal: ``await journal.advance(...)`` returns after the commit is on disk;
- a slow disk holds up only the device whose journal it is; the loop and the other devices go on.

A caller cancelled while its write is in progress does not undo it: the write commits (or not)
on the thread, as if the agent had stopped right after it, which is what the journal's
invariants already cover (see ``journal``). ``close`` runs after every call made before it.
"""

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from qprint.agent import journal as j
from qprint.core.handoff import Workers

logger = logging.getLogger("qprint.agent")

T = TypeVar("T")


@dataclass(frozen=True)
class OutboxRead:
    """The outbox's first unacknowledged reports, read on the journal's thread right after a
    write (:meth:`AsyncJournal.written_then_read`), and :attr:`Journal.reports_queued` then."""

    queued: int
    reports: list[j.Report]


class AsyncJournal:
    """One device's journal, opened, used and closed on its own thread."""

    def __init__(self, path: str | Path, name: str = "journal"):
        self._thread = Workers(1, f"journal-{name}")
        # Opened on its thread too (the schema and the WAL switch touch the disk); once, at start.
        self._journal: j.Journal = self._thread.submit(functools.partial(j.Journal, path)).result()
        self.path = self._journal.path
        # The answers to reports not yet handed to the thread (:meth:`acknowledge`).
        self._answers: list[tuple[int, str]] = []
        self._answers_lock = threading.Lock()

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._thread.run(functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        await self._run(self._journal.close)
        self._thread.shutdown(wait=False)

    # -- jobs --------------------------------------------------------------------------------

    async def job(self, job_id: str) -> j.JobEntry | None:
        return await self._run(self._journal.job, job_id)

    async def assignment(self, job_id: str) -> dict[str, Any]:
        return await self._run(self._journal.assignment, job_id)

    async def jobs_in(self, *states: str) -> list[j.JobEntry]:
        return await self._run(self._journal.jobs_in, *states)

    async def remember_claim(
        self, job_id: str, claim_id: str, *args: Any, **kwargs: Any
    ) -> j.JobEntry:
        return await self._run(self._journal.remember_claim, job_id, claim_id, *args, **kwargs)

    async def advance(self, job_id: str, state: str, **kwargs: Any) -> bool:
        return await self._run(self._journal.advance, job_id, state, **kwargs)

    async def submitting(self, job_id: str) -> tuple[bool, str]:
        return await self._run(self._journal.submitting, job_id)

    async def spooled(
        self, job_id: str, spool_ref: str, ended: tuple[str, str] | None = None
    ) -> bool:
        return await self._run(self._journal.spooled, job_id, spool_ref, ended)

    async def record_unknown(self, job_id: str, claim_id: str, message: str) -> bool:
        return await self._run(self._journal.record_unknown, job_id, claim_id, message)

    async def requeue_final_event(self, job_id: str, claim_id: str) -> str | None:
        return await self._run(self._journal.requeue_final_event, job_id, claim_id)

    async def recover(self) -> list[j.JobEntry]:
        return await self._run(self._journal.recover)

    async def prune(self, older_than_days: float = 30) -> int:
        return await self._run(self._journal.prune, older_than_days)

    # -- commands ----------------------------------------------------------------------------

    async def start_command(self, command_id: str, kind: str) -> bool:
        return await self._run(self._journal.start_command, command_id, kind)

    async def finish_command(self, command_id: str, status: str, result: dict[str, Any]) -> None:
        await self._run(self._journal.finish_command, command_id, status, result)

    # -- outbox ------------------------------------------------------------------------------

    async def pending(self, limit: int = 100) -> list[j.Report]:
        return await self._run(self._journal.pending, limit)

    async def written_then_read(
        self, write: Callable[..., T], limit: int, *args: Any, **kwargs: Any
    ) -> tuple[T, OutboxRead]:
        """``write`` (a :class:`Journal` method, unbound) with ``args``, then a read of the
        outbox's first ``limit`` reports, in one call on the journal's thread: one hand-off where
        a write and the flush's read after it would make two."""
        journal = self._journal

        def call() -> tuple[T, OutboxRead]:
            result = write(journal, *args, **kwargs)
            return result, OutboxRead(journal.reports_queued, journal.pending(limit))

        call.__name__ = f"{write.__name__}, then pending"
        return await self._run(call)

    async def has_pending(self, job_id: str | None = None) -> bool:
        return await self._run(self._journal.has_pending, job_id)

    def acknowledge(self, seq: int, outcome: str) -> None:
        """Record the server's answer to report ``seq``: queued on the journal's thread, not
        awaited. An acknowledgement guards no act (:meth:`Journal.acknowledge_all`), and the
        thread runs calls in the order they were made, so every call made after this one (the
        outbox's next read, the check of ``RECEIVED``'s answer before the spooler) sees it; the
        event loop is not woken for its commit. The answers that arrive while the thread has not
        yet taken the earlier ones (the answers to ``SPOOLED`` and ``PRINTED``, sent together)
        join them: one hand-off and one commit for all. One that fails is logged, and its
        report, still in the outbox, is sent again at the next flush, which the server answers
        as the replay it is."""
        with self._answers_lock:
            self._answers.append((seq, outcome))
            if len(self._answers) > 1:
                return  # the call queued for the first takes this one too
        self._thread.submit(self._record_answers).add_done_callback(_log_failure)

    def _record_answers(self) -> None:
        """On the journal's thread: every answer given since the last call, in one commit."""
        with self._answers_lock:
            answers, self._answers = self._answers, []
        self._journal.acknowledge_all(answers)

    async def received_refused(self, job_id: str) -> bool:
        return await self._run(self._journal.received_refused, job_id)

    @property
    def reports_queued(self) -> int:
        """:attr:`Journal.reports_queued`, read on the loop (an int the thread only adds to)."""
        return self._journal.reports_queued


def _log_failure(future: Future) -> None:
    """Log acknowledgements the journal did not record (on the journal's thread)."""
    error = future.exception()
    if error is not None:
        logger.error("acknowledgement_not_recorded error=%r", error)
