"""What else ran on the machine while a benchmark ran, sampled from ``/proc``.

Benchmarks here share a 2-core machine with other work, so every figure carries the load average
and the CPU the rest of the machine used meanwhile (every process that is not this benchmark's
own: the benchmark process and the processes it started, found by session id and parentage),
and the machine's own speed at the start and the end (:func:`speed_probe_ms`): the same code ran
at half the speed within two hours here, with the load average and the other processes as low as
before.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
#: The speed probe's work: a fixed loop of Python additions.
PROBE_LOOP = 2_000_000


def speed_probe_ms() -> float:
    """The CPU time (ms, this thread's) of :data:`PROBE_LOOP` Python additions, the median of
    three: how fast this machine runs Python now (its clock, its caches, what shares its cores),
    which neither the load average nor the other processes' CPU shows. Lower is faster; compare
    it between runs on machines of one kind only."""
    times = []
    for _ in range(3):
        started = time.thread_time()
        total = 0
        for i in range(PROBE_LOOP):
            total += i
        times.append(time.thread_time() - started)
    times.sort()
    return round(times[1] * 1000, 1)


def fsync_latency(directory: str | Path, seconds: float = 10, interval: float = 0.01) -> dict:
    """How long this disk takes to sync an 8 KiB write (what a commit waits for), sampled for
    ``seconds`` in ``directory``: the p50, p99, p99.9 and the longest, in ms. A disk that stalls
    now and then shows it in the tail, whatever the code on top of it does."""
    path = Path(directory) / f".fsync-probe-{os.getpid()}"
    waits: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            os.write(fd, b"\0" * 8192)
            started = time.perf_counter()
            os.fsync(fd)
            waits.append((time.perf_counter() - started) * 1000)
            time.sleep(interval)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    waits.sort()
    n = len(waits)
    return {
        "n": n,
        "p50_ms": round(waits[n // 2], 2),
        "p99_ms": round(waits[int(n * 0.99)], 2),
        "p999_ms": round(waits[int(n * 0.999)], 2),
        "max_ms": round(waits[-1], 1),
    }


def _stat(pid: int) -> tuple[int, int, int, int] | None:
    """(ppid, session, utime + stime in ticks, rss pages) of a process, or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[3]), int(fields[11]) + int(fields[12]), int(fields[21])


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` used so far."""
    stat = _stat(pid)
    return stat[2] / TICKS if stat else 0.0


def own_cpu_seconds() -> float:
    """CPU of this process, all its threads (``RUSAGE_SELF``: finer than the ticks of /proc)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def instructions_per_job(module: str, jobs: int) -> float:
    """Instructions per job of ``python -m module <jobs>``: valgrind's count of the run with
    ``jobs`` jobs less that of the run with none (the same start and warm-up), over ``jobs``,
    after a run outside the count.
    ``valgrind --tool=callgrind`` counts instructions, not time: the count repeats from run to
    run whatever else the machine does (``tests.bench.agent_job``, ``tests.bench.node_job``)."""

    def counted(count: int) -> int:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             sys.executable, "-m", module, str(count)],
            capture_output=True, text=True, timeout=3600, check=True,
        )  # fmt: skip
        collected = re.search(r"Collected : (\d+)", done.stderr)
        if collected is None:
            raise RuntimeError(f"valgrind counted nothing: {done.stderr[-500:]}")
        return int(collected.group(1))

    # A first run outside the count makes what the runs need (node_job's database, migrated), so
    # that neither counted run does it.
    subprocess.run(
        [sys.executable, "-m", module, "0"], capture_output=True, timeout=600, check=True
    )
    return (counted(jobs) - counted(0)) / jobs


async def cpu_of_jobs(run: Callable[[], Awaitable[None]], count: int, warm_up: int) -> float:
    """CPU seconds of this process over ``count`` awaited ``run()``, after ``warm_up`` of them."""
    for _ in range(warm_up):
        await run()
    cpu = own_cpu_seconds()
    for _ in range(count):
        await run()
    return own_cpu_seconds() - cpu


def per_job_main(module: str, description: str, cpu_seconds: Callable[[int], float]) -> None:
    """The command line of a benchmark of one job in process (``agent_job``, ``node_job``):
    ``[jobs]`` prints the CPU per job (``cpu_seconds(jobs)``), ``--instructions [jobs]`` the
    instructions per job (:func:`instructions_per_job` of ``module``)."""
    import argparse
    import json
    import shutil

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("jobs", type=int, nargs="?", default=1000)
    parser.add_argument("--instructions", action="store_true")
    args = parser.parse_args()
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("valgrind is not installed")
        started = time.monotonic()
        per_job = instructions_per_job(module, args.jobs)
        seconds = time.monotonic() - started
        print(json.dumps({"jobs": args.jobs, "instructions_per_job": round(per_job),
                          "seconds": round(seconds, 1)}))  # fmt: skip
        return
    spent = cpu_seconds(args.jobs)
    print(json.dumps({"jobs": args.jobs, "cpu_us_per_job": round(spent * 1e6 / max(args.jobs, 1))}))


def process_rss_bytes(pid: int) -> int:
    stat = _stat(pid)
    return stat[3] * os.sysconf("SC_PAGE_SIZE") if stat else 0


def _total_busy_ticks() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields[:8]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle


def _ours(root: int) -> set[int]:
    """This benchmark's processes: ``root``, its descendants, and its session's processes (nodes
    and agents are started in sessions of their own, so parentage is followed too)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat:
                stats[int(entry)] = stat
    ours = {root}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _, _, _) in stats.items():
            if pid not in ours and ppid in ours:
                ours.add(pid)
                changed = True
    return ours


class MachineSampler:
    """Samples the load average and the CPU of everything else once a second, in a thread."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.root = os.getpid()
        self.loads: list[float] = []
        self.others_cores: list[float] = []  # cores' worth of CPU used by other processes
        self.ours_cores: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[float, int, int] | None = None
        self._ours_ticks: dict[int, int] = {}
        self.speed: dict[str, float] = {}

    def _our_ticks(self) -> int:
        total = 0
        for pid in _ours(self.root):
            stat = _stat(pid)
            if stat:
                self._ours_ticks[pid] = stat[2]
        # Processes of ours that ended keep counting with their last figure.
        total = sum(self._ours_ticks.values())
        return total

    def _sample(self) -> None:
        now = time.monotonic()
        busy = _total_busy_ticks()
        ours = self._our_ticks()
        if self._last is not None:
            t, b, o = self._last
            elapsed = (now - t) * TICKS
            if elapsed > 0:
                self.others_cores.append(max(0.0, (busy - b) - (ours - o)) / elapsed)
                self.ours_cores.append(max(0.0, ours - o) / elapsed)
        self._last = (now, busy, ours)
        self.loads.append(os.getloadavg()[0])

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> MachineSampler:
        self.speed["start"] = speed_probe_ms()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="machine-sampler")
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._sample()
        self.speed["end"] = speed_probe_ms()
        return self.summary()

    def summary(self) -> dict:
        def stats(values: list[float]) -> dict:
            if not values:
                return {"mean": None, "max": None}
            return {"mean": round(sum(values) / len(values), 2), "max": round(max(values), 2)}

        return {
            "cores": CORES,
            "load_average_1m": stats(self.loads),
            "other_processes_cores": stats(self.others_cores),
            "benchmark_processes_cores": stats(self.ours_cores),
            "samples": len(self.loads),
            "speed_probe_ms": dict(self.speed),
        }


def _kind(pid: int) -> str | None:
    """What a process of the job path is, from its command line (None: not one of them)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    if "daphne" in cmdline:
        return "nodes"
    if "qprint.agent" in cmdline or "tests.bench.poller" in cmdline:
        return "agents"
    if cmdline.startswith("postgres") or "postgres:" in cmdline or "/postgres " in cmdline:
        return "postgresql"
    if "redis-server" in cmdline:
        return "redis"
    if pid == os.getpid():
        return "submitters"
    return None


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds used so far by the processes of the job path, by kind (nodes, agents,
    PostgreSQL, Redis, this process's submitters): two readings give who paid for a phase."""
    totals: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        kind = _kind(int(entry))
        stat = _stat(int(entry)) if kind else None
        if stat:
            totals[kind] = totals.get(kind, 0.0) + stat[2] / TICKS
    return totals


def cpu_ms_per_job(before: dict[str, float], after: dict[str, float], jobs: int) -> dict:
    """Milliseconds of CPU per job, by kind, between two ``cpu_by_kind`` readings."""
    per = {k: round((after.get(k, 0.0) - before.get(k, 0.0)) * 1000 / jobs, 2) for k in after}
    per["total"] = round(sum(per.values()), 2)
    return per


def process_tree(root: int) -> set[int]:
    """``root`` and its descendants (by parentage, read from ``/proc``)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat:
                parents[int(entry)] = stat[0]
    tree = {root}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if pid not in tree and ppid in tree:
                tree.add(pid)
                changed = True
    return tree if root in parents else set()


def postgresql_part(pid: int) -> str:
    """Which part of a PostgreSQL server ``pid`` is: ``backends`` (a client's session, titled
    ``postgres: user database host(port) ...``) or ``background`` (the postmaster, the WAL
    writer, the checkpointer, the background writer, autovacuum and the other workers the server
    runs for itself). A title may name the server's ``cluster_name`` first (``postgres:
    15/main: walwriter``, Debian's)."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "background"
    if not title.startswith("postgres: "):
        return "background"  # the postmaster, by its command line
    rest = title.removeprefix("postgres: ")
    workers = ("autovacuum", "walwriter", "checkpointer", "background", "logical", "archiver")
    names = (rest, rest.split(": ", 1)[-1])  # without and with a cluster name before
    return "background" if any(name.startswith(workers) for name in names) else "backends"


class CpuMeter:
    """CPU seconds used by the benchmark's own processes, by kind: each kind a function giving
    its process ids now (the node processes and what they run, the agent processes, the private
    PostgreSQL server's whole tree, the bench's Redis, this process). Nothing else on the machine
    is counted, and a process that ends keeps its last figure: a sampler thread reads every
    process of every kind twice a second, so a backend or an agent that exits between two
    readings is not subtracted (nor its CPU lost, but for its last half second). ``parts``: for
    a kind, a function naming the part of it a process is (:func:`postgresql_part`), whose
    totals :meth:`parts` gives."""

    def __init__(self, kinds: dict, interval: float = 0.5, parts: dict | None = None) -> None:
        self.kinds = kinds
        self.interval = interval
        self.part_of = parts or {}
        self._last: dict[int, tuple[str, int]] = {}
        self._parts: dict[int, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-meter")

    def _sample(self) -> None:
        for kind, pids in self.kinds.items():
            for pid in pids():
                stat = _stat(pid)
                if stat:
                    with self._lock:
                        self._last[pid] = (kind, stat[2])
                        if kind in self.part_of and pid not in self._parts:
                            self._parts[pid] = self.part_of[kind](pid)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> CpuMeter:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def reading(self, *, sample: bool = True) -> dict[str, float]:
        """CPU seconds per kind so far (processes that ended: their last figure); ``sample``
        False: as of the last sample (the one :meth:`parts` just took, say)."""
        if sample:
            self._sample()
        totals: dict[str, float] = dict.fromkeys(self.kinds, 0.0)
        with self._lock:
            for kind, ticks in self._last.values():
                totals[kind] += ticks / TICKS
        return totals

    def parts(self, kind: str) -> dict[str, float]:
        """CPU seconds so far of each part of ``kind`` (as :meth:`reading` counts them)."""
        self._sample()
        totals: dict[str, float] = {}
        with self._lock:
            for pid, (of, ticks) in self._last.items():
                if of == kind:
                    part = self._parts[pid]
                    totals[part] = totals.get(part, 0.0) + ticks / TICKS
        return totals
