"""The submission from host code: ``qprint.api.submit_job`` inside the host's transaction, in
this process (benchmark 6 of docs/PERFORMANCE.md).

``SUBMISSIONS`` jobs for 20 devices, each submitted by ``api.submit_job`` inside its own
``transaction.atomic()`` (the host's transaction; the device's wakeup and the job's notice run
after its commit, as in a host's view). Measured: CPU of this process per submission
(``time.process_time``: the Python and Django work, the driver's included) and wall time per
submission (p50/p99), beside the bare floor of the same work done with one ``INSERT`` of a row
of the same size through a cursor (what the database round trips alone cost here).
"""

from __future__ import annotations

import statistics
import time
import uuid

import pytest
from django.db import connection, transaction

from qprint import api
from tests.bench.common import latency_figures, make_devices
from tests.bench.conftest import size

pytestmark = [pytest.mark.services, pytest.mark.slow]

SUBMISSIONS = size(2000, 400)
DOCUMENT = b"%PDF-1.4 bench\n" + b"x" * 2000


def test_submit_job_in_process(transactional_db, bench_result):
    devices = make_devices(20, tenant="host", prefix="host")
    names = [name for _, name, _ in devices]
    for i in range(50):  # warm: prepared queries compiled, pool filled
        with transaction.atomic():
            api.submit_job("host", names[i % 20], DOCUMENT, "application/pdf")
    cpu, wall = [], []
    for i in range(SUBMISSIONS):
        c0, w0 = time.process_time(), time.perf_counter()
        with transaction.atomic():
            api.submit_job(
                "host", names[i % 20], DOCUMENT, "application/pdf",
                title=f"host {i}", idempotency_key=str(uuid.uuid4()),
            )  # fmt: skip
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)

    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE bench_floor (id uuid PRIMARY KEY, content bytea)")
    floor_cpu, floor_wall = [], []
    for _ in range(SUBMISSIONS):
        c0, w0 = time.process_time(), time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO bench_floor VALUES (%s, %s)", [uuid.uuid4(), DOCUMENT])
        floor_cpu.append((time.process_time() - c0) * 1000)
        floor_wall.append((time.perf_counter() - w0) * 1000)

    figures = {
        "submissions": SUBMISSIONS,
        "cpu_ms_per_submission": round(statistics.mean(cpu), 3),
        "wall": latency_figures(wall),
        "floor_cpu_ms_per_insert": round(statistics.mean(floor_cpu), 3),
        "floor_wall": latency_figures(floor_wall),
    }
    figures["cpu_over_floor"] = round(
        figures["cpu_ms_per_submission"] / figures["floor_cpu_ms_per_insert"], 1
    )
    bench_result["figures"] = figures
    print(figures)
