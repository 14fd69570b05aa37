"""The benchmarks' CPU meter tells a PostgreSQL server's sessions from the processes it runs for
itself, and their reading of the server's WAL fsyncs counts a phase's commits, on a real server
(the one the suite runs on, on this machine)."""

import os
from pathlib import Path

import psycopg
import pytest

from tests.bench.machine import CpuMeter, postgresql_part
from tests.bench.postgres import WAL_FSYNCS, counted
from tests.waiting import wait_until

pytestmark = pytest.mark.services


def _server_processes(services) -> dict[int, str]:
    """Every process of the suite's PostgreSQL server now, with its ``backend_type``."""
    with psycopg.connect(services.database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT pid, backend_type FROM pg_stat_activity").fetchall()
    return dict(rows)


def _ended(pid: int) -> bool:
    """Gone, or exited and not yet reaped by the server: an exited process's command line is
    empty, and its title no longer says what it was (another test's session, closing)."""
    try:
        return not Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def test_each_process_of_the_server_is_a_session_or_the_servers_own(services):
    with psycopg.connect(services.database_url, autocommit=True) as session:
        own = session.execute("SELECT pg_backend_pid()").fetchone()[0]
        processes = _server_processes(services)
        if not os.path.exists(f"/proc/{own}"):
            pytest.skip("the suite's PostgreSQL server runs on another machine")
        assert postgresql_part(own) == "backends"
    kinds = set(processes.values())
    assert {"client backend", "walwriter", "checkpointer"} <= kinds, kinds
    for pid, kind in processes.items():
        part = postgresql_part(pid)
        if _ended(pid):
            continue  # a session or a worker that ended meanwhile
        expected = "backends" if kind in ("client backend", "parallel worker") else "background"
        assert part == expected, (pid, kind)


def test_the_parts_of_a_kind_add_up_to_the_kind(services):
    with psycopg.connect(services.database_url, autocommit=True) as session:
        if not os.path.exists(f"/proc/{session.info.backend_pid}"):
            pytest.skip("the suite's PostgreSQL server runs on another machine")
        pids = set(_server_processes(services))
        meter = CpuMeter({"postgresql": lambda: pids}, parts={"postgresql": postgresql_part})
        before = meter.parts("postgresql")
        # Work for the session (its backend) to do: a few hundred milliseconds of CPU.
        session.execute("SELECT count(*) FROM generate_series(1, 5000000)").fetchone()
        after = meter.parts("postgresql")
    assert set(after) == {"backends", "background"}
    assert after["backends"] - before["backends"] >= 0.05
    # The same sample: a background process of the server may tick between two.
    assert sum(after.values()) == pytest.approx(meter.reading(sample=False)["postgresql"])


def test_each_commit_that_wrote_is_an_fsync_of_the_write_ahead_log(services):
    def reading() -> dict:
        with psycopg.connect(services.database_url, autocommit=True) as conn:
            syncs, sync_ms = conn.execute(WAL_FSYNCS).fetchone()
        return {"sessions": 0, "autoanalyzes": 0, "wal_syncs": syncs, "wal_sync_ms": sync_ms}

    before = reading()
    with psycopg.connect(services.database_url, autocommit=True) as session:
        if session.execute("SHOW fsync").fetchone()[0] != "on":
            pytest.skip("the suite's PostgreSQL runs with fsync off")
        for _ in range(5):  # five transactions that write, each committed on its own
            session.execute("SELECT pg_logical_emit_message(true, 'qprint-bench', 'commit')")

    def counted_all() -> dict | None:  # the ended session hands its counts over as it exits
        now = reading()
        return now if now["wal_syncs"] - before["wal_syncs"] >= 5 else None

    after = wait_until(counted_all, 10, message="an fsync counted for each of five commits")
    figures = counted(before, after, jobs=5)
    assert figures["wal_syncs_per_job"] >= 1, figures  # the walwriter's may come on top
    syncs = after["wal_syncs"] - before["wal_syncs"]
    assert figures["wal_sync_mean_ms"] == round(
        (after["wal_sync_ms"] - before["wal_sync_ms"]) / syncs, 3
    )
