"""Throughput of the claim and event path on the database this run uses (not collected by default).

    DATABASE_URL=postgres://... REDIS_URL=redis://... \
        .venv/bin/python -m pytest tests/bench/bench_claim.py -s -q

Prints jobs per second through claim -> RECEIVED -> PRINTED with several devices served by
concurrent threads, and the rate of replayed claims when threads hammer one device.
"""

import logging
import os
import statistics
import threading
import time

import pytest

from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import PrintJob
from tests.qprint.helpers import connect, event, make_device, run_concurrently, submit

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def quiet_logs():
    """One INFO line per state change is right in production and noise in a benchmark."""
    logging.disable(logging.INFO)
    yield
    logging.disable(logging.NOTSET)


DEVICES = 16
JOBS_PER_DEVICE = 40
THREADS = int(os.environ.get("BENCH_THREADS", "4"))


def test_bench_jobs_through_claim_and_events():
    devices = [connect(make_device(name=f"d{i}").device) for i in range(DEVICES)]
    for device in devices:
        for _ in range(JOBS_PER_DEVICE):
            submit(device)
    latencies: list[float] = []
    lock = threading.Lock()

    def serve(i: int) -> int:
        done = 0
        for device in devices[i::THREADS]:
            while True:
                started = time.perf_counter()
                assignment = claim_next_job(device.pk, node=f"node-{i % 2}")
                with lock:
                    latencies.append(time.perf_counter() - started)
                if assignment is None:
                    break
                record_device_event(
                    device, assignment.job_id, event(assignment.claim_id, "RECEIVED")
                )
                record_device_event(
                    device, assignment.job_id, event(assignment.claim_id, "PRINTED")
                )
                done += 1
        return done

    started = time.perf_counter()
    results = run_concurrently(THREADS, serve, timeout=600)
    elapsed = time.perf_counter() - started
    total = sum(r[1] for r in results)
    assert total == DEVICES * JOBS_PER_DEVICE
    assert PrintJob.objects.filter(status="PRINTED").count() == total
    latencies.sort()
    print(
        f"\njobs={total} threads={THREADS} elapsed={elapsed:.2f}s "
        f"jobs_per_s={total / elapsed:.0f} claim_p50_ms={statistics.median(latencies) * 1e3:.2f} "
        f"claim_p99_ms={latencies[int(len(latencies) * 0.99)] * 1e3:.2f}"
    )


def test_bench_replayed_claims_on_one_device():
    device = connect(make_device().device)
    submit(device)
    claim_next_job(device.pk)
    per_thread = 200

    def hammer(i: int) -> int:
        for _ in range(per_thread):
            claim_next_job(device.pk, node=f"node-{i % 2}")
        return per_thread

    started = time.perf_counter()
    run_concurrently(8, hammer, timeout=600)
    elapsed = time.perf_counter() - started
    print(
        f"\nreplayed_claims={8 * per_thread} elapsed={elapsed:.2f}s "
        f"per_s={8 * per_thread / elapsed:.0f}"
    )
