"""The device HTTP API (docs/API.md): claim, download, report events, command results, printers.

Authenticated with the device token (``Authorization: Bearer``). A device sees only its own jobs
and commands: anything else is 404, never the object. The rules are the domain's: who may download
what (:func:`qprint.domain.jobs.job_for_download`), the claim, the events, the commands.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from qprint import documents, metrics
from qprint.domain import commands, devices, jobs
from qprint.domain.claim import claim_next_job
from qprint.domain.events import record_device_event
from qprint.models import Device
from qprint.serializers import assignment_object, command_object, event_object, printer_object
from qprint.views.http import (
    device_endpoint,
    json_response,
    read_json_object,
    read_json_value,
)


@metrics.measure_claim
@device_endpoint("POST")
def claim(request: HttpRequest, device: Device) -> HttpResponse:
    """200 the assignment (the same one again until the job leaves CLAIMED), 204 nothing."""
    assignment = claim_next_job(device.pk)
    if assignment is None:
        return HttpResponse(status=204)
    return json_response(assignment_object(request, assignment))


@device_endpoint("GET")
def job_document(request: HttpRequest, device: Device, job_id: str) -> HttpResponse:
    """The document's bytes; ``ETag`` is the quoted sha256 the device checks them against."""
    job = jobs.job_for_download(device, job_id)
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
    command = commands.record_result(device, command_id, body.get("status"), body.get("result"))
    return json_response(command_object(command))


@device_endpoint("PUT")
def printers(request: HttpRequest, device: Device) -> HttpResponse:
    """Replace the device's printers with the full list in the body."""
    body = read_json_value(request)
    if isinstance(body, dict) and "printers" in body:
        body = body["printers"]  # {"printers": [...]} or the bare list
    saved = devices.replace_printers(device, body)
    return json_response({"printers": [printer_object(p) for p in saved]})
