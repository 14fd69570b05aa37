"""Jobs a device holds: RECEIVED or SPOOLED on the server, so only the device can end them.

Two readers share the one predicate written here:

- the ``hello`` frame lists a device's active jobs (:func:`active_jobs`, read after
  :func:`qprint.domain.connection.take`, or :func:`active_jobs_column`, read in the statement of
  :func:`qprint.domain.connection.take_presented`) so that the agent answers each from its
  journal after every reconnect: it reports what it knows, and OUTCOME_UNKNOWN for a job it has
  no record of (docs/PROTOCOL.md, docs/AGENT.md);
- the admin's "stuck" filter (:func:`stuck`): active jobs received longer ago than
  ``QPRINT["STUCK_JOB_SECONDS"]``, the ones a person may want to look at.
"""

from datetime import timedelta
from typing import Any

from django.db.models import Expression, IntegerField, QuerySet
from django.db.models.functions import JSONObject, Now

from qprint.core.prepared import Param, PreparedQuery
from qprint.core.sql import Literal
from qprint.core.states import JobStatus
from qprint.models import PrintJob

ACTIVE_STATUSES = (JobStatus.RECEIVED, JobStatus.SPOOLED)


def active(queryset: QuerySet[PrintJob] | None = None) -> QuerySet[PrintJob]:
    return (queryset if queryset is not None else PrintJob.objects.all()).filter(
        status__in=[Literal(status.value) for status in ACTIVE_STATUSES]
    )


def _of(device: Expression) -> QuerySet[PrintJob]:
    """The active jobs of ``device`` (an expression of its id), oldest received first."""
    return active(PrintJob.objects.filter(device_id=device, claim_id__isnull=False)).order_by(
        "received_at", "created_at"
    )


#: A device's active jobs, oldest received first: read by every connect that
#: :func:`active_jobs_column` does not serve (prepared, :mod:`qprint.core.prepared`).
_ACTIVE_JOBS = PreparedQuery(
    lambda: _of(Param("device", IntegerField())).only("id", "claim_id", "status")
)


def active_jobs(device_id: int) -> tuple[tuple[str, str, str], ...]:
    """``(job_id, claim_id, status)`` of the device's active jobs, oldest received first."""
    return tuple(
        (str(job.pk), str(job.claim_id), job.status) for job in _ACTIVE_JOBS.all(device=device_id)
    )


def active_jobs_column(device: Expression) -> Expression:
    """The active jobs of ``device`` (an expression of its id, such as ``OuterRef("pk")``) as
    one column of an enclosing statement (PostgreSQL: an array of JSON objects, in
    :func:`active_jobs`'s order), so a statement that reads the device reads them too;
    :func:`active_jobs_of` reads the column."""
    from django.contrib.postgres.expressions import ArraySubquery  # psycopg: PostgreSQL only

    return ArraySubquery(
        _of(device).values(entry=JSONObject(job_id="id", claim_id="claim_id", status="status"))
    )


def active_jobs_of(column: list[dict[str, Any]] | None) -> tuple[tuple[str, str, str], ...]:
    """:func:`active_jobs` of a value of :func:`active_jobs_column`."""
    return tuple((e["job_id"], e["claim_id"], e["status"]) for e in column or ())


def stuck(queryset: QuerySet[PrintJob], seconds: float) -> QuerySet[PrintJob]:
    """Active jobs received more than ``seconds`` ago (database clock)."""
    return active(queryset).filter(received_at__lt=Now() - timedelta(seconds=seconds))
