"""Cost of the lease statements and of a heartbeat (not collected by default).

    DATABASE_URL=postgres://... REDIS_URL=redis://... \
        .venv/bin/python -m pytest tests/bench/bench_leases.py -s -q

Prints, per operation, p50/p99 latency single-threaded, and the rate of contended acquisitions
with 8 threads racing for one lease.
"""

import statistics
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections

from qcluster import identity, leases, nodes

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

N = 500


def _timed(func, n: int = N) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return statistics.median(samples) * 1000, samples[int(0.99 * len(samples))] * 1000


def test_bench_lease_operations_and_heartbeat():
    me, other = leases.as_node("bench-a"), leases.as_node("bench-b")
    ttl = timedelta(seconds=60)
    me.try_acquire("bench", ttl)
    node = identity.read_identity("bench-a")
    nodes.register_start(node, nodes.LiveFields())
    rows = {
        "try_acquire (holder, extends)": _timed(lambda: me.try_acquire("bench", ttl)),
        "try_acquire (live, refused)": _timed(lambda: other.try_acquire("bench", ttl)),
        "renew": _timed(lambda: me.renew("bench", ttl)),
        "is_leader": _timed(lambda: me.is_leader("bench")),
        "heartbeat": _timed(lambda: nodes.heartbeat(node, nodes.LiveFields())),
    }
    print()
    for name, (p50, p99) in rows.items():
        print(f"{name:32s} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms")


def test_bench_contended_acquisitions():
    rounds, contenders = 100, 8
    barrier = threading.Barrier(contenders)
    wins: list[int] = []

    def contend(i: int) -> None:
        client = leases.as_node(f"c{i}")
        try:
            for r in range(rounds):
                barrier.wait(30)
                if client.try_acquire(f"bench-{r}", 60):
                    wins.append(r)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert sorted(wins) == list(range(rounds))
    print(
        f"\n{rounds} races of {contenders} threads (missing row each time): "
        f"{rounds / elapsed:.0f} races/s, exactly one winner each"
    )
