"""Imported by Python at the start of a benchmark's node, whose ``PYTHONPATH`` begins with this
directory (:func:`tests.bench.deployed.deployed_env`): with ``BENCH_GC_LOG`` naming a directory,
each full collection of the garbage collector (generation 2) is appended to ``<pid>.log`` there,
one line each: the wall-clock time it began, how long it took and the CPU time it took (of its
thread), in milliseconds. The benchmark reads the lines of each phase
(:func:`tests.bench.deployed.gc_pauses`): a full collection stops every socket and request of the
node while it runs."""

import gc
import os
import time

_directory = os.environ.get("BENCH_GC_LOG")

if _directory:
    _began = [0.0, 0.0, 0.0]

    def _collection(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            _began[:] = [time.time(), time.perf_counter(), time.thread_time()]
            return
        took = (time.perf_counter() - _began[1]) * 1000
        cpu = (time.thread_time() - _began[2]) * 1000
        with open(os.path.join(_directory, f"{os.getpid()}.log"), "a") as log:
            log.write(f"{_began[0]:.6f} {took:.3f} {cpu:.3f}\n")

    gc.callbacks.append(_collection)
