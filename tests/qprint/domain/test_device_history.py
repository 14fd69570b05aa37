"""A device's history does not lengthen its claims nor its connects.

A device keeps its finished jobs for ``JOB_RETENTION_DAYS``. The statements that read a device's
jobs on the job path are prepared, and a deployment's pooled connections plan each once without
its parameters' values (a generic plan: ``plan_cache_mode = force_generic_plan``,
docs/INSTALL.md). The statuses those statements look for were parameters: the plan could not use
the partial indexes on them nor weigh them by the column's statistics, and it read the device's
jobs one by one, its whole history, or the whole job table, to find the one or two it wanted
(50,000 finished jobs: 1,700 buffers and 9 ms per claim; 30,000: about 910 buffers and 8 ms per
connect). Here each statement runs under its generic plan for a device with no history and for
one with thousands of finished jobs, and reads a few pages for both.
"""

import pytest
from django.db import connection

from qprint.domain import claim, reconcile
from qprint.models import PrintJob
from tests.plans import generic_plan_buffers
from tests.qprint.factories import finished_jobs, make_device
from tests.qprint.helpers import connect_read, submit

pytestmark = [pytest.mark.services, pytest.mark.django_db]

HISTORY = 30_000

#: Each statement of the job path that reads a device's jobs by status, and its values.
READS = {
    # Every claim, and every wakeup of a socket: the device, its held job, its next job.
    "claim": lambda device: claim._AT_ONCE_BY_ID.statement(device_id=device.pk),
    # Every connect of an agent: the device by its token, with its active jobs.
    "connect": lambda device: connect_read(device.token_hash),
    # Every connect through a socket's own take: the active jobs alone.
    "active jobs": lambda device: reconcile._ACTIVE_JOBS.statement(device=device.pk),
}


def test_the_reads_of_a_device_with_thousands_of_finished_jobs_read_a_few_pages():
    if connection.vendor != "postgresql":
        pytest.skip("generic plans are PostgreSQL's")
    quiet = make_device(name="quiet").device
    busy = make_device(name="busy").device
    finished_jobs(busy, HISTORY)
    for device in (quiet, busy):
        submit(device)  # a job to claim: the claim's read finds it through its own index
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {PrintJob._meta.db_table}")

    buffers = {
        read: {device.name: generic_plan_buffers(*of(device)) for device in (quiet, busy)}
        for read, of in READS.items()
    }

    # With the statuses parameters (30,000 jobs): the claim 1,037 buffers for the busy device
    # (13 for the quiet one); each connect read about 910 for both, the whole job table.
    assert all(n <= 40 for reads in buffers.values() for n in reads.values()), buffers
