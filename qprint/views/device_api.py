"""The device HTTP API (docs/API.md): claim, download, report events, command results, printers.

Authenticated with the device token (``Authorization: Bearer``): looked up before the view runs,
or, for the claim, the download and the event (``deferred``), matched in the operation's own
statement with the same answers (:class:`qprint.domain.credentials.PresentedToken`). A device
sees only its own jobs and commands: anything else is 404, never the object. The rules are the
domain's: who may download what (:func:`qprint.domain.jobs.job_for_download`), the claim, the
events, the commands.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse

from qprint.core import wire
from qprint.core.conf import qprint_settings
from qprint.core.database import answer_of
from qprint.core.errors import Invalid
from qprint.core.text import digits
from qprint.domain import device_operations, devices, jobs
from qprint.domain.credentials import PresentedToken
from qprint.metrics import instruments
from qprint.models import Device
from qprint.models.serializers import document_url, printer_object
from qprint.views.http import (
    device_endpoint,
    json_response,
    read_json_object,
    read_json_value,
    read_presented_json_value,
)

logger = logging.getLogger("qprint.http")


@instruments.measure_claim
@device_endpoint("POST", run_async=True, deferred=True)
def claim(request: HttpRequest, presented: PresentedToken) -> HttpResponse:
    """200 the assignment (the same one again until the job leaves CLAIMED), 204 nothing. The
    token is matched in the claim's own lock (``deferred``). ``Qprint-Inline-Max-Bytes: N`` asks
    for the document inline (``document_base64``) when it has at most N bytes."""
    answer = device_operations.claim(
        presented,
        lambda job_id: document_url(request, job_id),
        inline_asked=lambda: _inline_max_asked(request),
    )
    if answer.body is None:
        return HttpResponse(status=204)
    response = json_response(answer.body, status=answer.status)
    if answer.queued is not None:
        response[wire.MORE_QUEUED_HEADER] = "true" if answer.queued else "false"
    return response


def _inline_max_asked(request: HttpRequest) -> int | None:
    """The claim's ``Qprint-Inline-Max-Bytes``, capped by ``QPRINT["INLINE_DOCUMENT_MAX_BYTES"]``;
    None when the header is absent. 422 ``invalid`` unless it is a non-negative integer."""
    text = request.headers.get(wire.INLINE_MAX_HEADER)
    if text is None:
        return None
    text = text.strip()
    if not digits(text):
        raise Invalid(message=f"'{wire.INLINE_MAX_HEADER}' must be a non-negative integer.")
    cap = int(qprint_settings.INLINE_DOCUMENT_MAX_BYTES)
    # More digits than any cap has is the cap, without reading so long a number.
    return cap if len(text) > _INLINE_MAX_DIGITS else min(int(text), cap)


#: More digits than any cap could need.
_INLINE_MAX_DIGITS = 18


@device_endpoint("GET", run_async=True, deferred=True)
def job_document(request: HttpRequest, presented: PresentedToken, job_id: str) -> HttpResponse:
    """The document's bytes; ``ETag`` is the quoted sha256 the device checks them against. The
    token is matched in the statement that reads the job and its document (``deferred``)."""
    download = jobs.job_for_download(presented, job_id)
    etag = f'"{download.job.sha256}"'
    if request.headers.get("If-None-Match") == etag:
        return HttpResponse(status=304, headers={"ETag": etag})
    job, content = download.job, download.content()
    response = HttpResponse(content, content_type=job.content_type)
    response["Content-Length"] = str(len(content))
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-store"
    return response


@instruments.measure_event
@device_endpoint("POST", run_async=True, deferred=True)
def job_events(request: HttpRequest, presented: PresentedToken, job_id: str) -> HttpResponse:
    """201 a new event, 200 the replay of one already recorded (same id, same content). A list
    of events is answered 200 ``{"results": [...]}``, one answer per event in order, each as it
    would have been alone (``{status, event}`` or ``{status, error, message}``). The token is
    matched in the event's own lock (``deferred``)."""
    body = read_presented_json_value(request, presented)
    if isinstance(body, list):
        answers = device_operations.presented_events(presented, job_id, body)
        results = [_event_result(answer) for answer in answers]
        response = json_response({wire.RESULTS: results})
        several = [(result["status"], result.get("error", "")) for result in results]
        setattr(response, instruments.SEVERAL_ANSWERS, several)
        return response
    answer = device_operations.event(presented, job_id, body)
    return json_response(answer.body, status=answer.status)


def _event_result(answer: device_operations.Answer | Exception) -> dict[str, Any]:
    """One event's answer in a list's ``results``: what the socket's answer frame carries."""
    if isinstance(answer, device_operations.Answer):
        return {"status": answer.status, "event": answer.body}
    if isinstance(answer, DatabaseError):
        logger.warning("api_event_failed error=%r", answer)
    status, code, message = answer_of(answer)
    return {"status": status, "error": code, "message": message}


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
        body = body["printers"]  # {"printers": [...]} or the bare list
    saved = devices.replace_printers(device, body)
    return json_response({"printers": [printer_object(p) for p in saved]})
