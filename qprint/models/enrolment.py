"""Enrolments: an agent asking for a device by a short code (docs/AGENT.md, "Enrolling by code").

Only hashes of the two codes are stored: the device code is the agent's secret for collecting its
token, the user code is what an operator types. ``qprint.domain.enrolment`` is the one writer of
this table; "still open" (pending, not expired, database clock) is
``Enrolment.objects.pending()``.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class EnrolmentStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    APPROVED = "approved", _("approved")
    DENIED = "denied", _("denied")


class EnrolmentQuerySet(models.QuerySet):
    def pending(self) -> EnrolmentQuerySet:
        """Enrolments waiting for an operator: pending and not expired (database clock)."""
        return self.filter(status=EnrolmentStatus.PENDING, expires_at__gt=Now())

    def expired(self) -> EnrolmentQuerySet:
        """Enrolments past their expiry (database clock), whatever became of them."""
        return self.filter(expires_at__lte=Now())


class Enrolment(models.Model):
    #: SHA-256 of the device code (the agent's secret); the code itself is never stored.
    device_code_hash = models.CharField(_("device code hash"), max_length=64, unique=True)
    #: Keyed hash (HMAC with the project's SECRET_KEY) of the normalised user code.
    user_code_hash = models.CharField(_("user code hash"), max_length=64, unique=True)
    status = models.CharField(
        _("status"),
        max_length=16,
        choices=EnrolmentStatus.choices,
        default=EnrolmentStatus.PENDING,
    )
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    expires_at = models.DateTimeField(_("expires at"))
    #: Seconds the agent waits between polls (raised by 5 on each ``slow_down``).
    interval = models.PositiveIntegerField(_("poll interval"))
    last_polled_at = models.DateTimeField(_("last polled at"), null=True, blank=True)
    #: What the agent said of itself: hostname, platform, version.
    agent_info = models.JSONField(_("agent info"), default=dict, blank=True)
    source_address = models.CharField(_("source address"), max_length=100, blank=True, default="")
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    decided_by = models.CharField(_("decided by"), max_length=150, blank=True, default="")
    #: The device the approval made (or re-enrolled).
    device = models.ForeignKey(
        "qprint.Device",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("device"),
    )
    #: When the agent collected its token (once).
    token_issued_at = models.DateTimeField(_("token issued at"), null=True, blank=True)

    objects = EnrolmentQuerySet.as_manager()

    class Meta:
        db_table = "qprint_enrolment"
        verbose_name = _("enrolment")
        verbose_name_plural = _("enrolments")
        ordering = ["-created_at"]
        permissions = [("approve_enrolment", _("Can approve or deny device enrolments"))]
        indexes = [models.Index(fields=["expires_at"], name="qprint_enrolment_expires")]

    def __str__(self) -> str:
        hostname = (self.agent_info or {}).get("hostname") or "?"
        return f"enrolment {self.pk} ({hostname}, {self.status})"
