"""Devices (print agents) and the printers they report.

The four connection columns are the connection record: only ``qprint.domain.connection`` writes
them at runtime (guarded updates, newest connection wins), and ``connection_since`` with them.
Whether the connection is live is ``Device.objects.with_liveness()`` (database clock).
"""

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from qprint.core.inputs import validate_device_name
from qprint.models.querysets import DeviceQuerySet


class DeviceKind(models.TextChoices):
    """How a device reaches the server: a print agent holding the socket (or the device HTTP API),
    or a printer polling by itself over Star's CloudPRNT (docs/CLOUDPRNT.md). Set when the device
    is made."""

    AGENT = "agent", _("print agent")
    CLOUDPRNT = "cloudprnt", _("CloudPRNT printer")


class Device(models.Model):
    tenant = models.CharField(_("tenant"), max_length=100, db_index=True)
    name = models.CharField(_("name"), max_length=150, validators=[validate_device_name])
    description = models.TextField(_("description"), blank=True, default="")
    token_hash = models.CharField(
        _("token hash"),
        max_length=64,
        unique=True,
        help_text=_("SHA-256 of the device token; the token itself is never stored."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    kind = models.CharField(
        _("kind"),
        max_length=20,
        choices=DeviceKind.choices,
        default=DeviceKind.AGENT,
        help_text=_("How the device reaches the server; set when the device is made."),
    )
    # CloudPRNT: the printer's MAC address, bound by its first poll (written by the connection
    # record's poll statement only); empty until then, and again after "forget the printer".
    printer_mac = models.CharField(_("printer MAC"), max_length=32, blank=True, default="")

    # Control: the device applies it and reports the revision it applied.
    paused = models.BooleanField(_("paused"), default=False)
    control_revision = models.PositiveBigIntegerField(_("control revision"), default=1)
    control_applied_revision = models.PositiveBigIntegerField(
        _("control applied revision"), default=0
    )

    # Settings: free-form values pushed to the agent, revisioned like control.
    settings = models.JSONField(_("settings"), default=dict, blank=True)
    settings_revision = models.PositiveBigIntegerField(_("settings revision"), default=1)
    settings_applied_revision = models.PositiveBigIntegerField(
        _("settings applied revision"), default=0
    )

    # Connection record (written by qprint.domain.connection only).
    connection_id = models.UUIDField(_("connection id"), null=True, blank=True)
    connection_node = models.CharField(_("connection node"), max_length=255, blank=True, default="")
    connection_ready = models.BooleanField(_("connection ready"), default=False)
    connection_lease_expires_at = models.DateTimeField(
        _("connection lease expires at"), null=True, blank=True
    )
    # When the connection named by connection_id took the row (written by the same statement);
    # for people (the admin), never read by a rule.
    connection_since = models.DateTimeField(_("connected since"), null=True, blank=True)

    last_seen_at = models.DateTimeField(_("last seen at"), null=True, blank=True)
    agent_info = models.JSONField(_("agent info"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)

    objects = DeviceQuerySet.as_manager()

    class Meta:
        db_table = "qprint_device"
        verbose_name = _("device")
        verbose_name_plural = _("devices")
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], name="qprint_device_tenant_name_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


class DevicePrinter(models.Model):
    """A printer as the agent last reported it (the list is replaced as a whole)."""

    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, related_name="printers", verbose_name=_("device")
    )
    name = models.CharField(_("name"), max_length=255)
    is_default = models.BooleanField(_("default"), default=False)
    status = models.CharField(_("status"), max_length=100, blank=True, default="")
    capabilities = models.JSONField(_("capabilities"), default=dict, blank=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        db_table = "qprint_device_printer"
        verbose_name = _("printer")
        verbose_name_plural = _("printers")
        ordering = ["device", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["device", "name"], name="qprint_device_printer_name_uniq"
            )
        ]

    def __str__(self) -> str:
        return self.name
