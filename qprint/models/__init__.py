"""qprint's models, one module per concept."""

from qprint.models.commands import CommandStatus, DeviceCommand
from qprint.models.devices import Device, DevicePrinter
from qprint.models.jobs import EventSource, PrintDocument, PrintJob, PrintJobEvent
from qprint.models.keys import ApplicationKey

__all__ = [
    "ApplicationKey",
    "CommandStatus",
    "Device",
    "DeviceCommand",
    "DevicePrinter",
    "EventSource",
    "PrintDocument",
    "PrintJob",
    "PrintJobEvent",
]
