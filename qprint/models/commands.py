"""Commands the application sends to a device (e.g. ``CANCEL_JOB``); the device reports a result."""

import uuid

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from qprint.core.states import CommandStatus
from qprint.models.querysets import DeviceCommandQuerySet


class DeviceCommand(models.Model):
    CANCEL_JOB = "CANCEL_JOB"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    device = models.ForeignKey(
        "qprint.Device", on_delete=models.CASCADE, related_name="commands", verbose_name=_("device")
    )
    type = models.CharField(_("type"), max_length=50)
    payload = models.JSONField(_("payload"), default=dict, blank=True)
    status = models.CharField(
        _("status"), max_length=10, choices=CommandStatus.choices, default=CommandStatus.PENDING
    )
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    delivered_at = models.DateTimeField(_("delivered at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    result = models.JSONField(_("result"), null=True, blank=True)

    objects = DeviceCommandQuerySet.as_manager()

    class Meta:
        db_table = "qprint_device_command"
        verbose_name = _("device command")
        verbose_name_plural = _("device commands")
        ordering = ["created_at"]
        indexes = [
            # Commands still to deliver (or to re-deliver) to a device, oldest first.
            models.Index(
                fields=["device", "created_at"],
                condition=models.Q(status__in=["PENDING", "DELIVERED"]),
                name="qprint_command_pending_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} ({self.status})"
