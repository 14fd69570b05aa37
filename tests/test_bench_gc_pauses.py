"""The end-to-end benchmark's nodes log their full collections, and it reads them per phase."""

import os
import subprocess
import sys

from tests.bench import deployed

CHILD = """
import gc, os, time
print(os.getpid(), time.time())
for _ in range(5):
    gc.collect(0)
    gc.collect(1)
print(time.time())
gc.collect()
print(time.time())
"""


def test_a_process_logs_its_full_collections_and_the_benchmark_reads_those_of_a_phase(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(deployed, "gc_log", lambda: tmp_path)
    env = {**os.environ, "PYTHONPATH": str(deployed.GC_HOOK), "BENCH_GC_LOG": str(tmp_path)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    pid, started, young_done, full_done = (float(n) for n in child.stdout.split())
    pid = int(pid)

    # The younger generations' collections are not logged ...
    assert deployed.gc_pauses({pid}, started, young_done)["full_collections"] == 0
    # ... the full one is, with its clock and CPU time.
    pauses = deployed.gc_pauses({pid}, young_done, full_done)
    assert pauses["full_collections"] == 1
    assert 0 < pauses["longest_ms"] == pauses["total_ms"]
    assert pauses["cpu_ms"] > 0
    # Another process's: nothing.
    assert deployed.gc_pauses({pid + 1}, young_done, full_done)["full_collections"] == 0
