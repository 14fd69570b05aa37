"""Print jobs, their documents and their event history.

Status changes are made only by ``qprint.domain.claim`` (QUEUED -> CLAIMED) and
``qprint.domain.events`` (device events and server events); ``qprint.core.states`` lists the
moves allowed. Which jobs a claim may hand out is ``PrintJob.objects.claimable()``.
"""

import uuid
from datetime import timedelta

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from qprint.core.conf import qprint_settings
from qprint.core.states import JobStatus, is_final
from qprint.models.querysets import PrintJobQuerySet


def default_expires_at():
    """``now + JOB_TTL_SECONDS`` (None: never) for a job created without ``qprint.api``, which
    sets the expiry itself on the database clock."""
    ttl = qprint_settings.JOB_TTL_SECONDS
    return None if ttl is None else timezone.now() + timedelta(seconds=ttl)


class PrintJob(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Every index of this table is written at each of a job's moves (a status change is never a
    # HOT update: the status is indexed), so each one here has a reader: qprint_job_tenant_idx
    # serves the tenant's listing, no plain index on tenant (docs/PERFORMANCE.md).
    tenant = models.CharField(_("tenant"), max_length=100)
    device = models.ForeignKey(
        "qprint.Device",
        on_delete=models.CASCADE,
        related_name="jobs",
        verbose_name=_("device"),
        db_index=False,  # qprint_job_next_idx starts with device_id
    )
    printer = models.CharField(
        _("printer"), max_length=255, null=True, blank=True, help_text=_("Empty: the default.")
    )
    title = models.CharField(_("title"), max_length=255, blank=True, default="")
    content_type = models.CharField(_("content type"), max_length=100)
    size = models.PositiveBigIntegerField(_("size"))
    sha256 = models.CharField(_("SHA-256"), max_length=64)
    options = models.JSONField(_("options"), default=dict, blank=True)
    priority = models.IntegerField(_("priority"), default=0, help_text=_("Higher first."))
    status = models.CharField(
        _("status"), max_length=20, choices=JobStatus.choices, default=JobStatus.QUEUED
    )
    status_reason = models.TextField(_("status reason"), blank=True, default="")
    idempotency_key = models.CharField(_("idempotency key"), max_length=255, null=True, blank=True)
    idempotency_fingerprint = models.CharField(
        _("idempotency fingerprint"),
        max_length=64,
        blank=True,
        default="",
        help_text=_("Hash of the submission, to tell a replay from a different job."),
    )
    claim_id = models.UUIDField(_("claim id"), null=True, blank=True)
    claim_node = models.CharField(_("claim node"), max_length=255, blank=True, default="")
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    reprint_of = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="reprints",
        verbose_name=_("reprint of"),
        db_index=False,  # qprint_job_reprint_idx: the few jobs that are reprints
    )
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    claimed_at = models.DateTimeField(_("claimed at"), null=True, blank=True)
    received_at = models.DateTimeField(_("received at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    expires_at = models.DateTimeField(
        _("expires at"), null=True, blank=True, default=default_expires_at
    )
    submitted_by = models.CharField(_("submitted by"), max_length=255, blank=True, default="")
    # A ``?wait`` request watches this job until then: its moves send the after-commit notice
    # (docs/WEBHOOKS.md, "Waiting"). Read by no rule; without it a move tells nobody.
    waited_until = models.DateTimeField(_("waited on until"), null=True, blank=True, editable=False)

    objects = PrintJobQuerySet.as_manager()

    class Meta:
        db_table = "qprint_job"
        verbose_name = _("print job")
        verbose_name_plural = _("print jobs")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="qprint_job_idempotency_uniq",
            ),
            # At most one job is handed out to a device at a time (docs/JOBS.md, the claim).
            models.UniqueConstraint(
                fields=["device"],
                condition=Q(status="CLAIMED"),
                name="qprint_job_one_claimed_per_device",
            ),
        ]
        indexes = [
            # The next claimable job of a device.
            models.Index(
                "device",
                "status",
                models.F("priority").desc(),
                "created_at",
                name="qprint_job_next_idx",
            ),
            # The unconfirmed sweep (CloudPRNT): RECEIVED jobs by when they were fetched.
            models.Index(
                fields=["received_at"],
                condition=Q(status="RECEIVED"),
                name="qprint_job_received_at_idx",
            ),
            # Expiry sweep: unfinished jobs by expiry.
            models.Index(
                fields=["expires_at"],
                condition=Q(status__in=["QUEUED", "CLAIMED"]),
                name="qprint_job_expiry_idx",
            ),
            # Retention sweep: finished jobs by age.
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="qprint_job_retention_idx",
            ),
            # The admin's print overview (qprint.domain.overview): jobs per status by age...
            models.Index(fields=["created_at", "status"], name="qprint_job_created_idx"),
            # ...the jobs to look at...
            models.Index(
                fields=["finished_at"],
                condition=Q(status__in=["FAILED", "OUTCOME_UNKNOWN"]),
                name="qprint_job_trouble_idx",
            ),
            # ...and the oldest QUEUED job.
            models.Index(
                fields=["created_at"],
                condition=Q(status="QUEUED"),
                name="qprint_job_queued_idx",
            ),
            # A device's recent jobs (its admin page), newest first.
            models.Index("device", models.F("created_at").desc(), name="qprint_job_recent_idx"),
            # A tenant's jobs, newest first (the application API's listing).
            models.Index("tenant", models.F("created_at").desc(), name="qprint_job_tenant_idx"),
            # The reprints of a job (what a deleted job's ``reprint_of`` is cleared in).
            models.Index(
                fields=["reprint_of"],
                condition=Q(reprint_of__isnull=False),
                name="qprint_job_reprint_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title or self.id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return is_final(self.status)


class PrintDocument(models.Model):
    """The job's bytes, in the database so every node can serve them (see
    ``qprint.documents.storage``)."""

    job = models.OneToOneField(
        PrintJob,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="document",
        verbose_name=_("job"),
    )
    content = models.BinaryField(_("content"))

    class Meta:
        db_table = "qprint_document"
        verbose_name = _("document")
        verbose_name_plural = _("documents")

    def __str__(self) -> str:
        return f"document of {self.job_id}"


class EventSource(models.TextChoices):
    DEVICE = "DEVICE", _("Device")
    SERVER = "SERVER", _("Server")


class PrintJobEvent(models.Model):
    """One event in a job's life, recorded once per ``event_id`` (see ``qprint.domain.events``)."""

    event_id = models.UUIDField(_("event id"), unique=True, default=uuid.uuid4)
    job = models.ForeignKey(
        PrintJob,
        on_delete=models.CASCADE,
        related_name="events",
        verbose_name=_("job"),
        db_index=False,  # qprint_job_event_job_idx starts with job_id
    )
    # The device that reported the event: its job's device, which the event's lock reads
    # (qprint.domain.events), and the job's own foreign key holds. No constraint of its own: its
    # check at every commit locked the device's row (FOR KEY SHARE) once per event, a write to
    # the row's page that every ping of the device also touches. Deleting a device clears it
    # (SET_NULL, Django's), as before; the index serves that.
    device = models.ForeignKey(
        "qprint.Device",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("device"),
        db_constraint=False,
    )
    source = models.CharField(_("source"), max_length=10, choices=EventSource.choices)
    type = models.CharField(_("type"), max_length=20)
    message = models.TextField(_("message"), blank=True, default="")
    detail = models.JSONField(_("detail"), default=dict, blank=True)
    occurred_at = models.DateTimeField(_("occurred at"), db_default=Now())
    recorded_at = models.DateTimeField(_("recorded at"), db_default=Now(), editable=False)
    fingerprint = models.CharField(_("fingerprint"), max_length=64)

    class Meta:
        db_table = "qprint_job_event"
        verbose_name = _("job event")
        verbose_name_plural = _("job events")
        ordering = ["recorded_at", "id"]
        indexes = [models.Index(fields=["job", "recorded_at"], name="qprint_job_event_job_idx")]

    def __str__(self) -> str:
        return f"{self.type} ({self.source})"
