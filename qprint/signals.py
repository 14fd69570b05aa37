"""Signals a host application can react to. Each is sent after the change has committed.

- ``job_finished(sender=PrintJob, job, status)``: a job reached a final state (PRINTED, FAILED,
  OUTCOME_UNKNOWN, CANCELLED, EXPIRED). Sent once per job, after the transaction that made it final
  committed.
"""

from django.db import transaction
from django.dispatch import Signal

job_finished = Signal()


def send_job_finished_after_commit(job) -> None:
    """Send ``job_finished`` for ``job`` once the current transaction commits, with ``job`` as
    that transaction left it (the move that made it final set its status and times on it): no
    read of its own, which cost a statement and a tenth of a busy node's samples."""
    status = job.status

    def send() -> None:
        job_finished.send(sender=type(job), job=job, status=status)

    transaction.on_commit(send, robust=True)
