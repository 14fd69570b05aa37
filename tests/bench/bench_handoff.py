"""What one database call costs a node before its statement (benchmark 15 of
docs/PERFORMANCE.md): :mod:`tests.bench.handoff`, run in a process of the example project's own
(its pool, its prepared statements), on the benchmark's PostgreSQL.

The ways of making a call are measured in interleaved rounds in one process, so the ratios hold
whatever else the machine does: the bare hand-off to a thread and back, the node's database
threads around a function that does nothing, the same around ``SELECT 1``, ``SELECT 1`` on
the loop's own thread with a connection of its own (the floor: the statement alone), the same
awaited on psycopg's async connection, alone and through psycopg_pool's async pool (what a
statement run on the loop would cost), the agent's journal read through the same hand-off, and
a device socket's read loop taking a client message to its handler (Channels' loop and the
mailbox).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.bench.conftest import size
from tests.processes import REPO_ROOT

pytestmark = [pytest.mark.services, pytest.mark.slow]

CALLS = size(20000, 4000)


def test_database_call_handoff(subprocess_env, bench_result):
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.handoff", str(CALLS)],
        env=subprocess_env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["pooled"], "the example project's pool was not in use"
    bench_result["figures"] = figures
    print(figures)
