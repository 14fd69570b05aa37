"""Helpers shared by the benchmarks: figures, devices in bulk, nodes and the bare floor."""

from __future__ import annotations

import statistics

from tests.processes import ManagedProcess, free_port, port_open, python
from tests.waiting import wait_until


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def latency_figures(values_ms: list[float]) -> dict:
    """p50/p90/p99/max (ms) of a list of latencies in milliseconds."""
    if not values_ms:
        return {"n": 0}
    return {
        "n": len(values_ms),
        "p50_ms": round(statistics.median(values_ms), 2),
        "p90_ms": round(percentile(values_ms, 90), 2),
        "p99_ms": round(percentile(values_ms, 99), 2),
        "max_ms": round(max(values_ms), 2),
    }


def make_devices(
    n: int, tenant: str = "bench", prefix: str = "bench"
) -> list[tuple[int, str, str]]:
    """``n`` enabled devices made in bulk: ``(pk, name, token)`` each."""
    from qprint.domain import credentials
    from qprint.models import Device

    tokens = [credentials.new_secret() for _ in range(n)]
    Device.objects.bulk_create(
        [
            Device(tenant=tenant, name=f"{prefix}-{i}", token_hash=credentials.hash_secret(t))
            for i, t in enumerate(tokens)
        ],
        batch_size=1000,
    )
    by_name = dict(
        Device.objects.filter(tenant=tenant, name__startswith=f"{prefix}-").values_list(
            "name", "pk"
        )
    )
    return [(by_name[f"{prefix}-{i}"], f"{prefix}-{i}", t) for i, t in enumerate(tokens)]


class BareNode:
    """Daphne serving tests.bench.bare_asgi (the floors), on the same layer and the same event
    loop as the nodes (``qprint-daphne``)."""

    def __init__(self, env: dict[str, str]):
        self.port = free_port()
        args = python(
            "-m",
            "qprint.daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(self.port),
            "tests.bench.bare_asgi:application",
        )
        self.process = ManagedProcess("bare", args, env)

    def start(self) -> BareNode:
        self.process.start()
        wait_until(lambda: port_open(self.port) or not self.process.alive(), 30, message="bare")
        assert self.process.alive(), self.process.log()
        return self

    def stop(self) -> None:
        self.process.stop()

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws(self, n: int) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/{n}"
