"""Signals a host application can react to. Each is sent after the change has committed.

- ``job_finished(sender=PrintJob, job, status)``: a job reached a final state (PRINTED, FAILED,
  OUTCOME_UNKNOWN, CANCELLED, EXPIRED). Sent once per job, after the transaction that made it final
  committed.
"""

from django.db import transaction
from django.dispatch import Signal

job_finished = Signal()


def send_job_finished_after_commit(job) -> None:
    """Send ``job_finished`` for ``job`` once the current transaction commits."""
    from qprint.models import PrintJob

    job_id = job.pk

    def send() -> None:
        fresh = PrintJob.objects.filter(pk=job_id).first()
        if fresh is not None:
            job_finished.send(sender=PrintJob, job=fresh, status=fresh.status)

    transaction.on_commit(send, robust=True)
