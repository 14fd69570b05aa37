"""What the CloudPRNT endpoint's tests submit and read back: a StarPRNT receipt submitted to the
device of the ``made`` fixture (tests/qprint/cloudprnt/conftest.py), the job's row, its events."""

from qprint import api
from qprint.models import PrintJob, PrintJobEvent

STARPRNT = b"\x1b\x1d\x61\x01Receipt 42\n\x1bd\x02"


def submit(content=STARPRNT, content_type="application/vnd.star.starprnt", **kwargs):
    job, _ = api.submit_job("acme", "counter", content, content_type, **kwargs)
    return job


def job_of(job):
    return PrintJob.objects.get(pk=job.pk)


def event_types(job):
    return list(
        PrintJobEvent.objects.filter(job_id=job.pk)
        .order_by("recorded_at", "id")
        .values_list("type", flat=True)
    )
