"""A device's history and its claims (docs/PERFORMANCE.md, "A device's history").

A device keeps its finished jobs for ``JOB_RETENTION_DAYS`` (30 by default): a label printer
printing a thousand labels a day holds tens of thousands. For each history (no finished job,
and ``HISTORIES`` of them, the table analysed), one connected device is given that history,
then ``CLAIMS`` jobs, each submitted, claimed with ``qprint.domain.claim.claim_next_job`` in this
process (the claim's one statement, prepared and planned once, as a deployment's connections run
it: ``plan_cache_mode = force_generic_plan``) and finished with ``RECEIVED`` and ``PRINTED``.
Measured: the claim's wall time (p50/p99), and the shared buffers that the claim's read of the
device and an agent's connect's read of it (with its active jobs) touch under their generic
plans (``tests.plans.generic_plan_buffers``: a count of pages, whatever else the machine does).
A read that walks its device's history grows with it.
"""

from __future__ import annotations

import logging
import time

import pytest
from django.db import connection

from qprint.domain import claim
from qprint.domain.events import record_device_event
from qprint.models import PrintJob
from tests.bench.common import latency_figures
from tests.bench.conftest import size
from tests.plans import generic_plan_buffers
from tests.qprint.factories import finished_jobs
from tests.qprint.helpers import connect, connect_read, event, make_device, submit

pytestmark = [pytest.mark.services, pytest.mark.slow]

CLAIMS = size(300, 100)
HISTORIES = (0, 5_000, 50_000) if size(True, False) else (0, 5_000)


def _claims(device, count: int) -> list[float]:
    """Wall time (ms) of ``count`` claims of ``device``, each job finished before the next."""
    wall = []
    for _ in range(count):
        submit(device)
        started = time.perf_counter()
        assignment = claim.claim_next_job(device.pk, node="bench")
        wall.append((time.perf_counter() - started) * 1000)
        for status in ("RECEIVED", "PRINTED"):
            record_device_event(device, assignment.job_id, event(assignment.claim_id, status))
    return wall


def test_device_history(transactional_db, bench_result):
    logging.disable(logging.INFO)  # one line per move: right in production, noise here
    try:
        figures = {}
        for history in HISTORIES:
            device = connect(make_device(name=f"history-{history}").device)
            finished_jobs(device, history)
            with connection.cursor() as cursor:
                cursor.execute(f"ANALYZE {PrintJob._meta.db_table}")
            _claims(device, 20)  # warm: the statement prepared and planned on the connection
            wall = _claims(device, CLAIMS)
            read = claim._AT_ONCE_BY_ID.statement(device_id=device.pk)
            connects = connect_read(device.token_hash)
            figures[str(history)] = {
                "claim": latency_figures(wall),
                "read_buffers": generic_plan_buffers(*read),
                "connect_read_buffers": generic_plan_buffers(*connects),
            }
            print(f"history {history}: {figures[str(history)]}")
    finally:
        logging.disable(logging.NOTSET)
    largest = str(HISTORIES[-1])
    figures["p50_largest_over_none"] = round(
        figures[largest]["claim"]["p50_ms"] / figures["0"]["claim"]["p50_ms"], 2
    )
    bench_result["figures"] = figures
