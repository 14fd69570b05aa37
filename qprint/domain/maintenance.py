"""Expiry and retention: the two periodic tasks of qprint, run as ``qcluster`` singleton tasks.

- :func:`expire_jobs`: a job whose ``expires_at`` passed (database clock) before the device
  received it moves QUEUED/CLAIMED -> EXPIRED with a server event. Each job is re-checked under its
  row lock, so a job the device reported RECEIVED meanwhile is left alone.
- :func:`qprint.domain.cloudprnt.expire_unconfirmed` (run with the job expiry): a job a CloudPRNT
  printer fetched and did not confirm within ``QPRINT["CLOUDPRNT_CONFIRM_SECONDS"]`` ends
  OUTCOME_UNKNOWN.
- :func:`qprint.domain.commands.expire_commands` (run with the job expiry): a device command
  still PENDING or DELIVERED ``JOB_TTL_SECONDS`` after it was created is EXPIRED.
- :func:`delete_old_jobs`: final jobs whose ``finished_at`` is older than
  ``QPRINT["JOB_RETENTION_DAYS"]`` are deleted with their documents and events.

Both work in bounded batches, so one run never holds a long transaction; a crash mid-run is
redone by the next run (each step is idempotent).
"""

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models.functions import Now

from qprint.core import cluster
from qprint.core.conf import qprint_settings
from qprint.core.states import EXPIRABLE, FINAL, JobStatus
from qprint.documents import storage
from qprint.domain import cloudprnt, commands, enrolment, events, throttle
from qprint.models import PrintJob

logger = logging.getLogger("qprint.maintenance")

BATCH = 200
MAX_BATCHES = 25

EXPIRE_TASK = "qprint.expire-jobs"
RETENTION_TASK = "qprint.delete-old-jobs"
RETENTION_EVERY = timedelta(hours=1)


def expire_jobs(batch: int = BATCH) -> int:
    """Expire the jobs past their ``expires_at`` not yet received; returns how many."""
    expired = 0
    for _round in range(MAX_BATCHES):
        due = list(
            PrintJob.objects.filter(status__in=EXPIRABLE, expires_at__lt=Now())
            .order_by("expires_at")
            .values_list("pk", flat=True)[:batch]
        )
        for job_id in due:
            with transaction.atomic():
                job = (
                    PrintJob.objects.select_for_update(of=("self",), no_key=True)
                    .filter(pk=job_id, status__in=EXPIRABLE, expires_at__lt=Now())
                    .first()
                )
                if job is not None and events.move_by_server(
                    job, JobStatus.EXPIRED, reason="expired before the device received it"
                ):
                    expired += 1
        if len(due) < batch:
            break
    if expired:
        logger.info("jobs_expired count=%s", expired)
    return expired


def expire() -> None:
    """The periodic expiry task: jobs, unconfirmed CloudPRNT jobs, then commands."""
    expire_jobs()
    cloudprnt.expire_unconfirmed()
    commands.expire_commands()


def delete_old_jobs(batch: int = BATCH, retention_days: int | None = None) -> int:
    """Delete final jobs finished more than ``JOB_RETENTION_DAYS`` ago. Returns how many jobs."""
    days = qprint_settings.JOB_RETENTION_DAYS if retention_days is None else retention_days
    cutoff = Now() - timedelta(days=days)
    deleted = 0
    for _round in range(MAX_BATCHES):
        old = list(
            PrintJob.objects.filter(status__in=FINAL, finished_at__lt=cutoff).values_list(
                "pk", flat=True
            )[:batch]
        )
        if not old:
            break
        with transaction.atomic():
            storage.delete_documents(old)
            _count, per_model = PrintJob.objects.filter(
                pk__in=old, status__in=FINAL, finished_at__lt=cutoff
            ).delete()
        deleted += per_model.get(PrintJob._meta.label, 0)
        if len(old) < batch:
            break
    if deleted:
        logger.info("jobs_deleted count=%s retention_days=%s", deleted, days)
    return deleted


def retain() -> None:
    """The periodic retention task: old final jobs, ended authentication-failure windows and
    expired enrolments."""
    delete_old_jobs()
    throttle.purge()
    enrolment.purge_expired()


def register_tasks() -> None:
    """Register both tasks as qcluster singleton tasks (called from ``QPrintConfig.ready``); the
    expiry task runs every ``QPRINT["EXPIRY_SECONDS"]``."""
    every = timedelta(seconds=qprint_settings.EXPIRY_SECONDS)
    cluster.register_task(EXPIRE_TASK, every, expire)
    cluster.register_task(RETENTION_TASK, RETENTION_EVERY, retain)
