"""Webhook endpoints of a tenant and the outbox of their deliveries.

A :class:`WebhookDelivery` row is one event for one endpoint: it is written in the same
transaction as the state change it announces and its delivery columns (``status``, ``attempts``,
``next_attempt_at``, ``locked_*``, ``last_*``, ``delivered_at``) are written by
``qprint.webhooks.outbox`` only (see its docstring for the invariant).

The signing secrets are stored as they are: an HMAC is computed with the secret itself, so a hash
of it would not do. They are shown once (at creation or rotation) and never again: not by the
API, not by the admin, not by the management command (docs/WEBHOOKS.md, "Secrets").
"""

import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class WebhookEndpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.CharField(_("tenant"), max_length=100, db_index=True)
    url = models.URLField(_("URL"), max_length=2000)
    events = models.JSONField(
        _("events"), default=list, blank=True, help_text=_("Event types sent; empty: all.")
    )
    description = models.CharField(_("description"), max_length=255, blank=True, default="")
    secret = models.CharField(_("secret"), max_length=100, editable=False)
    previous_secret = models.CharField(
        _("previous secret"), max_length=100, blank=True, default="", editable=False
    )
    previous_secret_expires_at = models.DateTimeField(
        _("previous secret valid until"), null=True, blank=True, editable=False
    )
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    # Written by qprint.webhooks.outbox only: a slow endpoint is held back (its docstring).
    backoff_until = models.DateTimeField(
        _("held back until"), null=True, blank=True, editable=False
    )
    slow_attempts = models.PositiveIntegerField(
        _("slow attempts in a row"), default=0, editable=False
    )

    class Meta:
        db_table = "qprint_webhook_endpoint"
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")
        ordering = ["tenant", "created_at"]

    def __str__(self) -> str:
        return f"{self.tenant}: {self.url}"

    def wants(self, event_type: str) -> bool:
        return not self.events or event_type in self.events


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING", _("pending")
    SENDING = "SENDING", _("sending")
    DELIVERED = "DELIVERED", _("delivered")
    FAILED = "FAILED", _("failed")


class WebhookDelivery(models.Model):
    id = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(
        WebhookEndpoint,
        on_delete=models.CASCADE,
        related_name="deliveries",
        verbose_name=_("endpoint"),
        db_index=False,  # qprint_webhook_delivery_endpoint_idx starts with endpoint_id
    )
    event_id = models.CharField(
        _("event id"),
        max_length=64,
        unique=True,
        help_text=_("The webhook-id header: stable across redeliveries."),
    )
    type = models.CharField(_("type"), max_length=40)
    payload = models.JSONField(_("payload"))
    status = models.CharField(
        _("status"), max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    next_attempt_at = models.DateTimeField(_("next attempt at"), db_default=Now())
    locked_by = models.UUIDField(_("taken by"), null=True, blank=True)
    locked_until = models.DateTimeField(_("taken until"), null=True, blank=True)
    last_status_code = models.PositiveIntegerField(_("last HTTP status"), null=True, blank=True)
    last_response = models.TextField(_("last answer"), blank=True, default="")
    last_error = models.TextField(_("last error"), blank=True, default="")
    last_attempt_at = models.DateTimeField(_("last attempt at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    delivered_at = models.DateTimeField(_("delivered at"), null=True, blank=True)

    class Meta:
        db_table = "qprint_webhook_delivery"
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        ordering = ["-created_at", "-id"]
        indexes = [
            # The sender's scan: due rows, oldest first (only undelivered rows are indexed).
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status__in=["PENDING", "SENDING"]),
                name="qprint_webhook_delivery_due",
            ),
            # The fair take: an endpoint's due rows, oldest first.
            models.Index(
                fields=["endpoint", "next_attempt_at", "id"],
                condition=Q(status__in=["PENDING", "SENDING"]),
                name="qprint_webhook_delivery_ep_due",
            ),
            # An endpoint's deliveries, newest first (the API's list).
            models.Index(
                fields=["endpoint", "-created_at", "-id"],
                name="qprint_webhook_delivery_ep",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"
