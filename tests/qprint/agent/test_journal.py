"""The journal's guarantees: what is final or was being submitted is never submitted again, and
every report survives a restart with its event id."""

from qprint.agent.journal import Journal


def test_interrupted_submission_becomes_outcome_unknown_after_restart(tmp_path):
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    journal.remember_claim("job-1", "claim-1")
    journal.advance("job-1", "RECEIVED", event="RECEIVED")
    journal.advance("job-1", "SUBMITTING")
    journal.close()  # the process dies while the spooler has the document

    journal = Journal(path)
    interrupted = journal.recover()
    assert [e.job_id for e in interrupted] == ["job-1"]
    entry = journal.job("job-1")
    assert entry.state == "OUTCOME_UNKNOWN" and entry.final and not entry.may_submit
    types = [r.body["type"] for r in journal.pending()]
    assert types == ["RECEIVED", "OUTCOME_UNKNOWN"]
    assert journal.pending()[-1].body["detail"] == {"reason": "interrupted_submission"}


def test_final_job_never_moves_again(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    journal.remember_claim("job-1", "claim-1")
    assert journal.advance("job-1", "PRINTED", event="PRINTED")
    assert not journal.advance("job-1", "SUBMITTING")
    assert not journal.advance("job-1", "CANCELLED", event="CANCELLED")
    journal.remember_claim("job-1", "claim-2")  # a replayed assignment changes nothing
    entry = journal.job("job-1")
    assert (entry.state, entry.claim_id) == ("PRINTED", "claim-1")


def test_pending_reports_survive_restart_with_the_same_event_ids(tmp_path):
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    journal.remember_claim("job-1", "claim-1")
    received = journal.queue_event("job-1", "RECEIVED")
    journal.finish_command("cmd-1", "DONE", {"printers": []})
    first = journal.pending()
    journal.acknowledge(first[0].seq, "ok")
    journal.close()

    journal = Journal(path)
    pending = journal.pending()
    assert [r.key for r in pending] == ["command:cmd-1"]
    assert journal.outcome(received) == (True, "ok")
    assert pending[0].path == "api/v1/device/commands/cmd-1/result"


def test_a_command_runs_once_and_an_interrupted_one_is_reported_failed(tmp_path):
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    assert journal.start_command("cmd-1", "PRINT_TEST_PAGE")
    assert not journal.start_command("cmd-1", "PRINT_TEST_PAGE")
    journal.close()
    journal = Journal(path)
    journal.recover()
    assert journal.command_state("cmd-1") == "FAILED"
    assert journal.pending()[0].body == {
        "status": "FAILED",
        "result": {"error": "interrupted", "message": "the agent restarted"},
    }


def test_journal_is_durable_full_sync(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    assert journal.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_an_assignment_is_recorded_without_an_fsync_and_received_with_one(tmp_path):
    """The claim's record guards no act: only RECEIVED, before the document is spooled, must be
    on disk when its commit returns (docs/AGENT.md, "The journal")."""
    journal = Journal(tmp_path / "j.sqlite3")
    writes = []
    journal.db.set_trace_callback(
        lambda sql: (
            writes.append(sql.split()[0] + " " + sql.split()[1])
            if sql.startswith(("PRAGMA synchronous=", "INSERT INTO jobs", "UPDATE jobs"))
            else None
        )
    )
    journal.remember_claim("job-1", "claim-1")
    journal.advance("job-1", "RECEIVED", event="RECEIVED")
    assert writes == [
        "PRAGMA synchronous=NORMAL",
        "INSERT INTO",
        "PRAGMA synchronous=FULL",
        "UPDATE jobs",
    ]
    assert journal.job("job-1").state == "RECEIVED"
    reopened = Journal(tmp_path / "j.sqlite3")  # the process's crash loses neither
    assert reopened.job("job-1").state == "RECEIVED"


def test_prune_forgets_old_final_jobs_but_never_unfinished_ones(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    journal.remember_claim("old-final", "c1")
    journal.advance("old-final", "PRINTED", event="PRINTED")
    journal.remember_claim("old-open", "c2")
    journal.advance("old-open", "SUBMITTING")
    journal.acknowledge(journal.pending()[0].seq, "ok")
    journal.db.execute("UPDATE jobs SET updated_at = 0")
    journal.db.execute("UPDATE outbox SET acked_at = 1")

    assert journal.prune(older_than_days=30) == 1
    assert journal.job("old-final") is None
    assert journal.job("old-open").state == "SUBMITTING"
    assert journal.pending() == []


def test_an_acknowledgement_and_only_it_skips_the_fsync(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    journal.remember_claim("job-1", "claim-1")
    received = journal.queue_event("job-1", "RECEIVED")
    spooled = journal.queue_event("job-1", "SPOOLED")
    syncs = []
    journal.db.set_trace_callback(
        lambda sql: syncs.append(sql) if sql.startswith("PRAGMA synchronous=") else None
    )
    first, following = journal.pending()
    assert (first.key, following.key) == (received, spooled)
    journal.acknowledge(first.seq, "ok")
    assert [report.key for report in journal.pending()] == [spooled]
    journal.acknowledge(following.seq, "ok")
    assert journal.pending() == []
    # Each acknowledgement commits with synchronous=NORMAL and puts FULL back at once.
    assert syncs == ["PRAGMA synchronous=NORMAL", "PRAGMA synchronous=FULL"] * 2
    assert journal.db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    journal.advance("job-1", "RECEIVED", event="RECEIVED")
    assert syncs[-1] == "PRAGMA synchronous=FULL"  # no guarding write ran under NORMAL
    assert journal.outcome(received) == (True, "ok")


def submitting(tmp_path) -> Journal:
    journal = Journal(tmp_path / "j.sqlite3")
    journal.remember_claim("job-1", "claim-1")
    journal.advance("job-1", "RECEIVED", event="RECEIVED")
    journal.advance("job-1", "SUBMITTING", expect=frozenset({"RECEIVED"}))
    return journal


def test_a_submission_that_ended_the_job_is_journaled_spooled_and_printed_in_one_commit(tmp_path):
    """A file written or bytes handed to a raw printer: SPOOLED (with its reference) and PRINTED
    in one durable commit, their reports queued in that order, both there after a restart."""
    journal = submitting(tmp_path)
    commits = []
    journal.db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    assert journal.spooled("job-1", "out/job-1.pdf", ("PRINTED", "written"))
    assert len(commits) == 1
    assert journal.db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL: on disk
    reopened = Journal(tmp_path / "j.sqlite3")
    entry = reopened.job("job-1")
    assert (entry.state, entry.spool_ref) == ("PRINTED", "out/job-1.pdf")
    reports = [r.body for r in reopened.pending()][1:]  # after RECEIVED's
    assert [(r["type"], r.get("message", "")) for r in reports] == [
        ("SPOOLED", ""),
        ("PRINTED", "written"),
    ]
    assert reports[0]["detail"] == {"spool_ref": "out/job-1.pdf"}


def test_a_spooler_holding_the_job_leaves_it_spooled_and_a_job_not_submitting_is_not_moved(
    tmp_path,
):
    journal = submitting(tmp_path)
    assert journal.spooled("job-1", "cups:42")
    assert journal.job("job-1").state == "SPOOLED"
    assert [r.body["type"] for r in journal.pending()] == ["RECEIVED", "SPOOLED"]
    # Not SUBMITTING (here SPOOLED already): nothing moves, nothing is queued.
    assert not journal.spooled("job-1", "cups:43", ("PRINTED", ""))
    entry = journal.job("job-1")
    assert (entry.state, entry.spool_ref) == ("SPOOLED", "cups:42")
    assert [r.body["type"] for r in journal.pending()] == ["RECEIVED", "SPOOLED"]


def test_an_assignment_whose_document_came_inline_is_recorded_received_in_one_durable_commit(
    tmp_path,
):
    """Nothing to download: the record and RECEIVED (with its report) in one commit, with the
    fsync RECEIVED needs; a replay of a job past CLAIMED moves nothing and queues nothing."""
    journal = Journal(tmp_path / "j.sqlite3")
    trace = []
    journal.db.set_trace_callback(
        lambda sql: trace.append(sql) if sql == "COMMIT" or sql.startswith("PRAGMA") else None
    )
    entry = journal.remember_claim("job-1", "claim-1", "t", {"job_id": "job-1"}, received=True)
    assert (entry.state, entry.claim_id) == ("RECEIVED", "claim-1")
    assert trace == ["COMMIT"]  # one commit, and never under synchronous=NORMAL
    assert [(r.body["type"], r.body["claim_id"]) for r in journal.pending()] == [
        ("RECEIVED", "claim-1")
    ]
    assert Journal(tmp_path / "j.sqlite3").job("job-1").state == "RECEIVED"

    journal.advance("job-1", "SUBMITTING", expect=frozenset({"RECEIVED"}))
    again = journal.remember_claim("job-1", "claim-2", received=True)
    assert (again.state, again.claim_id) == ("SUBMITTING", "claim-1")
    assert [r.body["type"] for r in journal.pending()] == ["RECEIVED"]
