"""The device HTTP API (SPEC 3.4): claim, download, report events, command results, printers.

Authenticated with the device token (``Authorization: Bearer``). A device sees only its own jobs
and commands: anything else is 404, never the object.
"""

from __future__ import annotations

import uuid

from django.db.models import Q
from django.http import HttpRequest, HttpResponse

from qprint import api, documents, metrics
from qprint.claim import claim_next_job
from qprint.errors import NotFound
from qprint.events import record_device_event
from qprint.models import Device, PrintJob
from qprint.serializers import assignment_object, command_object, event_object, printer_object
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


@metrics.measure_claim
@device_endpoint("POST")
def claim(request: HttpRequest, device: Device) -> HttpResponse:
    """200 the assignment (the same one again until the job leaves CLAIMED), 204 nothing."""
    assignment = claim_next_job(device.pk)
    if assignment is None:
        return HttpResponse(status=204)
    return json_response(assignment_object(request, assignment))


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


@device_endpoint("GET")
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


@metrics.measure_event
@device_endpoint("POST")
def job_events(request: HttpRequest, device: Device, job_id: str) -> HttpResponse:
    """201 a new event, 200 the replay of one already recorded (same id, same content)."""
    outcome = record_device_event(device, job_id, read_json_object(request))
    body = {
        **event_object(outcome.event),
        "job_id": str(outcome.job.pk),
        "job_status": outcome.job.status,
    }
    return json_response(body, status=201 if outcome.created else 200)


@device_endpoint("POST")
def command_result(request: HttpRequest, device: Device, command_id: str) -> HttpResponse:
    """The device reports how a command ended: ``{status: DONE|FAILED, result}``."""
    body = read_json_object(request)
    status = body.get("status")
    if status not in ("DONE", "FAILED"):
        raise invalid("status", "must be DONE or FAILED")
    command = api.record_command_result(device, command_id, status, body.get("result"))
    return json_response(command_object(command))


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
