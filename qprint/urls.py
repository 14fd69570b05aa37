"""HTTP routes of qprint (docs/API.md), mounted by the host (e.g. at ``qprint/``).

``docs/openapi.yaml`` describes every route here; ``tests/qprint/views/test_openapi.py`` keeps
the two in step.

Ids in paths are matched as plain segments and parsed by the views, so a malformed id is answered
like an unknown one: JSON 404 ``not_found``, not Django's HTML page.
"""

from django.urls import path

from qprint.cloudprnt import views as cloudprnt_views
from qprint.views import (
    application_api,
    device_api,
    enrolment_api,
    previews,
    waiting,
    webhooks_api,
)

app_name = "qprint"

urlpatterns = [
    # Device API (bearer device token).
    path("api/v1/device/claim", device_api.claim, name="device-claim"),
    path(
        "api/v1/device/jobs/<str:job_id>/document",
        device_api.job_document,
        name="device-job-document",
    ),
    path("api/v1/device/jobs/<str:job_id>/events", device_api.job_events, name="device-job-events"),
    path(
        "api/v1/device/commands/<str:command_id>/result",
        device_api.command_result,
        name="device-command-result",
    ),
    path("api/v1/device/printers", device_api.printers, name="device-printers"),
    # Enrolment by code (no credentials: the device code is the secret).
    path("api/v1/device/enrollments", enrolment_api.enrollments, name="device-enrollments"),
    path(
        "api/v1/device/enrollments/token",
        enrolment_api.enrollment_token,
        name="device-enrollment-token",
    ),
    # Star CloudPRNT printers (HTTP Basic: the device's name and token): docs/CLOUDPRNT.md.
    path("cloudprnt/", cloudprnt_views.endpoint, name="cloudprnt"),
    # Application API (bearer application key, one tenant).
    path("api/v1/jobs", application_api.job_list, name="jobs"),
    path("api/v1/jobs/<str:job_id>", waiting.job_detail, name="job-detail"),
    path("api/v1/jobs/<str:job_id>/cancel", application_api.job_cancel, name="job-cancel"),
    path("api/v1/jobs/<str:job_id>/reprint", application_api.job_reprint, name="job-reprint"),
    path("api/v1/jobs/<str:job_id>/preview.png", previews.job_preview, name="job-preview"),
    path("api/v1/devices", application_api.device_list, name="devices"),
    path("api/v1/devices/<str:name>", application_api.device_detail, name="device-detail"),
    path("api/v1/devices/<str:name>/pause", application_api.device_pause, name="device-pause"),
    path("api/v1/devices/<str:name>/resume", application_api.device_resume, name="device-resume"),
    path(
        "api/v1/devices/<str:name>/settings",
        application_api.device_settings,
        name="device-settings",
    ),
    path(
        "api/v1/devices/<str:name>/commands",
        application_api.device_commands,
        name="device-commands",
    ),
    # Webhooks (bearer application key, one tenant).
    path("api/v1/webhooks", webhooks_api.webhooks, name="webhooks"),
    path("api/v1/webhooks/<str:webhook_id>", webhooks_api.webhook_detail, name="webhook-detail"),
    path(
        "api/v1/webhooks/<str:webhook_id>/deliveries",
        webhooks_api.webhook_deliveries,
        name="webhook-deliveries",
    ),
    path("api/v1/webhooks/<str:webhook_id>/test", webhooks_api.webhook_test, name="webhook-test"),
    path(
        "api/v1/webhooks/<str:webhook_id>/rotate-secret",
        webhooks_api.webhook_rotate_secret,
        name="webhook-rotate-secret",
    ),
]
