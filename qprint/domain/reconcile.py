"""Jobs a device holds: RECEIVED or SPOOLED on the server, so only the device can end them.

Two readers share the one predicate written here:

- the ``hello`` frame lists a device's active jobs (:func:`active_jobs`, read by
  :func:`qprint.domain.connection.take`) so that the agent answers each from its journal after
  every reconnect: it reports what it knows, and OUTCOME_UNKNOWN for a job it has no record of
  (docs/PROTOCOL.md, docs/AGENT.md);
- the admin's "stuck" filter (:func:`stuck`): active jobs received longer ago than
  ``QPRINT["STUCK_JOB_SECONDS"]``, the ones a person may want to look at.
"""

from datetime import timedelta

from django.db.models import IntegerField, QuerySet
from django.db.models.functions import Now

from qprint.core.prepared import Param, PreparedQuery
from qprint.core.states import JobStatus
from qprint.models import PrintJob

ACTIVE_STATUSES = (JobStatus.RECEIVED, JobStatus.SPOOLED)


def active(queryset: QuerySet[PrintJob] | None = None) -> QuerySet[PrintJob]:
    return (queryset if queryset is not None else PrintJob.objects.all()).filter(
        status__in=ACTIVE_STATUSES
    )


#: A device's active jobs, oldest received first: read by every connect (prepared,
#: :mod:`qprint.core.prepared`).
_ACTIVE_JOBS = PreparedQuery(
    lambda: (
        active(
            PrintJob.objects.filter(
                device_id=Param("device", IntegerField()), claim_id__isnull=False
            )
        )
        .order_by("received_at", "created_at")
        .only("id", "claim_id", "status")
    )
)


def active_jobs(device_id: int) -> tuple[tuple[str, str, str], ...]:
    """``(job_id, claim_id, status)`` of the device's active jobs, oldest received first."""
    return tuple(
        (str(job.pk), str(job.claim_id), job.status) for job in _ACTIVE_JOBS.all(device=device_id)
    )


def stuck(queryset: QuerySet[PrintJob], seconds: float) -> QuerySet[PrintJob]:
    """Active jobs received more than ``seconds`` ago (database clock)."""
    return active(queryset).filter(received_at__lt=Now() - timedelta(seconds=seconds))
