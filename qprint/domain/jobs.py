"""Jobs as the application sees them: lookups, cancel, the download rule.

Each mutation runs in one transaction and wakes the device after it commits
(:func:`qprint.domain.wakeups.wake_after_commit`), so a device never hears of a change it cannot
yet see. Jobs are made by :mod:`qprint.domain.submission`; the status moves themselves are made by
:mod:`qprint.domain.claim` and :mod:`qprint.domain.events`; refusals raise
:mod:`qprint.core.errors` exceptions with the error codes of docs/API.md.
"""

import functools
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import (
    BinaryField,
    F,
    Q,
    QuerySet,
    UUIDField,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, Greatest, Now

from qprint.core import inputs
from qprint.core.errors import (
    Conflict,
    Invalid,
    NotFound,
)
from qprint.core.prepared import Param, PreparedQuery
from qprint.core.states import CANCELLABLE_AT_ONCE, CANCELLABLE_BY_DEVICE, JobStatus, is_final
from qprint.documents import storage
from qprint.domain import commands, credentials, events
from qprint.domain.wakeups import wake_after_commit
from qprint.models import Device, PrintJob, PrintJobEvent
from qprint.models.querysets import held_job

logger = logging.getLogger("qprint.jobs")


def get_job(tenant: str, job_id: uuid.UUID | str) -> PrintJob:
    """The job ``job_id`` of ``tenant`` (with its device); :class:`NotFound` otherwise."""
    try:
        job_uuid = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound("not_found", "No such job.") from None
    if inputs.no_row_has_tenant(tenant):
        raise NotFound("not_found", "No such job.")
    job = PrintJob.objects.select_related("device").filter(tenant=tenant, pk=job_uuid).first()
    if job is None:
        raise NotFound("not_found", "No such job.")
    return job


def watch(job_id: uuid.UUID, seconds: float) -> None:
    """A ``?wait`` request watches ``job_id`` for ``seconds``: until then the job's moves send
    their after-commit notice (``qprint.webhooks.notify``); a job nobody waits on sends none.
    Committed before the waiter reads the job, so a move either sees the mark (it waits for the
    row) or committed before the read."""
    until = Now() + timedelta(seconds=seconds + 1)
    PrintJob.objects.filter(pk=job_id).update(
        waited_until=Greatest(Coalesce("waited_until", until), until)
    )


def jobs_of(tenant: str, *, device: str | None = None, status: str | None = None) -> QuerySet:
    """The tenant's jobs (with their device), optionally of one device (by name) and status."""
    queryset = PrintJob.objects.filter(tenant=tenant).select_related("device")
    if device:
        queryset = queryset.filter(device__name=inputs.lookup_name("device", device))
    if status is not None:
        if not isinstance(status, str) or status not in JobStatus.values:
            raise Invalid(message=f"status: must be one of {', '.join(JobStatus.values)}")
        queryset = queryset.filter(status=status)
    return queryset


def events_of(job: PrintJob) -> QuerySet:
    """The job's events, oldest first."""
    return PrintJobEvent.objects.filter(job=job).order_by("recorded_at", "id")


#: Statuses in which the device that holds the job may (re)download its document.
DOWNLOADABLE_AFTER_CLAIM = (JobStatus.RECEIVED, JobStatus.SPOOLED)


@dataclass(frozen=True)
class Download:
    """A job's document as its device downloads it: the job (type, size, digest) and its bytes,
    read by the statement that found the job where the database keeps documents."""

    job: PrintJob

    def content(self) -> bytes:
        """The document's bytes (:class:`NotFound` when they are gone)."""
        if not hasattr(self.job, "document_content"):  # another backend: read after
            return storage.open_document(self.job)
        if self.job.document_content is None:
            raise NotFound(message="The job's document is no longer stored.")
        return bytes(self.job.document_content)


def job_for_download(
    device: Device | credentials.PresentedToken, job_id: uuid.UUID | str
) -> Download:
    """The job whose document ``device`` may fetch: it holds the job's current claim, or the job
    is RECEIVED/SPOOLED on it (a retried download after a crash). Anything else is
    :class:`NotFound`, the same answer as for a job that does not exist. ``device``: the device,
    or the token an HTTP request presents (:class:`~qprint.domain.credentials.PresentedToken`):
    the job is then read joined to the device holding that token's hash (an agent's) and the
    device's standing checked from that row, with no lookup of its own; when the read matches no
    row the token is authenticated the one way in (401, 429, 403) and a right one is served by
    its device's id. The document's bytes are read by the same statement where the database
    keeps them (:meth:`Download.content`)."""
    try:
        job_uuid = uuid.UUID(str(job_id))
    except ValueError:
        if isinstance(device, credentials.PresentedToken):
            device.authenticate()  # the device's standing is answered first
        raise NotFound(message="No such job to download on this device.") from None
    with_content = storage.in_database()
    if isinstance(device, credentials.PresentedToken):
        presented = device
        job = _DOWNLOADABLE_BY_TOKEN[with_content].first(
            job=job_uuid, digest=presented.token_hash, kind=presented.kind
        )
        if job is not None:
            presented.require(job.device_token_hash, job.device_enabled)
            return Download(job)
        device = presented.authenticate()
    job = _DOWNLOADABLE[with_content].first(job=job_uuid, device=device.pk)
    if job is None:
        raise NotFound(message="No such job to download on this device.")
    return Download(job)


def _build_downloadable(*, by_token: bool, with_content: bool) -> QuerySet:
    """The job a device may download, by the device's id or (``by_token``) joined to the device
    of the transport's kind holding the token hashed ``digest``; ``with_content``: its document's
    bytes too (``document_content``, documents in the database)."""
    device = credentials.jobs_device(by_token=by_token)
    queryset = (
        PrintJob.objects.filter(pk=Param("job", UUIDField()), **device)
        .filter(held_job() | Q(status__in=DOWNLOADABLE_AFTER_CLAIM))
        .only("id", "content_type", "size", "sha256", "claim_id", "status")
    )
    if by_token:
        queryset = queryset.annotate(
            device_token_hash=F("device__token_hash"), device_enabled=F("device__enabled")
        )
    if with_content:
        document = storage.document_select(f"{PrintJob._meta.db_table}.id")
        queryset = queryset.annotate(
            document_content=RawSQL(document, (), output_field=BinaryField())
        )
    return queryset[:1]


_DOWNLOADABLE = {
    with_content: PreparedQuery(
        functools.partial(_build_downloadable, by_token=False, with_content=with_content)
    )
    for with_content in (False, True)
}
_DOWNLOADABLE_BY_TOKEN = {
    with_content: PreparedQuery(
        functools.partial(_build_downloadable, by_token=True, with_content=with_content)
    )
    for with_content in (False, True)
}


def locked_job(job: PrintJob | uuid.UUID | str, tenant: str | None) -> PrintJob:
    """The job (of ``tenant`` when given), its row locked; ``NotFound`` otherwise."""
    return job_in(PrintJob.objects.select_for_update(of=("self",), no_key=True), job, tenant)


def job_in(queryset: QuerySet, job: PrintJob | uuid.UUID | str, tenant: str | None) -> PrintJob:
    """The job of ``queryset`` (of ``tenant`` when given); ``NotFound`` otherwise."""
    job_id = job.pk if isinstance(job, PrintJob) else job
    if tenant is not None:
        if inputs.no_row_has_tenant(tenant):
            raise NotFound("not_found", "No such job.")
        queryset = queryset.filter(tenant=tenant)
    try:
        locked = queryset.filter(pk=uuid.UUID(str(job_id))).first()
    except ValueError:
        locked = None
    if locked is None:
        raise NotFound("not_found", "No such job.")
    return locked


def may_cancel(job: PrintJob) -> bool:
    """Whether :func:`cancel_job` would still do something for ``job`` as read: it is not final
    and no cancel is already asked of its device (the admin offers the action on that)."""
    return not is_final(job.status) and not job.cancel_requested


def reprints_of(job: PrintJob) -> QuerySet:
    """The jobs made by reprinting ``job``, oldest first."""
    return PrintJob.objects.filter(reprint_of=job).order_by("created_at")


def cancel_job(
    job: PrintJob | uuid.UUID | str, *, tenant: str | None = None, by: str = ""
) -> PrintJob:
    """Cancel a job as the application.

    QUEUED or CLAIMED: the job is CANCELLED at once (a later device event answers
    ``job_cancelled``). RECEIVED or SPOOLED: ``cancel_requested`` is set and a ``CANCEL_JOB``
    command goes to the device, which reports the outcome (once per job). Final: :class:`Conflict`
    (``job_final``). ``tenant`` restricts the lookup to that tenant.
    """
    by = inputs.label("by", by, 150)
    with transaction.atomic():
        locked = locked_job(job, tenant)
        if is_final(locked.status):
            raise Conflict("job_final", f"The job is {locked.status}; it cannot be cancelled.")
        reason = f"cancelled by {by}" if by else "cancelled by the application"
        if locked.status in CANCELLABLE_AT_ONCE:
            was = locked.status
            events.move_by_server(locked, JobStatus.CANCELLED, reason=reason, detail={"by": by})
            if was == JobStatus.QUEUED:
                wake_after_commit(locked.tenant, locked.device_id, "job_cancelled")
        elif locked.status in CANCELLABLE_BY_DEVICE and not locked.cancel_requested:
            PrintJob.objects.filter(pk=locked.pk).update(cancel_requested=True)
            locked.cancel_requested = True
            commands.request_cancel(locked)
            events.record_server_event(
                locked, "CANCEL_REQUESTED", message=reason, detail={"by": by}
            )
            logger.info("job_cancel_requested job=%s device=%s", locked.pk, locked.device_id)
    return locked
