"""A pushed job's cost in one process, on each side of the socket: the figures that compare two
versions of the code whatever else the machine does.

``tests.bench.node_job`` (the node's side: the submission by ``submit_job``, the wakeup, the claim
and the push, three events as frames, on ``DATABASE_URL``'s PostgreSQL) and
``tests.bench.agent_job`` (the agent's side: the assignment to the last acknowledgement, its
journal on disk, the null printer), each in a process of its own:

- instructions per job, counted by ``valgrind --tool=callgrind`` (the two counts run at once:
  a count does not depend on the other work of the machine);
- CPU per job of the same process without valgrind, one after the other (this figure moves with
  the machine, as every timed one does).

Without valgrind the benchmark is skipped with that reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.bench.conftest import size
from tests.processes import REPO_ROOT

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Jobs counted per side (the runs with none are subtracted: see ``instructions_per_job``).
COUNTED = {"node": size(200, 50), "agent": size(300, 100)}
#: Jobs timed per side, after each module's own warm-up.
TIMED = size(1000, 300)


def _command(side: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"tests.bench.{side}_job", *args]


def _figures(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_instructions_per_job(bench_result):
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    counting = {}
    for side, jobs in COUNTED.items():
        counting[side] = subprocess.Popen(
            _command(side, "--instructions", str(jobs)),
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    counted = {}
    for side, process in counting.items():
        output, errors = process.communicate(timeout=3600)
        assert process.returncode == 0, f"{side}_job --instructions failed: {errors[-2000:]}"
        counted[side] = _figures(output)
    figures = {}
    for side in COUNTED:
        timed = subprocess.run(
            _command(side, str(TIMED)), cwd=REPO_ROOT, capture_output=True, text=True,
            timeout=1200, check=True,
        )  # fmt: skip
        figures[side] = {
            "counted_jobs": counted[side]["jobs"],
            "instructions_per_job": counted[side]["instructions_per_job"],
            "timed_jobs": TIMED,
            "cpu_us_per_job": _figures(timed.stdout)["cpu_us_per_job"],
        }
    bench_result["figures"] = figures
    print(figures)
