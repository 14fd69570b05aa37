"""qprint's Python API for host code: every operation the HTTP API, the admin and the commands use.

One code path per operation, whoever calls it. Each mutation runs in one transaction and wakes the
device after it commits, so a device never hears of a change it cannot yet see. Refusals raise
:mod:`qprint.core.errors` exceptions carrying the error codes of docs/API.md.

    from qprint import api
    job, created = api.submit_job("acme", "front-desk", pdf_bytes, "application/pdf",
                                  title="Invoice 42", idempotency_key="invoice-42")
    api.cancel_job(job)

This module is a facade: each name lives in the domain module that owns its rule
(:mod:`qprint.domain.jobs`, :mod:`~qprint.domain.submission`, :mod:`~qprint.domain.devices`,
:mod:`~qprint.domain.commands`, :mod:`~qprint.domain.credentials`, :mod:`~qprint.domain.claim`,
:mod:`~qprint.domain.events`).
"""

from qprint.domain.claim import Assignment, claim_next_job
from qprint.domain.cloudprnt import forget_printer
from qprint.domain.commands import pending_commands, send_command
from qprint.domain.commands import record_result as record_command_result
from qprint.domain.credentials import (
    create_application_key,
    create_device,
    revoke_application_key,
    rotate_device_token,
)
from qprint.domain.devices import (
    device_summary,
    disable_device,
    enable_device,
    get_device,
    list_devices,
    pause_device,
    replace_printers,
    resume_device,
    set_device_enabled,
    update_settings,
)
from qprint.domain.events import EventOutcome, record_device_event
from qprint.domain.jobs import cancel_job, get_job
from qprint.domain.submission import (
    ACCEPTED_CONTENT_TYPES,
    DEFAULT_TTL,
    MAX_PRIORITY,
    reprint_job,
    submit_job,
)
from qprint.models.summaries import DeviceSummary

__all__ = [
    "ACCEPTED_CONTENT_TYPES",
    "DEFAULT_TTL",
    "MAX_PRIORITY",
    "Assignment",
    "DeviceSummary",
    "EventOutcome",
    "cancel_job",
    "claim_next_job",
    "create_application_key",
    "create_device",
    "device_summary",
    "disable_device",
    "enable_device",
    "forget_printer",
    "get_device",
    "get_job",
    "list_devices",
    "pause_device",
    "pending_commands",
    "record_command_result",
    "record_device_event",
    "replace_printers",
    "reprint_job",
    "resume_device",
    "revoke_application_key",
    "rotate_device_token",
    "send_command",
    "set_device_enabled",
    "submit_job",
    "update_settings",
]
