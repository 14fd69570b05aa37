"""The agent's memory of every job and every report, in SQLite, written before each side effect.

Invariants (docs/AGENT.md, "The journal"), which hold across crashes because every write that
guards an act is a committed, ``synchronous=FULL`` transaction before the act it describes (only
the server's acknowledgements of reports and the record of an assignment, which guard nothing, are
committed without an fsync):

- A job is marked ``SUBMITTING`` before the spooler is called. A job the journal holds as
  ``SUBMITTING`` (the agent died during submission) is never submitted again: recovery turns it
  into ``OUTCOME_UNKNOWN`` and reports that.
- A job in a final state (``PRINTED``, ``FAILED``, ``OUTCOME_UNKNOWN``, ``CANCELLED``) or past
  submission (``SPOOLED``) is never submitted again, whatever the server replays.
- Every report to the server (job events, command results) goes into the outbox in the same
  transaction as the state change it reports, with its event id fixed there; it is sent until the
  server acknowledges it, in order, also after a restart.

One journal belongs to one device; the agent opens one connection to it and uses it from one
thread only (``journal_thread.AsyncJournal``: the event loop awaits each call made there).
"""

import json
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Local job states, in order. Only CLAIMED and RECEIVED may still lead to a submission.
CLAIMED = "CLAIMED"
RECEIVED = "RECEIVED"
SUBMITTING = "SUBMITTING"
SPOOLED = "SPOOLED"
FINAL_STATES = frozenset({"PRINTED", "FAILED", "OUTCOME_UNKNOWN", "CANCELLED"})
SUBMITTABLE_STATES = frozenset({CLAIMED, RECEIVED})

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    claim_id TEXT NOT NULL,
    state TEXT NOT NULL,
    spool_ref TEXT,
    title TEXT NOT NULL DEFAULT '',
    assignment TEXT NOT NULL DEFAULT '{}',
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    job_id TEXT,
    path TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    acked_at REAL,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (seq) WHERE acked_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_job ON outbox (job_id);
