"""The device HTTP API (SPEC 3.4): claim, download, report events, command results, printers.

Authenticated with the device token (``Authorization: Bearer``). A device sees only its own jobs
and commands: anything else is 404, never the object.
"""

from __future__ import annotations

import uuid

from django.db.models import Q
from django.http import HttpRequest, HttpResponse

from qprint import api, device_operations, documents
from qprint.errors import NotFound
from qprint.models import Device, PrintJob
from qprint.serializers import document_url, printer_object
from qprint.states import JobStatus
from qprint.views.http import (
    device_endpoint,
    invalid,
    json_response,
    read_json_object,
    read_json_value,
)

#: Statuses in which the device that holds the job may (re)download its document.
DOWNLOADABLE_AFTER_CLAIM = (JobStatus.RECEIVED, JobStatus.SPOOLED)


@device_endpoint("POST", run_async=True)
def claim(request: HttpRequest, device: Device) -> HttpResponse:
    """200 the assignment (the same one again until the job leaves CLAIMED), 204 nothing."""
    answer = device_operations.claim(device.pk, lambda job_id: document_url(request, job_id))
    if answer.body is None:
        return HttpResponse(status=204)
    return json_response(answer.body, status=answer.status)


def downloadable_job(device: Device, job_id: str) -> PrintJob:
    """The job whose document ``device`` may fetch: it holds the job's current claim, or the job
    is RECEIVED/SPOOLED on it (a retried download after a crash). Anything else is 404."""
    try:
        job_id = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound(message="No such job to download on this device.") from None
    job = (
        PrintJob.objects.filter(pk=job_id, device=device)
        .filter(Q(status=JobStatus.CLAIMED) | Q(status__in=DOWNLOADABLE_AFTER_CLAIM))
        .only("id", "content_type", "size", "sha256", "claim_id", "status")
        .first()
    )
    if job is None:
        raise NotFound(message="No such job to download on this device.")
    return job


@device_endpoint("GET", run_async=True)
def job_document(request: HttpRequest, device: Device, job_id: str) -> HttpResponse:
    """The document's bytes; ``ETag`` is the quoted sha256 the device checks them against."""
    job = downloadable_job(device, job_id)
    etag = f'"{job.sha256}"'
    if request.headers.get("If-None-Match") == etag:
        return HttpResponse(status=304, headers={"ETag": etag})
    content = documents.open_document(job)
    response = HttpResponse(content, content_type=job.content_type)
    response["Content-Length"] = str(len(content))
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-store"
    return response


@device_endpoint("POST", run_async=True)
def job_events(request: HttpRequest, device: Device, job_id: str) -> HttpResponse:
    """201 a new event, 200 the replay of one already recorded (same id, same content)."""
    answer = device_operations.event(device, job_id, read_json_object(request))
    return json_response(answer.body, status=answer.status)


@device_endpoint("POST", run_async=True)
def command_result(request: HttpRequest, device: Device, command_id: str) -> HttpResponse:
    """The device reports how a command ended: ``{status: DONE|FAILED, result}``."""
    answer = device_operations.command_result(device, command_id, read_json_object(request))
    return json_response(answer.body, status=answer.status)


@device_endpoint("PUT")
def printers(request: HttpRequest, device: Device) -> HttpResponse:
    """Replace the device's printers with the full list in the body."""
    body = read_json_value(request)
    if isinstance(body, dict) and "printers" in body:
        body = body["printers"]
    if not isinstance(body, list):
        raise invalid("printers", "must be a list of printers")
    saved = api.replace_printers(device, body)
    return json_response({"printers": [printer_object(p) for p in saved]})
