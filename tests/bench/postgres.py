"""A PostgreSQL server of the benchmark's own, with ``pg_stat_statements``.

The end-to-end benchmark runs its nodes on this server (not the shared one the test suites use)
so that (1) every PostgreSQL process counted for CPU per job is the benchmark's own: the server's
process tree, background writer and WAL writer included, and none of another suite's backends;
(2) ``pg_stat_statements`` can be loaded (``shared_preload_libraries`` needs a server start) to
give calls, total and mean time per statement per job. The server's settings are PostgreSQL 15's
defaults, as on the shared server (fsync and synchronous_commit on), plus what the nodes need
(``max_connections`` for two nodes' pools and the benchmark) and ``track_wal_io_timing`` (the
time of the write-ahead log's fsyncs in ``pg_stat_wal``: two clock reads per write and fsync).

``./dev bench`` starts it before the benchmarks (``python -m tests.bench.postgres start`` prints
``DATABASE_URL`` and ``BENCH_PG_DIR`` for the shell) and stops it after (``... stop``); the
benchmarks' test database is then made on it (``pg_stat_statements`` is created in
``template1``, so every database made there has it). ``BENCH_PG_PORT`` picks the port (default
5439). initdb refuses to run as root: the server runs as the ``postgres`` user then.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.machine import process_tree
from tests.processes import port_open

BIN = Path(os.environ.get("BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
PORT = int(os.environ.get("BENCH_PG_PORT", "5439"))


#: The server's fsyncs of its write-ahead log so far and their time in ms (0 unless
#: ``track_wal_io_timing`` is on). A session hands its counts over when it goes idle, at most once
#: a second, and when it ends: a reading misses at most the last second's of the sessions still
#: busy.
WAL_FSYNCS = "SELECT wal_sync, wal_sync_time FROM pg_stat_wal"


def _as_postgres() -> dict:
    """subprocess arguments running a command as the postgres user when we are root."""
    if os.geteuid() != 0:
        return {}
    user = pwd.getpwnam("postgres")

    def demote() -> None:
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return {"preexec_fn": demote}


class PrivatePostgres:
    def __init__(self, port: int = PORT, directory: Path | None = None) -> None:
        self.port = port
        self.dir = directory or Path(tempfile.mkdtemp(prefix="qprint-bench-pg-"))
        self.data = self.dir / "data"
        self.started = directory is not None

    @classmethod
    def from_env(cls) -> PrivatePostgres | None:
        """The server ``./dev bench`` started (``BENCH_PG_DIR``), or None (the shared one)."""
        directory = os.environ.get("BENCH_PG_DIR")
        if not directory or not (Path(directory) / "data" / "postmaster.pid").exists():
            return None
        return cls(int(os.environ.get("BENCH_PG_PORT", PORT)), Path(directory))

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/bench"

    def start(self) -> PrivatePostgres:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        kw = _as_postgres()
        subprocess.run(
            [BIN / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True, capture_output=True, **kw,
        )  # fmt: skip
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories="
            f"{self.dir} -c max_connections=200 -c shared_preload_libraries=pg_stat_statements "
            "-c pg_stat_statements.track=all -c pg_stat_statements.max=2000 "
            "-c pg_stat_statements.track_planning=on -c track_wal_io_timing=on"
        )
        subprocess.run(
            [BIN / "pg_ctl", "-D", self.data, "-l", self.dir / "log", "-o", options, "-w",
             "-t", "60", "start"],
            check=True, capture_output=True, **kw,
        )  # fmt: skip
        self.started = True
        for database in ("template1", "postgres"):
            self.sql("CREATE EXTENSION pg_stat_statements", database=database)
        self.sql("CREATE DATABASE bench", database="postgres")
        return self

    def stop(self) -> None:
        if self.started:
            subprocess.run(
                [BIN / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"],
                capture_output=True, **_as_postgres(),
            )  # fmt: skip
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def sql(self, statement: str, database: str = "bench") -> list[tuple]:
        import psycopg

        with psycopg.connect(
            f"postgres://postgres@127.0.0.1:{self.port}/{database}", autocommit=True
        ) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def pids(self) -> set[int]:
        """The server and every process it runs (backends, writers, checkpointer)."""
        return process_tree(self.postmaster_pid())

    # -- pg_stat_statements ----------------------------------------------------------------------

    def reset_statements(self) -> None:
        self.sql("SELECT pg_stat_statements_reset()", database="postgres")

    def counters(self, database: str) -> dict[str, int]:
        """What the server counted so far that a phase's figures are read against: the sessions
        opened on ``database`` (each a backend started, and every statement it prepares planned
        again on it), the automatic ANALYZEs of its tables (each makes every connection plan
        the statements reading that table again), and the server's fsyncs of its write-ahead log
        with the time they took (``pg_stat_wal``, timed with ``track_wal_io_timing``: a commit
        waits for its fsync, so a disk that stalls shows here as a phase's sync time). The
        sessions are read first; the reading then opens one session of its own on ``database``,
        which :func:`counted` takes off."""
        [(sessions,)] = self.sql(
            f"SELECT sessions FROM pg_stat_database WHERE datname = '{database}'",
            database="postgres",
        )
        [(analyzes,)] = self.sql(
            "SELECT coalesce(sum(autoanalyze_count), 0) FROM pg_stat_user_tables",
            database=database,
        )
        [(syncs, sync_ms)] = self.sql(WAL_FSYNCS, database="postgres")
        return {
            "sessions": int(sessions or 0),
            "autoanalyzes": int(analyzes),
            "wal_syncs": int(syncs),
            "wal_sync_ms": float(sync_ms),
        }

    def statements(self, database: str, jobs: int, top: int = 15) -> list[dict]:
        """The statements on ``database`` since the last reset, most total time first: calls,
        total and mean time per call (execution), per job, how often each was planned and the
        time planning took per job (a statement PostgreSQL plans at every call costs that on top
        of its execution), and the write-ahead log they wrote per job (records and bytes: what a
        job's writes cost PostgreSQL, whatever else the machine does)."""
        rows = self.sql(
            f"""
            SELECT s.query, s.calls, s.total_exec_time, s.mean_exec_time, s.rows,
                   s.wal_records, s.wal_bytes, s.plans, s.total_plan_time
            FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
            WHERE d.datname = '{database}'
            ORDER BY s.total_exec_time + s.total_plan_time DESC
            """,
            database="postgres",
        )
        out = []
        for query, calls, total, mean, nrows, wal_records, wal_bytes, plans, plan in rows[:top]:
            out.append(
                {
                    "statement": " ".join(query.split())[:160],
                    "calls_per_job": round(calls / jobs, 2),
                    "ms_per_job": round(total / jobs, 3),
                    "mean_ms": round(mean, 3),
                    "rows_per_call": round(nrows / calls, 2) if calls else 0,
                    "wal_records_per_job": round(wal_records / jobs, 2),
                    "wal_bytes_per_job": round(int(wal_bytes) / jobs),
                    "plans_per_job": round(plans / jobs, 2),
                    "plan_ms_per_job": round(plan / jobs, 3),
                }
            )
        total_calls = sum(r[1] for r in rows)
        total_ms = sum(r[2] for r in rows)
        out.append(
            {
                "statement": "(all statements)",
                "calls_per_job": round(total_calls / jobs, 2),
                "ms_per_job": round(total_ms / jobs, 3),
                "mean_ms": round(total_ms / total_calls, 3) if total_calls else 0,
                "rows_per_call": None,
                "wal_records_per_job": round(sum(r[5] for r in rows) / jobs, 2),
                "wal_bytes_per_job": round(sum(int(r[6]) for r in rows) / jobs),
                "plans_per_job": round(sum(r[7] for r in rows) / jobs, 2),
                "plan_ms_per_job": round(sum(r[8] for r in rows) / jobs, 3),
            }
        )
        return out


def counted(before: dict, after: dict, jobs: int) -> dict:
    """What :meth:`PrivatePostgres.counters` counted between two readings (the first reading's
    own session taken off), the write-ahead log's fsyncs per job and their mean time."""
    syncs = after["wal_syncs"] - before["wal_syncs"]
    sync_ms = after["wal_sync_ms"] - before["wal_sync_ms"]
    return {
        "sessions_opened": max(after["sessions"] - before["sessions"] - 1, 0),
        "autoanalyzes": after["autoanalyzes"] - before["autoanalyzes"],
        "wal_syncs_per_job": round(syncs / jobs, 2) if jobs else 0.0,
        "wal_sync_ms_per_job": round(sync_ms / jobs, 3) if jobs else 0.0,
        "wal_sync_mean_ms": round(sync_ms / syncs, 3) if syncs else 0.0,
    }


def wait_gone(pids: set[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def main(argv: list[str]) -> int:
    """``start``: print ``export`` lines for the shell; ``stop``: stop ``BENCH_PG_DIR``'s."""
    if argv[:1] == ["start"]:
        if port_open(PORT):
            print(
                f"port {PORT} is taken (a benchmark PostgreSQL left running? stop it with "
                "pg_ctl ... stop as the postgres user, or set BENCH_PG_PORT)",
                file=sys.stderr,
            )
            return 1
        pg = PrivatePostgres().start()
        print(f"export BENCH_PG_DIR={pg.dir} BENCH_PG_PORT={pg.port}")
        print(f"export DATABASE_URL=postgres://postgres@127.0.0.1:{pg.port}/bench")
        return 0
    if argv[:1] == ["stop"]:
        pg = PrivatePostgres.from_env()
        if pg is not None:
            pg.stop()
        return 0
    print("usage: python -m tests.bench.postgres start|stop")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
