"""Profiles of the benchmarks' processes: :func:`profiler` records one with py-spy
(``BENCH_PROFILE=<dir>``), and this module's command prints the top frames of one
(``py-spy record --format raw``).

    python -m tests.bench.profile docs/bench/profiles/push_http-throughput.txt [--top 25]

Prints the functions with the most samples on the stack (inclusive) and on top (self), as
``file:function``, with their share of all samples, then the samples on top per layer (the
package of the frame on top: ``django``, ``twisted``, ``asyncio``, ``qprint/core``, ...).
Idle event-loop waits are counted too, so the shares say where a busy node's time goes.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import sys
import time
from pathlib import Path

from tests.processes import ManagedProcess

#: Where the benchmarks write py-spy's raw profiles (none when empty).
PROFILE_DIR = os.environ.get("BENCH_PROFILE", "")

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:]*)(?::\d+)?\)$")


class Profiler:
    """py-spy recording one process until :meth:`stop`."""

    def __init__(self, pid: int, name: str) -> None:
        out = Path(PROFILE_DIR) / f"{name}.txt"
        spy = str(Path(sys.executable).parent / "py-spy")
        # py-spy reads C stacks (--native) only while it pauses the process
        native = ["--native"] if os.environ.get("BENCH_PROFILE_NATIVE") else ["--nonblocking"]
        rate = os.environ.get("BENCH_PROFILE_RATE", "100")
        args = [spy, "record", "--pid", str(pid), "--rate", rate,
                "--format", "raw", "--output", str(out), *native,
                *(["--gil"] if os.environ.get("BENCH_PROFILE_GIL") else [])]  # fmt: skip
        self.spy = ManagedProcess("py-spy", args, dict(os.environ))
        self.spy.start()
        time.sleep(1)

    def stop(self) -> None:
        """Stop recording and write the profile (py-spy writes its output on SIGINT)."""
        self.spy.send(signal.SIGINT)
        self.spy.wait(120)


def profiler(pid: int, name: str) -> Profiler:
    """py-spy on process ``pid`` until stopped, into ``<BENCH_PROFILE>/<name>.txt``
    (``BENCH_PROFILE_GIL=1``: only the thread holding the interpreter; ``BENCH_PROFILE_NATIVE=1``:
    C frames too, such as psycopg's adapters; ``BENCH_PROFILE_RATE``: samples a second, 100)."""
    return Profiler(pid, name)


def summarise(path: str, top: int = 25) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    layers: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as lines:
        text = lines.read().splitlines()
    for line in text:
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = []
        for raw in stack.split(";"):
            m = FRAME.match(raw)
            if m:
                file = m["file"].split("site-packages/")[-1].split("wt-perf/")[-1]
                frames.append(f"{file}:{m['func']}")
            else:
                frames.append(raw)
        for f in set(frames):
            inclusive[f] += n
        if frames:
            own[frames[-1]] += n
            layers[_layer(frames[-1])] += n
    lines = [f"{path.rsplit('/', 1)[-1]}: {total} samples", "inclusive:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    lines.append("self:")
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines.append("self, by layer:")
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in layers.most_common(top)]
    return "\n".join(lines)


def _layer(frame: str) -> str:
    """The package of a ``file:function`` frame (two levels for the project's own)."""
    parts = frame.partition(":")[0].split("/")
    if len(parts) == 1:
        return "(standard library, top level)"
    return "/".join(parts[:2]) if parts[0] in ("qprint", "qcluster") else parts[0]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    print(summarise(args.path, args.top))
