"""A pushed job's cost in one process, on each side of the socket: the figures that compare two
versions of the code whatever else the machine does.

``tests.bench.node_job`` (the node's side: the submission by ``submit_job``, the wakeup, the claim
and the push, three events as frames, on ``DATABASE_URL``'s PostgreSQL),
``tests.bench.agent_job`` (the agent's side: the assignment to the last acknowledgement, its
journal on disk, the null printer), ``tests.bench.wakeup_job`` (a wakeup from one node to
another through ``REDIS_URL``'s Redis, which ``node_job`` leaves out: with hiredis parsing, as
installed, and with redis-py's own parser, side by side) and ``tests.bench.daphne_job`` (a node
as deployed, Daphne and the HTTP submission in the count: counted only), each in a process of
its own:

- instructions per job, counted by ``valgrind --tool=callgrind`` (the counts run at once:
  a count does not depend on the other work of the machine);
- CPU per job of the same process without valgrind, one after the other (this figure moves with
  the machine, as every timed one does; the two wakeup sides alternated in rounds, the median
  of each kept).

Without valgrind the benchmark is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys

import pytest

from tests.bench.conftest import size
from tests.processes import REPO_ROOT

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Jobs counted per side (``node_job``, ``agent_job`` and ``wakeup_job`` subtract a run with none,
#: ``tests.bench.machine.instructions_per_job``; ``daphne_job`` zeroes its count after its warm-up).
COUNTED = {"node": size(200, 50), "agent": size(300, 100), "wakeup": size(1000, 300),
           "wakeup_python_parser": size(1000, 300), "node_as_deployed": size(200, 50)}  # fmt: skip
#: The sides also timed without valgrind (a node as deployed is only counted: its CPU is the
#: end-to-end benchmark's).
TIMED_SIDES = ("node", "agent", "wakeup", "wakeup_python_parser")
#: Jobs timed per side, after each module's own warm-up.
TIMED = size(1000, 300)
#: Rounds of the two wakeup sides' timed runs.
WAKEUP_ROUNDS = size(5, 2)
#: The module of each side, and what its environment adds.
SIDES = {
    "node": ("node_job", {}),
    "agent": ("agent_job", {}),
    "wakeup": ("wakeup_job", {"BENCH_REDIS_PARSER": "hiredis"}),
    "wakeup_python_parser": ("wakeup_job", {"BENCH_REDIS_PARSER": "python"}),
    "node_as_deployed": ("daphne_job", {}),
}


def _command(side: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"tests.bench.{SIDES[side][0]}", *args]


def _environment(side: str) -> dict[str, str]:
    return {**os.environ, **SIDES[side][1]}


def _figures(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def _cpu_us_per_job(side: str) -> int:
    timed = subprocess.run(
        _command(side, str(TIMED)), env=_environment(side), cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=1200, check=True,
    )  # fmt: skip
    return _figures(timed.stdout)["cpu_us_per_job"]


def test_instructions_per_job(bench_result):
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    counting = {}
    for side, jobs in COUNTED.items():
        counting[side] = subprocess.Popen(
            _command(side, "--instructions", str(jobs)), env=_environment(side),
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    counted = {}
    for side, process in counting.items():
        output, errors = process.communicate(timeout=3600)
        assert process.returncode == 0, f"{side}: the count failed: {errors[-2000:]}"
        counted[side] = _figures(output)
    # Timed one after the other; the two wakeup sides in alternated rounds (the median of each
    # side's kept), as they are compared with each other while the machine's speed moves.
    timed: dict[str, list[int]] = {side: [] for side in TIMED_SIDES}
    for side in ("node", "agent"):
        timed[side].append(_cpu_us_per_job(side))
    for _ in range(WAKEUP_ROUNDS):
        for side in ("wakeup", "wakeup_python_parser"):
            timed[side].append(_cpu_us_per_job(side))
    figures = {
        side: {"counted_jobs": counted[side]["jobs"],
               "instructions_per_job": counted[side]["instructions_per_job"]}
        for side in COUNTED
    }  # fmt: skip
    for side, runs in timed.items():
        figures[side].update(
            timed_jobs=TIMED, timed_runs=len(runs), cpu_us_per_job=statistics.median(runs)
        )
    # What hiredis saves a wakeup: redis-py's own parser over hiredis, instructions counted.
    figures["wakeup_python_parser_over_hiredis"] = round(
        figures["wakeup_python_parser"]["instructions_per_job"]
        / figures["wakeup"]["instructions_per_job"], 3
    )  # fmt: skip
    bench_result["figures"] = figures
    print(figures)
