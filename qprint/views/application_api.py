"""The application HTTP API (docs/API.md): submit, inspect, cancel and reprint jobs; see and steer
devices.

Authenticated with an application key (``Authorization: Bearer``), which belongs to one tenant: a
job or device of another tenant is 404, never the object. Every read and change goes through the
domain (:mod:`qprint.domain.jobs`, :mod:`~qprint.domain.submission`,
:mod:`~qprint.domain.devices`, :mod:`~qprint.domain.commands`), the same code path as the admin
and host code.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from qprint.core.errors import QPrintError
from qprint.domain import commands, credentials, devices, jobs
from qprint.domain import submission as submissions
from qprint.models import ApplicationKey
from qprint.models.serializers import command_object, device_object, job_object, job_with_events
from qprint.models.summaries import DeviceSummary
from qprint.views.http import (
    application_endpoint,
    application_key,
    invalid,
    json_response,
    read_json_object,
    read_optional_options,
)
from qprint.views.pagination import paginate
from qprint.views.uploads import read_submission

#: Fields of a submission other than the document itself.
SUBMISSION_FIELDS = frozenset(
    {"device", "printer", "title", "content_type", "options", "priority", "expires_in"}
)


def submitted_by(key: ApplicationKey) -> str:
    return credentials.submitter(key.name)


@application_endpoint("GET", "POST", run_async=True, deferred=True)
def job_list(request: HttpRequest, key: ApplicationKey | credentials.PresentedKey) -> HttpResponse:
    if request.method == "POST":
        return submit(request, key)
    return list_jobs(request, application_key(key))


def submit(request: HttpRequest, key: ApplicationKey | credentials.PresentedKey) -> HttpResponse:
    """201 a new job; 200 the job already made under this ``Idempotency-Key`` (same body). A key
    only presented is matched by the submission's own statement; a body refused before it is
    answered after the key's standing (401, 429), as when the key was looked up first."""
    try:
        submission = read_submission(request)
        fields = submission.fields
        unknown = sorted(set(fields) - SUBMISSION_FIELDS)
        if unknown:
            raise invalid(unknown[0], "is not a field of a job submission")
        device = fields.get("device")
        if not isinstance(device, str) or not device:
            raise invalid("device", "is required (the device's name)")
    except QPrintError:
        application_key(key)
        raise
    kwargs: dict[str, Any] = {
        name: fields[name] for name in ("printer", "title", "options", "priority") if name in fields
    }
    if "title" in kwargs and kwargs["title"] is None:
        kwargs["title"] = ""
    if "expires_in" in fields:
        kwargs["expires_in"] = fields["expires_in"]
    presented = isinstance(key, credentials.PresentedKey)
    job, created = submissions.submit_job(
        key if presented else key.tenant,
        device,
        submission.content,
        submission.content_type,
        idempotency_key=request.headers.get("Idempotency-Key") or None,
        submitted_by="" if presented else submitted_by(key),
        **kwargs,
    )
    return json_response(job_object(job), status=201 if created else 200)


def list_jobs(request: HttpRequest, key: ApplicationKey) -> HttpResponse:
    """The tenant's jobs, newest first, optionally ``?device=`` and ``?status=``."""
    queryset = jobs.jobs_of(
        key.tenant, device=request.GET.get("device"), status=request.GET.get("status")
    )
    scope = jobs.jobs_of(key.tenant)
    return json_response(
        paginate(request, queryset, ("created_at", "id"), job_object, scope=scope, descending=True)
    )


@application_endpoint("GET")
def job_detail_now(request: HttpRequest, key: ApplicationKey, job_id: str) -> HttpResponse:
    """The job with its events, oldest first (``?wait=`` is :mod:`qprint.views.waiting`)."""
    job = jobs.get_job(key.tenant, job_id)
    return json_response(job_with_events(job, jobs.events_of(job)))


@application_endpoint("POST", run_async=True)
def job_cancel(request: HttpRequest, key: ApplicationKey, job_id: str) -> HttpResponse:
    """200 the job, cancelled or with its cancel asked of the device; 409 ``job_final``."""
    jobs.cancel_job(job_id, tenant=key.tenant, by=submitted_by(key))
    return json_response(job_object(jobs.get_job(key.tenant, job_id)))


@application_endpoint("POST")
def job_reprint(request: HttpRequest, key: ApplicationKey, job_id: str) -> HttpResponse:
    """201 the new job; 409 ``already_reprinted`` on a second reprint unless ``force``."""
    force = read_optional_options(request).get("force", False)
    if force in ("true", "false"):  # a form field
        force = force == "true"
    if not isinstance(force, bool):
        raise invalid("force", "must be true or false")
    reprint = submissions.reprint_job(job_id, tenant=key.tenant, force=force, by=submitted_by(key))
    return json_response(job_object(jobs.get_job(key.tenant, reprint.pk)), status=201)


@application_endpoint("GET")
def device_list(request: HttpRequest, key: ApplicationKey) -> HttpResponse:
    """The tenant's devices by name, paginated with ``?limit=&cursor=``."""
    queryset = devices.summaries(key.tenant)
    return json_response(
        paginate(request, queryset, ("name", "id"), _device_object, scope=queryset, key="name")
    )


def _device_object(device) -> dict[str, Any]:
    return device_object(DeviceSummary.of(device))


def _summary(key: ApplicationKey, name: str) -> HttpResponse:
    return json_response(device_object(devices.device_summary(key.tenant, name)))


@application_endpoint("GET")
def device_detail(request: HttpRequest, key: ApplicationKey, name: str) -> HttpResponse:
    return _summary(key, name)


@application_endpoint("POST")
def device_pause(request: HttpRequest, key: ApplicationKey, name: str) -> HttpResponse:
    """Pause the device (a new control revision); it stops claiming once it applied it."""
    devices.pause_device(devices.get_device(key.tenant, name))
    return _summary(key, name)


@application_endpoint("POST")
def device_resume(request: HttpRequest, key: ApplicationKey, name: str) -> HttpResponse:
    devices.resume_device(devices.get_device(key.tenant, name))
    return _summary(key, name)


@application_endpoint("PUT")
def device_settings(request: HttpRequest, key: ApplicationKey, name: str) -> HttpResponse:
    """Replace the device's settings with the JSON object in the body (a new revision)."""
    values = read_json_object(request)
    device = devices.update_settings(devices.get_device(key.tenant, name), values)
    return json_response({"revision": device.settings_revision, "values": device.settings})


@application_endpoint("POST")
def device_commands(request: HttpRequest, key: ApplicationKey, name: str) -> HttpResponse:
    """Queue a command ``{type, payload?}`` for the device; 201 the command."""
    body = read_json_object(request)
    command = commands.send_command(
        devices.get_device(key.tenant, name), body.get("type"), body.get("payload")
    )
    return json_response(command_object(command), status=201)
