"""Read-only figures for the person on call: the print overview (docs/ADMIN.md).

Every query here is bounded and served by an index, so the overview may refresh every few
seconds on a busy database (``tests/qprint/test_overview.py`` checks the plans on PostgreSQL):

- jobs per status created in the last hour and the last day: a range of
  ``qprint_job_created_idx`` (``created_at, status``);
- jobs to look at, FAILED or OUTCOME_UNKNOWN and finished in the last day, newest first, at most
  :data:`LIMIT`: the partial index ``qprint_job_trouble_idx``;
- devices without a live connection that have QUEUED jobs (the shared predicates
  ``live_connection()`` and ``Device.objects.with_queue_depth()``), deepest queue first, at most
  :data:`LIMIT`: one probe of ``qprint_job_next_idx`` per device;
- the oldest QUEUED job and its age: the first row of the partial index ``qprint_job_queued_idx``.

Times and ages are on the database clock. The JSON of the admin's refresh is
``qprint.models.serializers.print_overview_object``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    QuerySet,
    Value,
)
from django.db.models.functions import Now

from qprint.core.states import JobStatus
from qprint.models import Device, PrintJob
from qprint.models.querysets import live_connection

#: At most this many rows in each list of the overview.
LIMIT = 10

#: Outcomes an operator should look at: the job did not print, or nobody knows whether it did.
TO_LOOK_AT = (JobStatus.FAILED, JobStatus.OUTCOME_UNKNOWN)

WINDOWS = {"last_hour": timedelta(hours=1), "last_day": timedelta(days=1)}


def _ago(window: timedelta) -> ExpressionWrapper:
    """``now() - window`` on the database clock."""
    return ExpressionWrapper(Now() - Value(window), output_field=DateTimeField())


def jobs_per_status(window: timedelta) -> dict[str, int]:
    """Jobs created within ``window`` (database clock), counted per status (every status)."""
    rows = (
        PrintJob.objects.filter(created_at__gte=_ago(window))
        .order_by()
        .values_list("status")
        .annotate(n=Count("*"))
    )
    counts = dict(rows)
    return {status: int(counts.get(status, 0)) for status in JobStatus.values}


def jobs_to_look_at(limit: int = LIMIT) -> tuple[list[dict[str, Any]], int]:
    """FAILED and OUTCOME_UNKNOWN jobs finished in the last day, newest first: ``(rows, total)``."""
    recent = PrintJob.objects.filter(
        status__in=TO_LOOK_AT, finished_at__gte=_ago(WINDOWS["last_day"])
    )
    rows = recent.order_by("-finished_at").values(
        "id", "title", "status", "status_reason", "finished_at", "device__tenant", "device__name"
    )[:limit]
    return [
        {
            "id": row["id"],
            "title": row["title"],
            "status": row["status"],
            "status_reason": row["status_reason"],
            "finished_at": row["finished_at"],
            "device": f"{row['device__tenant']}/{row['device__name']}",
        }
        for row in rows
    ], recent.count()


def offline_with_queued_jobs() -> QuerySet:
    """ "Devices offline with queued jobs", the one definition (the overview and ``/metrics``):
    devices without a live connection that have QUEUED jobs, annotated ``queue_depth``. Disabled
    devices count: their jobs wait all the same."""
    return Device.objects.exclude(live_connection()).with_queue_depth().filter(queue_depth__gt=0)


def offline_devices_with_queued_jobs(limit: int = LIMIT) -> tuple[list[dict[str, Any]], int]:
    """:func:`offline_with_queued_jobs`, deepest queue first: ``(rows, total)``."""
    offline = offline_with_queued_jobs()
    rows = offline.order_by("-queue_depth", "tenant", "name").values(
        "id", "tenant", "name", "enabled", "queue_depth", "last_seen_at"
    )[:limit]
    return [
        {
            "id": row["id"],
            "device": f"{row['tenant']}/{row['name']}",
            "enabled": row["enabled"],
            "queue_depth": int(row["queue_depth"]),
            "last_seen_at": row["last_seen_at"],
        }
        for row in rows
    ], offline.count()


def oldest_queued_job() -> dict[str, Any] | None:
    """The QUEUED job that has waited longest, with its age in seconds, or None (the overview and
    ``/metrics``)."""
    age = ExpressionWrapper(Now() - F("created_at"), output_field=DurationField())
    row = (
        PrintJob.objects.filter(status=JobStatus.QUEUED)
        .order_by("created_at")
        .annotate(age=age)
        .values("id", "title", "created_at", "age", "device__tenant", "device__name")
        .first()
    )
    if row is None:
        return None
    return {
        "id": row["id"],
        "title": row["title"],
        "device": f"{row['device__tenant']}/{row['device__name']}",
        "created_at": row["created_at"],
        "age_seconds": max(0.0, round(row["age"].total_seconds(), 1)),
    }


def print_overview() -> dict[str, Any]:
    """The whole overview: ``{"statuses", "last_hour", "last_day", "to_look_at",
    "to_look_at_total", "offline_with_queue", "offline_with_queue_total", "oldest_queued"}``."""
    to_look_at, to_look_at_total = jobs_to_look_at()
    offline, offline_total = offline_devices_with_queued_jobs()
    return {
        "statuses": list(JobStatus.values),
        **{name: jobs_per_status(window) for name, window in WINDOWS.items()},
        "to_look_at": to_look_at,
        "to_look_at_total": to_look_at_total,
        "offline_with_queue": offline,
        "offline_with_queue_total": offline_total,
        "oldest_queued": oldest_queued_job(),
    }
