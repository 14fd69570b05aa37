"""The PostgreSQL floor of a print job: INSERT + NOTIFY, a listening worker claims it with
``FOR UPDATE SKIP LOCKED`` and marks it printed. Three commits, no HTTP, no Django.

Runs on the benchmark's database in a table of its own (``bench_floor_job``); latencies are
``printed_at - submitted_at``, both ``clock_timestamp()`` of the database.
"""

from __future__ import annotations

import threading
import time

import psycopg

SCHEMA = """
DROP TABLE IF EXISTS bench_floor_job;
CREATE TABLE bench_floor_job (
    id bigserial PRIMARY KEY,
    status text NOT NULL DEFAULT 'QUEUED',
    submitted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    printed_at timestamptz
);
"""


def _worker(url: str, stop: threading.Event) -> None:
    with psycopg.connect(url, autocommit=True) as listen, psycopg.connect(url) as work:
        listen.execute("LISTEN bench_floor")
        notifies = listen.notifies(timeout=0.2)
        while not stop.is_set():
            for _ in notifies:
                break
            else:
                notifies = listen.notifies(timeout=0.2)
            while True:  # claim until nothing is left
                with work.transaction():
                    row = work.execute(
                        "SELECT id FROM bench_floor_job WHERE status = 'QUEUED' "
                        "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
                    ).fetchone()
                    if row is None:
                        break
                    work.execute("UPDATE bench_floor_job SET status = 'CLAIMED' WHERE id = %s", row)
                with work.transaction():
                    work.execute(
                        "UPDATE bench_floor_job SET status = 'PRINTED', "
                        "printed_at = clock_timestamp() WHERE id = %s",
                        row,
                    )
            notifies = listen.notifies(timeout=0.2)


def run(url: str, jobs: int, rate: float | None, workers: int = 2) -> dict:
    """Submit ``jobs`` (``rate`` per second, or as fast as one client can when None)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    stop = threading.Event()
    threads = [
        threading.Thread(target=_worker, args=(url, stop), daemon=True) for _ in range(workers)
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the workers are listening
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        for i in range(jobs):
            if rate:
                pause = started + i / rate - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            with conn.transaction():
                conn.execute("INSERT INTO bench_floor_job DEFAULT VALUES")
                conn.execute("NOTIFY bench_floor")
    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while conn.execute(
            "SELECT count(*) FROM bench_floor_job WHERE status <> 'PRINTED'"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "the floor's workers did not finish"
            time.sleep(0.05)
        latencies = [
            r[0]
            for r in conn.execute(
                "SELECT extract(epoch FROM printed_at - submitted_at) * 1000 FROM bench_floor_job"
            )
        ]
        span = conn.execute(
            "SELECT extract(epoch FROM max(printed_at) - min(submitted_at)) FROM bench_floor_job"
        ).fetchone()[0]
    stop.set()
    for t in threads:
        t.join(5)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE bench_floor_job")
    return {"latencies_ms": [float(v) for v in latencies], "jobs_per_s": jobs / float(span)}
