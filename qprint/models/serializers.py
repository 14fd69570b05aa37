"""The JSON objects of the HTTP APIs and the socket, built from the domain's rows (docs/API.md).

Pure functions from model instances to dicts: no query beyond what the caller prefetched or
annotated, no state. Datetimes are ISO 8601 in UTC; absent ones are ``null``.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.urls import get_script_prefix, get_urlconf, reverse


def timestamp(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def job_object(job) -> dict[str, Any]:
    """The job object of docs/API.md. ``job.device`` should be selected with the job."""
    return {
        "id": str(job.id),
        "device": job.device.name,
        "printer": job.printer,
        "title": job.title,
        "content_type": job.content_type,
        "size": job.size,
        "sha256": job.sha256,
        "status": job.status,
        "status_reason": job.status_reason,
        "priority": job.priority,
        "options": job.options,
        "created_at": timestamp(job.created_at),
        "claimed_at": timestamp(job.claimed_at),
        "received_at": timestamp(job.received_at),
        "finished_at": timestamp(job.finished_at),
        "expires_at": timestamp(job.expires_at),
        "reprint_of": str(job.reprint_of_id) if job.reprint_of_id else None,
    }


def event_object(event) -> dict[str, Any]:
    return {
        "event_id": str(event.event_id),
        "source": event.source,
        "type": event.type,
        "message": event.message,
        "detail": event.detail,
        "occurred_at": timestamp(event.occurred_at),
        "recorded_at": timestamp(event.recorded_at),
    }


def job_with_events(job, events) -> dict[str, Any]:
    """The job object plus its events, oldest first (``events`` comes ordered)."""
    return {**job_object(job), "events": [event_object(e) for e in events]}


def document_url(request: HttpRequest, job_id) -> str:
    """The document's absolute URL, as the HTTP claim answers it (built from the request)."""
    before, after = _document_url_around_id()
    return request.build_absolute_uri(f"{before}{job_id}{after}")


def document_path(job_id) -> str:
    """The document's URL relative to qprint's mount (``api/v1/device/jobs/<id>/document``), as
    the socket's assignment carries it: the agent resolves it against its own base URL."""
    before, after = _document_url_around_id()
    return f"{before[before.rindex('api/v1/device/jobs/') :]}{job_id}{after}"


#: A job id that stands for any in the URL :func:`_reversed_around_id` reverses.
_ANY_JOB = "00000000-0000-0000-0000-000000000000"


def _document_url_around_id() -> tuple[str, str]:
    """What comes before and after the job's id in the document's URL, as ``reverse`` gives it
    under the thread's URLconf and script prefix: reversed once for each pair. A ``reverse``
    for every assignment cost a node more than building the assignment's frame
    (docs/PERFORMANCE.md, "A cursor kept per statement")."""
    return _reversed_around_id(get_urlconf() or settings.ROOT_URLCONF, get_script_prefix())


@functools.lru_cache(maxsize=64)
def _reversed_around_id(urlconf, script_prefix: str) -> tuple[str, str]:
    """:func:`_document_url_around_id` for ``urlconf``, on a thread whose script prefix is
    ``script_prefix`` (``reverse`` reads it there)."""
    url = reverse("qprint:device-job-document", args=[_ANY_JOB], urlconf=urlconf)
    before, _, after = url.partition(_ANY_JOB)
    return before, after


def assignment_body(assignment) -> dict[str, Any]:
    """The domain's assignment (``qprint.domain.claim.Assignment``) as JSON, without the URL."""
    return {
        "job_id": str(assignment.job_id),
        "claim_id": str(assignment.claim_id),
        "printer": assignment.printer,
        "title": assignment.title,
        "content_type": assignment.content_type,
        "size": assignment.size,
        "sha256": assignment.sha256,
        "options": assignment.options,
        "priority": assignment.priority,
        "created_at": timestamp(assignment.created_at),
    }


