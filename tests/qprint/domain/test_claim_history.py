"""A device's history does not lengthen its claims.

Every claim and every wakeup of a device's socket reads the device's row in one prepared
statement (``qprint.domain.claim``), with the job the device holds and its next claimable job. A
deployment's pooled connections run it with a generic plan (``plan_cache_mode =
force_generic_plan``, docs/INSTALL.md), planned without its parameters' values. The held job's
status was one of them: the plan could not use the partial index that holds at most one job per
device, and read the device's jobs one by one, all of them when the device held none (50,000
finished jobs: 1,700 buffers and 9 ms per claim). Here the statement runs under its generic plan
for a device with no history and for one with thousands of finished jobs, and reads about as
many buffers for both.
"""

import datetime
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from qprint.domain import claim
from qprint.models import PrintJob
from tests.qprint.factories import make_device
from tests.qprint.helpers import submit

pytestmark = [pytest.mark.services, pytest.mark.django_db]

HISTORY = 3000


def _type(value) -> str:
    """The SQL type of a parameter's Python value (an enum's value by its base type)."""
    for python, sql in ((bool, "boolean"), (int, "bigint"), (str, "text"), (uuid.UUID, "uuid")):
        if isinstance(value, python):
            return sql
    raise TypeError(f"no SQL type for {value!r}")


def _generic_plan_buffers(sql: str, params: list) -> int:
    """The shared buffers ``sql`` (``%s`` placeholders) touches when it runs under its generic
    plan: prepared with its parameters' types, explained with ANALYZE as it runs."""
    pieces = sql.split("%s")
    assert len(pieces) == len(params) + 1
    numbered = "".join(f"{piece}${n}" for n, piece in enumerate(pieces[:-1], 1)) + pieces[-1]
    types = ", ".join(_type(value) for value in params)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE history_read ({types}) AS {numbered.replace('%%', '%')}")
        try:
            arguments = ", ".join(["%s"] * len(params))
            cursor.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE history_read ({arguments})",
                params,
            )
            plan = cursor.fetchone()[0][0]["Plan"]
        finally:
            cursor.execute("DEALLOCATE history_read")
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


def _with_history(device, jobs: int) -> None:
    """``jobs`` PRINTED jobs of ``device``, a minute apart, the newest an hour ago."""
    now = timezone.now()
    PrintJob.objects.bulk_create(
        PrintJob(
            tenant=device.tenant,
            device=device,
            content_type="application/pdf",
            size=10,
            sha256="0" * 64,
            status="PRINTED",
            claim_id=uuid.uuid4(),
            finished_at=now - datetime.timedelta(hours=1, minutes=n),
        )
        for n in range(jobs)
    )


def test_the_claims_read_of_a_device_with_thousands_of_finished_jobs_reads_a_few_pages():
    if connection.vendor != "postgresql":
        pytest.skip("generic plans are PostgreSQL's")
    quiet = make_device(name="quiet").device
    busy = make_device(name="busy").device
    _with_history(busy, HISTORY)
    for device in (quiet, busy):
        submit(device)  # a job to claim: the read finds the next one through its own index
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {PrintJob._meta.db_table}")

    read = {
        device.name: _generic_plan_buffers(*claim._AT_ONCE_BY_ID.statement(device_id=device.pk))
        for device in (quiet, busy)
    }

    # With the status a parameter, the generic plan read the busy device's history: 103 buffers
    # here against 12 (1,700 against 50 with 50,000 finished jobs).
    assert read["busy"] <= read["quiet"] + 10, read
