"""Fixtures of the benchmarks: sizes, the machine sampler, and where results are written.

``BENCH_SIZE=quick`` (``./dev bench --quick``) scales every benchmark down; the JSON and the
tables name the size that ran. Each benchmark writes ``docs/bench/<test name>.json``;
``python -m tests.bench.report`` turns them into plots and the table of docs/PERFORMANCE.md.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import subprocess

import pytest

from tests.bench.machine import MachineSampler
from tests.processes import REPO_ROOT

RESULTS = REPO_ROOT / "docs" / "bench"
SIZE = os.environ.get("BENCH_SIZE", "full")


def size(full, quick):
    """The figure for this run's size."""
    return quick if SIZE == "quick" else full


def _revision() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@pytest.fixture(autouse=True)
def quiet_logs():
    """One INFO line per state change is right in production and noise in a benchmark."""
    logging.disable(logging.INFO)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def bench_result(request):
    """A dict the benchmark fills; written with the machine's load to docs/bench/<name>.json."""
    name = request.node.name.removeprefix("test_")
    sampler = MachineSampler().start()
    result: dict = {"figures": {}}
    yield result
    machine = sampler.stop()
    if not result["figures"]:
        return  # the benchmark failed: keep the last figures
    record = {
        "benchmark": name,
        "size": SIZE,
        "label": os.environ.get("BENCH_LABEL", "current"),
        "revision": _revision(),
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": machine,
        **result,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    label = record["label"]
    path = RESULTS / (f"{name}.json" if label == "current" else f"{name}.{label}.json")
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    load = machine["load_average_1m"]
    others = machine["other_processes_cores"]
    speed = machine["speed_probe_ms"]
    print(
        f"\n[{name}] machine: load average {load['mean']} (max {load['max']}) on "
        f"{machine['cores']} cores; other processes used {others['mean']} cores on average "
        f"(max {others['max']}); speed probe {speed['start']} ms at the start, {speed['end']} at "
        f"the end -> {path.relative_to(REPO_ROOT)}"
    )
