"""Webhooks: telling the application what happened, from a durable outbox (docs/WEBHOOKS.md).

- :mod:`qprint.webhooks.outbox` - the delivery rows: written with the state change they announce,
  taken, recorded, retried (the one owner of their delivery columns);
- :mod:`qprint.webhooks.endpoints` - a tenant's endpoints: create, list, delete, rotate a secret;
- :mod:`qprint.webhooks.destinations` - which URLs and addresses may be called;
- :mod:`qprint.webhooks.signing` - secrets and Standard Webhooks signatures;
- :mod:`qprint.webhooks.notify` - after-commit notices (a delivery is due, a job's status moved);
- :mod:`qprint.webhooks.sender` - the worker that sends, on every node running ``cluster_runtime``.
"""

#: Event types an endpoint may ask for (absent: all of them).
JOB_EVENT_TYPES = (
    "job.claimed",
    "job.received",
    "job.spooled",
    "job.printed",
    "job.failed",
    "job.outcome_unknown",
    "job.cancelled",
    "job.expired",
)
DEVICE_CONNECTED = "device.connected"
DEVICE_DISCONNECTED = "device.disconnected"
#: A CloudPRNT printer's state changed (paper out, cover open, back to idle: docs/CLOUDPRNT.md).
DEVICE_PRINTER_STATE = "device.printer_state"
DEVICE_EVENT_TYPES = (DEVICE_CONNECTED, DEVICE_DISCONNECTED, DEVICE_PRINTER_STATE)
EVENT_TYPES = JOB_EVENT_TYPES + DEVICE_EVENT_TYPES
#: The event ``POST api/v1/webhooks/<id>/test`` sends (never asked for, always sent on request).
TEST_EVENT = "webhook.test"


def job_event_type(status: str) -> str | None:
    """``job.printed`` for PRINTED; None for a status no event announces (QUEUED)."""
    name = f"job.{status.lower()}"
    return name if name in JOB_EVENT_TYPES else None
