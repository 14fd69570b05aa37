"""The benchmarks' processes as a user deploys them: Daphne nodes of the example project with the
docs' command and its defaults (:func:`start_nodes`), and fleets of agent processes, one per node
(the reference agent, :func:`agent_args`, or the polling client, :func:`poller_args`). Used by
the end-to-end, idle and storm benchmarks."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from tests.processes import ManagedProcess, python
from tests.qprint.realtime.cluster import Node, node_env


def deployed_env(url: str, redis_url: str, node_id: str, **extra: str) -> dict[str, str]:
    """A node's environment as a user deploys the example project (docs/OPERATIONS.md): its
    defaults (DEBUG off, INFO logging, the psycopg pool, the 20 s heartbeat), only the database,
    Redis, the secret key, the allowed hosts and the node id set."""
    env = node_env(url, redis_url, node_id, **extra)
    for name in ("QPRINT_HEARTBEAT_SECONDS", "LOG_LEVEL", "DEBUG"):
        if name not in extra:
            env.pop(name, None)
    # The node's full collections, logged for the benchmark (a callback that does nothing for the
    # younger generations): gc_pauses.
    env["PYTHONPATH"] = os.pathsep.join([str(GC_HOOK), env["PYTHONPATH"]])
    env["BENCH_GC_LOG"] = str(gc_log())
    return env


#: The directory of the nodes' ``sitecustomize`` (tests/bench/gc_hook/sitecustomize.py).
GC_HOOK = Path(__file__).with_name("gc_hook")


@functools.cache
def gc_log() -> Path:
    """Where this benchmark's nodes log their full collections (one file per process)."""
    return Path(tempfile.mkdtemp(prefix="qprint-bench-gc-"))


def gc_pauses(pids: set[int], since: float, until: float) -> dict:
    """The full collections of the processes ``pids`` that began between two wall-clock times:
    how many, the longest and all of them together (ms of the clock), and the CPU they took."""
    pauses, cpu = [], []
    for pid in pids:
        log = gc_log() / f"{pid}.log"
        lines = log.read_text().splitlines() if log.exists() else []
        for line in lines:
            began, took, used = (float(value) for value in line.split())
            if since <= began <= until:
                pauses.append(took)
                cpu.append(used)
    return {
        "full_collections": len(pauses),
        "longest_ms": round(max(pauses, default=0.0), 1),
        "total_ms": round(sum(pauses), 1),
        "cpu_ms": round(sum(cpu), 1),
    }


class DeployedNode(Node):
    """A node started with the docs' command (``qprint-daphne``, ``--proxy-headers``; bound to
    loopback)."""

    def __init__(self, node_id: str, env: dict[str, str], proxy_headers: bool = True):
        super().__init__(node_id, env)
        args = ["-m", "qprint.daphne", "-b", "127.0.0.1", "-p", str(self.port)]
        if proxy_headers:
            args.append("--proxy-headers")
        self.process = ManagedProcess(
            node_id, python(*args, "example_project.asgi:application"), env
        )


def start_nodes(
    url: str,
    redis_url: str,
    *,
    as_deployed: bool = True,
    names: tuple[str, ...] = ("bench-a", "bench-b"),
) -> list[Node]:
    """Nodes A and B (or ``names``); ``as_deployed=False``: as this benchmark ran them before
    (WARNING logs, no ``--proxy-headers``), for the comparison."""
    extra = {} if as_deployed else {"LOG_LEVEL": "WARNING", "QPRINT_HEARTBEAT_SECONDS": "20"}
    nodes = [
        DeployedNode(name, deployed_env(url, redis_url, name, **extra), as_deployed)
        for name in names
    ]
    for n in nodes:
        n.start()
    return nodes


class Fleet:
    """Agent processes, one per node, each serving its half of the devices."""

    def __init__(self, args_of, nodes, halves, env):
        self.procs = [
            ManagedProcess(f"agents-{i}", args_of(node, tokens), env)
            for i, (node, tokens) in enumerate(zip(nodes, halves, strict=True))
        ]

    def __enter__(self):
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.stop()


def agent_args(tmp_path, operations: str):
    def args(node, tokens_file):
        return python(
            "-m", "qprint.agent", "--url", node.http + "/qprint/",
            "--tokens-file", str(tokens_file),
            "--state-dir", str(tmp_path / f"state-{node.node_id}-{operations}"),
            "--spooler", "null", "--no-report-printers",
            *(["--operations", operations] if operations != "default" else []),
        )  # fmt: skip

    return args


def poller_args(interval: float):
    def args(node, tokens_file):
        return python(
            "-m", "tests.bench.poller", "--url", node.http + "/qprint/",
            "--tokens-file", str(tokens_file), "--interval", str(interval),
        )  # fmt: skip

    return args
