"""Each device's journal runs on a thread of its own: a commit that hangs (a disk that stopped
answering) holds up only that device, never the event loop the devices of one process share,
and the device does nothing its journal write has not committed yet."""

import asyncio
import threading

from qprint.agent import journal as j
from qprint.agent.config import AgentConfig, DeviceConfig, journal_path
from qprint.agent.journal_thread import AsyncJournal
from qprint.agent.simulator import Fleet
from tests.waiting import eventually

PDF = b"%PDF-1.4\n% a document\n"


class StuckCommits:
    """While armed, every commit to one journal file waits until the test releases it."""

    def __init__(self, path, monkeypatch):
        self.path = path
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.gave_up = False  # the commit waited its whole bound: the loop was stalled meanwhile
        real_tx = j.Journal._tx
        gate = self

        class SlowCommit:
            def __init__(self, tx):
                self.tx = tx

            def __enter__(self):
                self.tx.__enter__()

            def __exit__(self, exc_type, exc, tb):
                if exc_type is None:
                    gate.entered.set()
                    gate.gave_up = gate.gave_up or not gate.release.wait(20)
                self.tx.__exit__(exc_type, exc, tb)

        def tx(journal, durable=True):
            if gate.armed and journal.path == gate.path:
                return SlowCommit(real_tx(journal, durable))
            return real_tx(journal, durable)

        monkeypatch.setattr(j.Journal, "_tx", tx)


async def test_a_hanging_journal_commit_of_one_device_does_not_stall_another_device(
    server, spooler, tmp_path, monkeypatch
):
    slow, other = server.add_device(), server.add_device()
    state = tmp_path / "state"
    stuck = StuckCommits(journal_path(state, "slow"), monkeypatch)
    config = AgentConfig(
        urls=[server.base_url],
        devices=[
            DeviceConfig("slow", slow.token, journal_path(state, "slow")),
            DeviceConfig("other", other.token, journal_path(state, "other")),
        ],
        backoff_initial=0.05,
        backoff_max=0.2,
        shutdown_grace=5,
    )
    fleet = Fleet(config, spooler)  # one process, one event loop, two devices
    run = asyncio.create_task(fleet.run())
    try:
        await eventually(lambda: slow.ready and other.ready, message="both devices ready")
        stuck.armed = True
        held = server.add_job(slow, PDF)
        await server.send(slow, {"type": "wake"})
        await eventually(stuck.entered.is_set, message="the slow device's claim being journaled")

        job = server.add_job(other, PDF)
        await server.send(other, {"type": "wake"})
        await eventually(lambda: job.status == "PRINTED", message="the other device printed")
        assert not stuck.release.is_set() and not stuck.gave_up
        assert held.status == "CLAIMED"
        assert held.id not in spooler.submitted  # nothing done before its journal write commits
    finally:
        stuck.release.set()
    try:
        await eventually(lambda: held.status == "PRINTED", message="the slow device caught up")
        assert not stuck.gave_up
        assert sorted(spooler.submitted) == sorted([held.id, job.id])
    finally:
        fleet.request_stop()
        assert await asyncio.wait_for(run, 10) == 0


async def test_the_journal_runs_on_one_thread_of_its_own_in_call_order(tmp_path):
    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    threads = set()
    real = journal._journal.advance

    def advance(*args, **kwargs):
        threads.add(threading.current_thread())
        return real(*args, **kwargs)

    journal._journal.advance = advance
    await journal.remember_claim("job-1", "claim-1")
    moves = [
        journal.advance("job-1", j.RECEIVED, event="RECEIVED"),
        journal.advance("job-1", j.SUBMITTING),
        journal.advance("job-1", j.SPOOLED, event="SPOOLED", spool_ref="ref-1"),
        journal.advance("job-1", "PRINTED", event="PRINTED"),
    ]
    assert await asyncio.gather(*moves) == [True, True, True, True]
    assert threads != {threading.current_thread()} and len(threads) == 1
    assert [r.body["type"] for r in await journal.pending()] == ["RECEIVED", "SPOOLED", "PRINTED"]
    assert (await journal.job("job-1")).state == "PRINTED"
    await journal.close()


