"""qprint's models, one module per concept."""

from qprint.core.states import CommandStatus
from qprint.models.commands import DeviceCommand
from qprint.models.devices import Device, DeviceKind, DevicePrinter
from qprint.models.enrolment import Enrolment, EnrolmentStatus
from qprint.models.jobs import EventSource, PrintDocument, PrintJob, PrintJobEvent
from qprint.models.keys import ApplicationKey
from qprint.models.throttle import AuthFailureCount
from qprint.models.webhooks import DeliveryStatus, WebhookDelivery, WebhookEndpoint

__all__ = [
    "ApplicationKey",
    "AuthFailureCount",
    "CommandStatus",
    "DeliveryStatus",
    "Device",
    "DeviceCommand",
    "DeviceKind",
    "DevicePrinter",
    "Enrolment",
    "EnrolmentStatus",
    "EventSource",
    "PrintDocument",
    "PrintJob",
    "PrintJobEvent",
    "WebhookDelivery",
    "WebhookEndpoint",
]