CREATE TABLE IF NOT EXISTS commands (
    command_id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class JobEntry:
    job_id: str
    claim_id: str
    state: str
    spool_ref: str | None
    title: str

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def may_submit(self) -> bool:
        return self.state in SUBMITTABLE_STATES


@dataclass(frozen=True)
class Report:
    """One unacknowledged request of the outbox."""

    seq: int
    key: str
    job_id: str | None
    path: str
    body: dict[str, Any]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        #: Reports queued since the journal was opened (a rolled-back one counted too), and
        #: acknowledgements that failed (their report is still to send). Calls run one at a time
        #: on the journal's thread, so a read of the outbox made after this count was taken sees
        #: every report it counts: an unchanged count means nothing new to send.
        self.reports_queued = 0

    def close(self) -> None:
        self.db.close()

    # -- jobs --------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobEntry | None:
        row = self.db.execute(
            "SELECT job_id, claim_id, state, spool_ref, title FROM jobs WHERE job_id = ?",
            (job_id,),
        ).fetchone()
        return JobEntry(*row) if row else None

    def assignment(self, job_id: str) -> dict[str, Any]:
        row = self.db.execute("SELECT assignment FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return json.loads(row[0]) if row else {}

    def jobs_in(self, *states: str) -> list[JobEntry]:
        marks = ",".join("?" * len(states))
        rows = self.db.execute(
            f"SELECT job_id, claim_id, state, spool_ref, title FROM jobs WHERE state IN ({marks})"
            " ORDER BY updated_at",
            states,
        ).fetchall()
        return [JobEntry(*r) for r in rows]

    def remember_claim(
        self,
        job_id: str,
        claim_id: str,
        title: str = "",
        assignment: dict | None = None,
        *,
        received: bool = False,
    ) -> JobEntry:
        """Record an assignment; a job already known keeps its state (a replay changes nothing).

        The assignment is kept so a job whose RECEIVED was acknowledged late (it is no longer
        handed out by claims) can still be finished. Not ``synchronous=FULL``: the record guards
        no act (what follows it, the download and the ``RECEIVED`` written with its own fsync, is
        safe to do again), and the server hands the same assignment out again until ``RECEIVED``;
        one lost with the machine's power is recorded again from that replay.

        ``received``: the document came with the assignment and matched it, so there is nothing
        to download: a job still ``CLAIMED`` moves on to ``RECEIVED`` with its event in the same
        transaction, durable as :meth:`advance` writes it.
        """
        with self._tx(durable=received):
            self.db.execute(
                "INSERT INTO jobs (job_id, claim_id, state, title, assignment, updated_at)"
                " VALUES (?,?,?,?,?,?)"
                " ON CONFLICT (job_id) DO UPDATE SET claim_id = excluded.claim_id"
                " WHERE jobs.state = 'CLAIMED'",
                (job_id, claim_id, CLAIMED, title, json.dumps(assignment or {}), time.time()),
            )
            if received:
                self._advance(job_id, RECEIVED, RECEIVED, "", None, None, {CLAIMED})
        entry = self.job(job_id)
        assert entry is not None
        return entry

    def advance(
        self,
        job_id: str,
        state: str,
        *,
        event: str | None = None,
        message: str = "",
        detail: dict[str, Any] | None = None,
        spool_ref: str | None = None,
        expect: frozenset[str] | None = None,
    ) -> bool:
        """Move a job to ``state`` and queue its event, in one durable transaction.

        With ``expect``, only a job currently in one of those states moves (returns False
        otherwise), which is how submission and cancellation exclude each other.
        """
        with self._tx():
            return self._advance(job_id, state, event, message, detail, spool_ref, expect)

    def spooled(self, job_id: str, spool_ref: str, ended: tuple[str, str] | None = None) -> bool:
        """``SUBMITTING`` -> ``SPOOLED`` with its event (the reference in its detail), in one
        durable transaction. With ``ended`` (``(state, message)``: the submission itself ended
        the job, a file written or bytes handed to a raw printer), the job moves on to that final
        state and its event is queued after ``SPOOLED``'s, in the same transaction: ``SPOOLED``
        guards no act (the spooler has the job already), so one commit records both, as two
        would. False when the job was not ``SUBMITTING``."""
        with self._tx():
            moved = self._advance(
                job_id, SPOOLED, SPOOLED, "", {"spool_ref": spool_ref}, spool_ref, {SUBMITTING}
            )
            if moved and ended is not None:
                state, message = ended
                self._advance(job_id, state, state, message, {}, None, {SPOOLED})
        return moved

    def submitting(self, job_id: str) -> tuple[bool, str]:
        """``RECEIVED`` -> ``SUBMITTING``, the point of no return, in one durable transaction,
        once the server has answered the job's ``RECEIVED``: only when it accepted it. A job
        whose ``RECEIVED`` it refused (the claim was stale, the job cancelled: not this device's
        to print) is ``CANCELLED`` instead, with no report of its own. Returns (moved to
        ``SUBMITTING``, the state the job was in)."""
        with self._tx():
            entry = self.job(job_id)
            if entry is None:
                raise KeyError(job_id)
            if entry.state != RECEIVED:
                return False, entry.state
            refused = self.received_refused(job_id)
            moved = "CANCELLED" if refused else SUBMITTING
            self._advance(job_id, moved, None, "", None, None, {RECEIVED})
            return not refused, entry.state

    def _advance(
        self,
        job_id: str,
        state: str,
        event: str | None,
        message: str,
        detail: dict[str, Any] | None,
        spool_ref: str | None,
        expect: frozenset[str] | set[str] | None,
    ) -> bool:
        """:meth:`advance`'s writes, in the caller's transaction."""
        row = self.db.execute(
            "SELECT claim_id, state FROM jobs WHERE job_id = ?", (job_id,)
        ).fetchone()
        if row is None:
            raise KeyError(job_id)
        claim_id, current = row
        if expect is not None and current not in expect:
            return False
        if current in FINAL_STATES:
            return False
        self.db.execute(
            "UPDATE jobs SET state = ?, spool_ref = COALESCE(?, spool_ref), updated_at = ?"
            " WHERE job_id = ?",
            (state, spool_ref, time.time(), job_id),
        )
        if event:
            self._queue_event(job_id, claim_id, event, message, detail)
        return True

    def record_unknown(self, job_id: str, claim_id: str, message: str) -> bool:
        """A job the server holds active that this journal has no record of (it was lost with
        its disk, or deleted): record it OUTCOME_UNKNOWN and queue that report, never print it.
        False when the journal knows the job after all."""
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO jobs (job_id, claim_id, state, updated_at) VALUES (?,?,?,?)"
                " ON CONFLICT (job_id) DO NOTHING",
                (job_id, claim_id, "OUTCOME_UNKNOWN", time.time()),
            )
            if cur.rowcount != 1:
                return False
            self._queue_event(
                job_id, claim_id, "OUTCOME_UNKNOWN", message, {"reason": "no_journal_record"}
            )
        return True

    def requeue_final_event(self, job_id: str, claim_id: str) -> str | None:
        """Report a final job's outcome again under a claim the server still holds open."""
        entry = self.job(job_id)
        if entry is None or not entry.final:
            return None
        with self._tx():
            return self._queue_event(
                job_id, claim_id, entry.state, "reported again: already final on this device", {}
            )

    def queue_event(
        self, job_id: str, event: str, message: str = "", detail: dict[str, Any] | None = None
    ) -> str:
        entry = self.job(job_id)
        if entry is None:
            raise KeyError(job_id)
        with self._tx():
            return self._queue_event(job_id, entry.claim_id, event, message, detail)

    def _queue_event(
        self,
        job_id: str,
        claim_id: str,
        event: str,
        message: str,
        detail: dict[str, Any] | None,
    ) -> str:
        event_id = str(uuid.uuid4())
        body = {
            "event_id": event_id,
            "type": event,
            "claim_id": claim_id,
            "occurred_at": _now_iso(),
            "message": message,
            "detail": detail or {},
        }
        self._queue_report(event_id, job_id, f"api/v1/device/jobs/{job_id}/events", body)
        return event_id

    def _queue_report(
        self, key: str, job_id: str | None, path: str, body: dict[str, Any], *, once: bool = False
    ) -> None:
        """The one insert into the outbox, in the caller's transaction (``once``: a report
        already queued under ``key`` is kept). Counted in :attr:`reports_queued`."""
        self.db.execute(
            "INSERT INTO outbox (key, job_id, path, body, created_at) VALUES (?,?,?,?,?)"
            + (" ON CONFLICT (key) DO NOTHING" if once else ""),
            (key, job_id, path, json.dumps(body), time.time()),
        )
        self.reports_queued += 1

    def recover(self) -> list[JobEntry]:
        """After a restart: every interrupted submission becomes OUTCOME_UNKNOWN (never retried)."""
        interrupted = self.jobs_in(SUBMITTING)
        for entry in interrupted:
            self.advance(
                entry.job_id,
                "OUTCOME_UNKNOWN",
                event="OUTCOME_UNKNOWN",
                message="the agent stopped while submitting this job to the spooler",
                detail={"reason": "interrupted_submission"},
                expect=frozenset({SUBMITTING}),
            )
        for (command_id,) in self.db.execute(
            "SELECT command_id FROM commands WHERE state = 'RUNNING'"
        ).fetchall():
            self.finish_command(
                command_id, "FAILED", {"error": "interrupted", "message": "the agent restarted"}
            )
        return interrupted

    def prune(self, older_than_days: float = 30) -> int:
        """Forget final jobs and acknowledged reports older than this (the server never hands a
        final job out again, so the memory is only needed while a replay is possible)."""
        cutoff = time.time() - older_than_days * 86400
        with self._tx():
            jobs = self.db.execute(
                "DELETE FROM jobs WHERE updated_at < ? AND state IN"
                " ('PRINTED', 'FAILED', 'OUTCOME_UNKNOWN', 'CANCELLED')",
                (cutoff,),
            ).rowcount
            self.db.execute(
                "DELETE FROM outbox WHERE acked_at IS NOT NULL AND acked_at < ?", (cutoff,)
            )
            self.db.execute(
                "DELETE FROM commands WHERE updated_at < ? AND state != 'RUNNING'", (cutoff,)
            )
        return jobs

    # -- commands ----------------------------------------------------------------------------

    def command_state(self, command_id: str) -> str | None:
        row = self.db.execute(
            "SELECT state FROM commands WHERE command_id = ?", (command_id,)
        ).fetchone()
        return row[0] if row else None

    def start_command(self, command_id: str, kind: str) -> bool:
        """True the first time a command is seen; False for a repeat (run it only once)."""
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO commands (command_id, type, state, updated_at) VALUES (?,?,?,?)"
                " ON CONFLICT (command_id) DO NOTHING",
                (command_id, kind, "RUNNING", time.time()),
            )
            return cur.rowcount == 1

    def finish_command(self, command_id: str, status: str, result: dict[str, Any]) -> None:
        with self._tx():
            self.db.execute(
                "UPDATE commands SET state = ?, updated_at = ? WHERE command_id = ?",
                (status, time.time(), command_id),
            )
            self._queue_report(
                f"command:{command_id}",
                None,
                f"api/v1/device/commands/{command_id}/result",
                {"status": status, "result": result},
                once=True,
            )

    # -- outbox ------------------------------------------------------------------------------

    def pending(self, limit: int = 100) -> list[Report]:
        rows = self.db.execute(
            "SELECT seq, key, job_id, path, body FROM outbox WHERE acked_at IS NULL"
            " ORDER BY seq LIMIT ?",
            (limit,),
        ).fetchall()
        return [Report(seq, key, job, path, json.loads(body)) for seq, key, job, path, body in rows]

    def has_pending(self, job_id: str | None = None) -> bool:
        if job_id is None:
            sql, args = "SELECT 1 FROM outbox WHERE acked_at IS NULL LIMIT 1", ()
        else:
            sql = "SELECT 1 FROM outbox WHERE acked_at IS NULL AND job_id = ? LIMIT 1"
            args = (job_id,)
        return self.db.execute(sql, args).fetchone() is not None

    def acknowledge(self, seq: int, outcome: str) -> None:
        """Record the server's answer to report ``seq`` (:meth:`acknowledge_all`)."""
        self.acknowledge_all([(seq, outcome)])

    def acknowledge_all(self, answers: Sequence[tuple[int, str]]) -> None:
        """Record the server's answers, ``(seq, outcome)`` each, in one commit.

        Not ``synchronous=FULL``: an acknowledgement guards no act. One lost with the machine's
        power (the process's own crash loses nothing in WAL mode) only sends that report again,
        which the server answers as the replay it is; the next FULL commit syncs it anyway. A
        commit that fails records none of them, and counts each in :attr:`reports_queued`: their
        reports are to send again."""
        acked_at = time.time()
        try:
            with self._tx(durable=False):
                self.db.executemany(
                    "UPDATE outbox SET acked_at = ?, outcome = ? WHERE seq = ?",
                    [(acked_at, outcome, seq) for seq, outcome in answers],
                )
        except BaseException:
            self.reports_queued += len(answers)
            raise

    def outcome(self, key: str) -> tuple[bool, str | None]:
        """(acknowledged, outcome) of one report: ``ok`` or ``<status>:<error code>``."""
        row = self.db.execute(
            "SELECT acked_at IS NOT NULL, outcome FROM outbox WHERE key = ?", (key,)
        ).fetchone()
        return (bool(row[0]), row[1]) if row else (False, None)

    def received_refused(self, job_id: str) -> bool:
        """Whether the server refused the job's RECEIVED report (it is not this device's)."""
        return any(
            kind == "RECEIVED" and outcome not in (None, "ok")
            for kind, outcome in self.outcomes(job_id)
        )

    def outcomes(self, job_id: str) -> list[tuple[str, str | None]]:
        """(event type, outcome) of a job's reports, oldest first: for logs and tests."""
        rows = self.db.execute(
            "SELECT body, outcome FROM outbox WHERE job_id = ? ORDER BY seq", (job_id,)
        ).fetchall()
        return [(json.loads(body)["type"], outcome) for body, outcome in rows]

    # -- plumbing ----------------------------------------------------------------------------

    def _tx(self, durable: bool = True) -> "_Transaction":
        return _Transaction(self.db, durable)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT; with synchronous=FULL the commit is on disk when it returns.

    ``durable=False`` commits with ``synchronous=NORMAL`` (WAL: safe from the process's crash,
    on disk at the next FULL commit or checkpoint), for writes that guard no act."""

    def __init__(self, db: sqlite3.Connection, durable: bool = True):
        self.db = db
        self.durable = durable

    def __enter__(self) -> None:
        if not self.durable:
            self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            if not self.durable:
                self.db.execute("PRAGMA synchronous=FULL")