def assignment_object(request: HttpRequest, assignment) -> dict[str, Any]:
    """The claim's 200 body: the domain's assignment plus the absolute ``document_url``."""
    return {
        **assignment_body(assignment),
        "document_url": document_url(request, assignment.job_id),
    }


def printer_object(printer) -> dict[str, Any]:
    return {
        "name": printer.name,
        "is_default": printer.is_default,
        "status": printer.status,
        "capabilities": printer.capabilities,
        "updated_at": timestamp(printer.updated_at),
    }


def device_object(summary) -> dict[str, Any]:
    """A device as the application sees it (``qprint.models.summaries.DeviceSummary``)."""
    return {
        "name": summary.name,
        "description": summary.description,
        "kind": summary.kind,
        "enabled": summary.enabled,
        "online": summary.online,
        "ready": summary.ready,
        "paused": summary.paused,
        "node": summary.node,
        "queue_depth": summary.queue_depth,
        "last_seen_at": timestamp(summary.last_seen_at),
        "control_revision": summary.control_revision,
        "settings_revision": summary.settings_revision,
        "agent_info": summary.agent_info,
        "printers": [printer_object(p) for p in summary.printers],
    }


def command_object(command) -> dict[str, Any]:
    return {
        "id": str(command.id),
        "type": command.type,
        "payload": command.payload,
        "status": command.status,
        "created_at": timestamp(command.created_at),
        "delivered_at": timestamp(command.delivered_at),
        "finished_at": timestamp(command.finished_at),
        "result": command.result,
    }


def print_overview_object(overview: dict[str, Any]) -> dict[str, Any]:
    """The admin's print overview (``qprint.domain.overview.print_overview``) as JSON, each row
    with the admin page it links to."""

    def job_url(job_id) -> str:
        return reverse("admin:qprint_printjob_change", args=[job_id])

    oldest = overview["oldest_queued"]
    return {
        "statuses": overview["statuses"],
        "last_hour": overview["last_hour"],
        "last_day": overview["last_day"],
        "to_look_at": [
            {
                **row,
                "id": str(row["id"]),
                "finished_at": timestamp(row["finished_at"]),
                "url": job_url(row["id"]),
            }
            for row in overview["to_look_at"]
        ],
        "to_look_at_total": overview["to_look_at_total"],
        "offline_with_queue": [
            {
                **row,
                "last_seen_at": timestamp(row["last_seen_at"]),
                "url": reverse("admin:qprint_device_change", args=[row["id"]]),
            }
            for row in overview["offline_with_queue"]
        ],
        "offline_with_queue_total": overview["offline_with_queue_total"],
        "oldest_queued": None
        if oldest is None
        else {
            **oldest,
            "id": str(oldest["id"]),
            "created_at": timestamp(oldest["created_at"]),
            "url": job_url(oldest["id"]),
        },
    }


def webhook_object(endpoint, secret: str | None = None) -> dict[str, Any]:
    """A webhook endpoint; ``secret`` only in the answer that made (or rotated) it."""
    data = {
        "id": str(endpoint.id),
        "url": endpoint.url,
        "events": endpoint.events,
        "description": endpoint.description,
        "created_at": timestamp(endpoint.created_at),
        "previous_secret_expires_at": timestamp(endpoint.previous_secret_expires_at),
    }
    if secret is not None:
        data["secret"] = secret
    return data


def delivery_object(delivery) -> dict[str, Any]:
    """One delivery of the outbox (``GET api/v1/webhooks/<id>/deliveries``), named by its
    ``event_id`` (the row's serial number would tell a tenant how much others send)."""
    return {
        "event_id": delivery.event_id,
        "type": delivery.type,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "last_status": delivery.last_status_code,
        "last_error": delivery.last_error,
        "next_attempt_at": timestamp(
            delivery.next_attempt_at if delivery.status in ("PENDING", "SENDING") else None
        ),
        "created_at": timestamp(delivery.created_at),
        "delivered_at": timestamp(delivery.delivered_at),
    }
