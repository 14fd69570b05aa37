"""What the application sees of a device, read with the shared predicates (liveness, queue depth).

The read model of ``GET api/v1/devices`` and of the ``device.*`` webhooks: both the domain
(:mod:`qprint.domain.devices`) and the webhook outbox build it, so it sits with the models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from qprint.models.devices import Device, DevicePrinter


@dataclass(frozen=True)
class DeviceSummary:
    """What the application sees of a device (``GET api/v1/devices``); its JSON form is
    ``qprint.models.serializers.device_object``."""

    name: str
    description: str
    kind: str
    enabled: bool
    online: bool
    ready: bool
    paused: bool
    node: str
    queue_depth: int
    last_seen_at: datetime | None
    control_revision: int
    settings_revision: int
    agent_info: dict[str, Any]
    printers: list[DevicePrinter] = field(default_factory=list)

    @classmethod
    def of(cls, device: Device) -> DeviceSummary:
        """From a device read through ``Device.objects.for_summary()``."""
        online = bool(device.connection_live)
        return cls(
            name=device.name,
            description=device.description,
            kind=device.kind,
            enabled=device.enabled,
            online=online,
            ready=online and device.connection_ready,
            paused=device.paused,
            node=device.connection_node if online else "",
            queue_depth=device.queue_depth,
            last_seen_at=device.last_seen_at,
            control_revision=device.control_revision,
            settings_revision=device.settings_revision,
            agent_info=device.agent_info,
            printers=list(device.printers.all()),
        )