async def _one_report(journal: AsyncJournal) -> j.Report:
    await journal.remember_claim("job-1", "claim-1")
    await journal.advance("job-1", j.RECEIVED, event="RECEIVED")
    [report] = await journal.pending()
    return report


async def test_an_acknowledgement_returns_at_once_and_every_later_call_sees_it(tmp_path):
    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    report = await _one_report(journal)
    held, running = threading.Event(), threading.Event()

    def hold() -> None:
        running.set()
        assert held.wait(10)

    busy = journal._thread.submit(hold)  # the journal's thread busy with an earlier call
    try:
        assert running.wait(10)
        journal.acknowledge(report.seq, "409:stale_claim")  # queued, not awaited: no await here
        later = asyncio.gather(journal.pending(), journal.submitting("job-1"))
    finally:
        held.set()
    busy.result(10)
    assert await later == [[], (False, j.RECEIVED)]  # a refused RECEIVED: never submitted
    assert (await journal.job("job-1")).state == "CANCELLED"
    await journal.close()


async def test_an_acknowledgement_the_journal_does_not_record_is_logged_and_sent_again(
    tmp_path, caplog
):
    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    report = await _one_report(journal)

    def fails(answers) -> None:
        raise j.sqlite3.OperationalError("disk I/O error")

    journal._journal.acknowledge_all = fails
    with caplog.at_level("ERROR", logger="qprint.agent"):
        journal.acknowledge(report.seq, "ok")
        await eventually(
            lambda: "acknowledgement_not_recorded" in caplog.text, message="the failure logged"
        )
    assert "disk I/O error" in caplog.text
    assert [r.seq for r in await journal.pending()] == [report.seq]  # the next flush sends it
    await journal.close()


async def _three_reports(journal: AsyncJournal) -> list[j.Report]:
    await journal.remember_claim("job-1", "claim-1")
    for state, event in ((j.RECEIVED, "RECEIVED"), (j.SPOOLED, "SPOOLED"), ("PRINTED", "PRINTED")):
        await journal.advance("job-1", state, event=event)
    return await journal.pending()


def _recorded_answers(journal: AsyncJournal) -> list[list[tuple[int, str]]]:
    """The answers of each commit of acknowledgements the journal makes from now on."""
    commits = []
    real = journal._journal.acknowledge_all

    def acknowledge_all(answers):
        commits.append(list(answers))
        real(answers)

    journal._journal.acknowledge_all = acknowledge_all
    return commits


async def test_answers_given_while_the_thread_is_busy_are_recorded_in_one_commit(tmp_path):
    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    reports = await _three_reports(journal)
    queued = journal.reports_queued
    commits = _recorded_answers(journal)
    held, running = threading.Event(), threading.Event()

    def hold() -> None:
        running.set()
        assert held.wait(10)

    busy = journal._thread.submit(hold)
    try:
        assert running.wait(10)
        for report in reports:
            journal.acknowledge(report.seq, "ok")
        later = journal.pending()
    finally:
        held.set()
    busy.result(10)
    assert await later == []  # the call made after them sees all three
    assert commits == [[(r.seq, "ok") for r in reports]]
    assert journal.reports_queued == queued  # none to send again
    await journal.close()


async def test_an_answer_given_while_earlier_ones_are_being_recorded_is_recorded_after_them(
    tmp_path,
):
    journal = AsyncJournal(tmp_path / "dev.journal.sqlite3", "dev")
    first, second, third = await _three_reports(journal)
    commits = _recorded_answers(journal)
    recording = journal._journal.acknowledge_all
    entered, release = threading.Event(), threading.Event()

    def slow(answers):
        if not entered.is_set():
            entered.set()  # the first commit has taken its answers, and waits
            assert release.wait(10)
        recording(answers)

    journal._journal.acknowledge_all = slow
    journal.acknowledge(first.seq, "ok")
    assert entered.wait(10)
    journal.acknowledge(second.seq, "409:stale_claim")
    release.set()
    assert [r.seq for r in await journal.pending()] == [third.seq]
    assert commits == [[(first.seq, "ok")], [(second.seq, "409:stale_claim")]]
    await journal.close()
