"""The submission: how a job comes to be (a new job, or the reprint of one), with its document.

A job is inserted QUEUED with its document in one transaction, its first server event recorded,
its ``job.queued`` webhook written to the outbox in the same transaction, and the device woken
after the commit (:func:`qprint.domain.wakeups.wake_after_commit`). An
``idempotency_key`` already used for the same request replays the job it made; for a different
request it is refused (``idempotency_conflict``). Refusals raise :mod:`qprint.core.errors`
exceptions with the error codes of docs/API.md.
"""

import contextlib
import functools
import logging
import uuid
from datetime import timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, transaction
from django.db.models import CharField, DurationField, OuterRef, Subquery
from django.db.models.functions import Cast, Now

from qprint.core import inputs, prepared
from qprint.core.conf import DEFAULTS, LONGEST_TTL_SECONDS, qprint_settings
from qprint.core.device_events import fingerprint_of
from qprint.core.errors import (
    Conflict,
    DocumentTooLarge,
    Invalid,
    NotFound,
    QPrintError,
)
from qprint.core.prepared import Param, PreparedInsert, PreparedQuery
from qprint.core.states import JobStatus
from qprint.documents import media, storage
from qprint.domain import cloudprnt, credentials, events, formats, jobs
from qprint.domain.wakeups import JOB_QUEUED, wake_after_commit
from qprint.models import Device, PrintJob
from qprint.webhooks import outbox

logger = logging.getLogger("qprint.jobs")

#: The default of ``QPRINT["ACCEPTED_CONTENT_TYPES"]`` (the setting decides: qprint.domain.formats).
ACCEPTED_CONTENT_TYPES: frozenset[str] = frozenset(DEFAULTS["ACCEPTED_CONTENT_TYPES"])

#: ``expires_in`` not given: ``QPRINT["JOB_TTL_SECONDS"]`` applies.
DEFAULT_TTL = object()

MAX_PRIORITY = 1_000_000


def submit_job(
    tenant: str | credentials.PresentedKey,
    device: str | Device,
    content: bytes,
    content_type: str,
    *,
    printer: str | None = None,
    title: str = "",
    options: dict[str, Any] | None = None,
    priority: int = 0,
    expires_in: Any = DEFAULT_TTL,
    idempotency_key: str | None = None,
    submitted_by: str = "",
) -> tuple[PrintJob, bool]:
    """Queue ``content`` for printing on ``device`` (a name in ``tenant``, or a Device).

    Returns ``(job, created)``. With an ``idempotency_key``, the same key and the same submission
    return the job already made (``created=False``), whoever submitted it concurrently; the same
    key with a different submission raises :class:`Conflict` (``idempotency_conflict``).
    ``expires_in`` is in seconds (``None``: never expires; not given: ``JOB_TTL_SECONDS``).

    Raises :class:`NotFound` (``unknown_device``), :class:`DocumentTooLarge`,
    :class:`UnsupportedContentType`, :class:`Invalid`.

    ``tenant`` may be the application key a request presents
    (:class:`~qprint.domain.credentials.PresentedKey`, with ``device`` a name): the key is then
    matched in the statement that reads the device, its tenant is the job's and
    ``credentials.submitter`` of its name is ``submitted_by``; a refusal before that statement, or
    a key it did not match, is answered after the key's own standing (401, 429), as if the key
    had been looked up first.
    """
    presented = tenant if isinstance(tenant, credentials.PresentedKey) else None
    try:
        if isinstance(device, Device):
            if presented is not None or device.tenant != tenant:
                raise NotFound("unknown_device", f"No device named {device.name!r}.")
            device_name = device.name
        else:
            device_name = inputs.required_text("device", device, 150)
        content_type = _check_content_type(content_type)
        content = _check_content(content)
        options = _check_options(options)
        priority = _check_priority(priority)
        ttl = _check_expires_in(expires_in)
        printer = inputs.text("printer", printer, 255) or None
        title = inputs.text("title", title, 255)
        if idempotency_key is not None:
            idempotency_key = inputs.text("idempotency_key", idempotency_key, 255) or None
        submitted_by = inputs.label("submitted_by", submitted_by, 255)
        if presented is None and inputs.no_row_has_tenant(tenant):
            raise NotFound("unknown_device", f"No device named {device_name!r}.")
    except QPrintError:
        if presented is not None:
            presented.authenticate()  # the key's standing is answered first
        raise
    sha256 = storage.digest(content)
    fingerprint = fingerprint_of(
        {
            "device": device_name,
            "printer": printer,
            "title": title,
            "content_type": content_type,
            "sha256": sha256,
            "options": options,
            "priority": priority,
            "expires_in": ttl,
        }
    )

    if presented is not None:
        tenant, target, submitted_by = _presented_target(
            presented, device_name, idempotency_key, printer
        )
    else:
        target = _submission_target(tenant, device_name, idempotency_key, printer)
    if target.idempotent_job is not None:
        if target.idempotent_fingerprint != fingerprint:
            raise _idempotency_conflict()
        return PrintJob.objects.get(pk=target.idempotent_job), False
    reported = (
        (target.printer_name, target.printer_capabilities or {})
        if target.printer_name is not None
        else None
    )
    formats.check_options(reported, content_type, options)
    cloudprnt.check_submission(target, content_type, options)
    fit = media.check_fit(reported, content, content_type, options)  # 422 media_mismatch

    one_statement = connection.vendor == "postgresql" and storage.in_database()
    # That one statement is the whole submission when nothing else is written with it (no webhook
    # endpoint of the tenant to announce the job to) and no transaction is open: it commits by
    # itself, with no BEGIN and COMMIT round trips of their own, and the wakeup goes out after it.
    alone = one_statement and not target.announced and not connection.in_atomic_block
    with contextlib.nullcontext() if alone else transaction.atomic():
        fields = {
            "printer": printer,
            "title": title,
            "options": options,
            "priority": priority,
            "ttl": ttl,
            "idempotency_key": idempotency_key,
            "idempotency_fingerprint": fingerprint if idempotency_key else "",
            "submitted_by": submitted_by,
        }
        queued = (fit.message, {"submitted_by": submitted_by, **fit.detail})
        if one_statement:
            job = _insert_job_in_one_statement(
                target, content, content_type, sha256, queued, **fields
            )
        else:
            job = _insert_job_step_by_step(target, content, content_type, sha256, queued, **fields)
        if job is None:
            # A concurrent submission with this key committed first: answer with its job.
            existing = _idempotent_replay(tenant, idempotency_key, fingerprint)
            if existing is None:
                raise RuntimeError(f"idempotency key {idempotency_key!r} taken but not found")
            return existing, False
        # job.queued, written to the outbox in the submission's own transaction.
        # A job just made has nobody waiting on it yet: no ?wait notice.
        outbox.announce_job(
            job.pk, tenant, JobStatus.QUEUED, subscribed=target.announced, waited=False
        )
        wake_after_commit(tenant, target.pk, JOB_QUEUED)
    logger.info(
        "job_queued job=%s device=%s/%s size=%s priority=%s",
        job.pk,
        tenant,
        target.name,
        job.size,
        job.priority,
    )
    return job, True


def _build_submission_target(with_printer: bool, with_key: bool, by_key: bool = False):
    """The device named ``name`` in ``tenant`` with what the submission needs of it; ``by_key``:
    in the tenant of the live application key hashed ``digest``, with that key's columns
    (:func:`qprint.domain.credentials.presented_key_columns`); ``with_key``: and the job already
    made under the idempotency key ``key`` (a submission without one reads no job)."""
    key = credentials.presented_key_columns(Param("digest", CharField())) if by_key else {}
    tenant = OuterRef("tenant") if by_key else Param("tenant", CharField())
    printer = Param("printer", CharField()) if with_printer else None
    printer_name, capabilities = formats.reported_printer(OuterRef("pk"), printer)
    replay = {}
    if with_key:
        # One row at most (qprint_job_idempotency_uniq), read through that index: no ordering
        # that another index could serve by reading the tenant's jobs one after the other.
        made = PrintJob.objects.filter(
            tenant=tenant, idempotency_key=Param("key", CharField())
        ).order_by()
        replay = {
            "idempotent_job": Subquery(made.values("pk")[:1]),
            "idempotent_fingerprint": Subquery(made.values("idempotency_fingerprint")[:1]),
        }
    return Device.objects.filter(
        tenant=key["key_tenant"] if by_key else Param("tenant", CharField()),
        name=Param("name", CharField()),
    ).annotate(
        **replay,
        printer_name=printer_name,
        printer_capabilities=capabilities,
        announced=outbox.tenant_subscribed(tenant),
        **{name: column for name, column in key.items() if name != "key_tenant"},
    )[:1]


#: By (the tenant named by an application key, a printer named, an idempotency key given).
_SUBMISSION_TARGET = {
    (by_key, printer, key): PreparedQuery(
        functools.partial(_build_submission_target, printer, key, by_key=by_key)
    )
    for by_key in (True, False)
    for printer in (True, False)
    for key in (True, False)
}


def _submission_target(
    tenant: str, name: str, idempotency_key: str | None, printer: str | None
) -> Device:
    """The device (``NotFound`` otherwise) and, in the same statement, the job already made
    under ``idempotency_key`` (``idempotent_job``, ``idempotent_fingerprint``) and what the agent
    reported of ``printer`` (``printer_name``, ``printer_capabilities``; its default printer when
    ``printer`` is None)."""
    values = {"tenant": tenant, "name": name, "key": idempotency_key, "printer": printer}
    query = _SUBMISSION_TARGET[False, printer is not None, idempotency_key is not None]
    device = query.first(**values)
    if device is None:
        raise NotFound("unknown_device", f"No device named {name!r}.")
    if idempotency_key is None:
        device.idempotent_job = None
    return device


def _presented_target(
    presented: credentials.PresentedKey, name: str, idempotency_key: str | None, printer: str | None
) -> tuple[str, Device, str]:
    """The tenant, the device and ``submitted_by`` of a submission whose application key is
    matched in the device's own statement; a statement that matched nothing takes the one way in
    for the key (401, 429), then looks the device up in its tenant (404)."""
    values = {
        "digest": presented.key_hash,
        "name": name,
        "key": idempotency_key,
        "printer": printer,
    }
    query = _SUBMISSION_TARGET[True, printer is not None, idempotency_key is not None]
    target = query.first(**values)
    if target is None:
        key = presented.authenticate()
        target = _submission_target(key.tenant, name, idempotency_key, printer)
        return key.tenant, target, credentials.submitter(key.name)
    presented.require(target.key_hash)
    if target.key_use_is_stale:
        credentials.record_use(target.key_id)
    if idempotency_key is None:
        target.idempotent_job = None
    return target.tenant, target, credentials.submitter(target.key_name)


def _insert_job_step_by_step(
    target: Device,
    content: bytes,
    content_type: str,
    sha256: str,
    queued: tuple[str, dict[str, Any]],
    **fields: Any,
) -> PrintJob | None:
    """The job, its document and its QUEUED event (``queued``: its message and detail) as
    separate statements; None when the idempotency key was taken meanwhile."""
    try:
        with transaction.atomic():
            job = _create_job(target, content, content_type, sha256, **fields)
    except IntegrityError:
        if not fields["idempotency_key"]:
            raise
        return None
    events.record_server_event(job, JobStatus.QUEUED, message=queued[0], detail=queued[1])
    return job


#: The columns a submission gives a job (the rest take their defaults, ``expires_at`` its TTL's).
_SUBMITTED = (
    "id",
    "tenant",
    "device_id",
    "printer",
    "title",
    "content_type",
    "size",
    "sha256",
    "options",
    "priority",
    "idempotency_key",
    "idempotency_fingerprint",
    "submitted_by",
    "reprint_of_id",
)


def _build_job_insert() -> PrintJob:
    """A QUEUED job whose submitted columns are placeholders; ``expires_at`` is ``now()`` plus
    the ``ttl`` placeholder (an interval; NULL, and so no expiry, when the value is None)."""
    values = {name: Param(name, PrintJob._meta.get_field(name)) for name in _SUBMITTED}
    ttl = Cast(Param("ttl", DurationField()), DurationField())
    return PrintJob(status=JobStatus.QUEUED, expires_at=Now() + ttl, **values)


#: Django's INSERT of a job, compiled once per process (``ON CONFLICT DO NOTHING``: a taken
#: idempotency key inserts nothing).
_JOB_INSERT = PreparedInsert(
    _build_job_insert, returning=("created_at", "expires_at"), ignore_conflicts=True
)


def _insert_job_in_one_statement(
    target: Device,
    content: bytes,
    content_type: str,
    sha256: str,
    queued: tuple[str, dict[str, Any]],
    **fields: Any,
) -> PrintJob | None:
    """The job, its document row and its QUEUED event in one statement of data-modifying CTEs
    (PostgreSQL, documents in the database). The job's INSERT is Django's own, compiled once
    (:data:`_JOB_INSERT`); a taken idempotency key inserts nothing, and so neither do the other
    two."""
    job = _new_job(target, content, content_type, sha256, **fields)
    ttl = fields["ttl"]
    insert_job, params = _JOB_INSERT.statement(
        ttl=timedelta(seconds=ttl) if ttl is not None else None,
        **{name: getattr(job, name) for name in _SUBMITTED},
    )
    message, detail = queued
    document, document_params = storage.document_insert("job", job.pk, content, binary=True)
    queued_event, queued_params = events.server_event_insert(
        "job", job.pk, JobStatus.QUEUED, detail=detail, message=message, named=False
    )
    statement = f"""
        WITH job AS ({insert_job}),
        document AS ({document}),
        queued AS ({queued_event})
        SELECT created_at, expires_at FROM job
    """
    params = [*params, *document_params, *queued_params]
    # Bound by the server, on the same connection and transaction: the document travels as a
    # binary parameter (%b). Django's client-side binding would first write it into the SQL text
    # as a hex literal, several times its size in memory (docs/SECURITY.md, "Limits").
    rows = prepared.fetch(statement, params)
    row = rows[0] if rows else None
    if row is None:
        if not fields["idempotency_key"]:
            raise IntegrityError(f"job {job.pk} was not inserted")
        return None
    job.created_at, job.expires_at = row
    job._state.adding = False
    job._state.db = DEFAULT_DB_ALIAS
    return job


def _idempotency_conflict() -> Conflict:
    return Conflict(
        "idempotency_conflict", "This Idempotency-Key was already used for a different job."
    )


def _create_job(
    device: Device, content: bytes, content_type: str, sha256: str, **fields: Any
) -> PrintJob:
    """Insert the QUEUED job :func:`_new_job` builds from ``fields``, and its document.
    ``expires_at`` is ``created_at + ttl`` on the database clock (both come from the same
    statement)."""
    job = _new_job(device, content, content_type, sha256, **fields)
    job.save(force_insert=True)
    ttl = fields["ttl"]
    job.expires_at = job.created_at + timedelta(seconds=ttl) if ttl is not None else None
    storage.save_document(job, content)
    return job


def _new_job(
    device: Device,
    content: bytes,
    content_type: str,
    sha256: str,
    *,
    printer: str | None,
    title: str,
    options: dict[str, Any],
    priority: int,
    ttl: int | None,
    idempotency_key: str | None = None,
    idempotency_fingerprint: str = "",
    submitted_by: str = "",
    reprint_of: PrintJob | None = None,
) -> PrintJob:
    """A QUEUED job not saved yet (``expires_at`` an expression on the database clock)."""
    return PrintJob(
        tenant=device.tenant,
        device=device,
        printer=printer,
        title=title,
        content_type=content_type,
        size=len(content),
        sha256=sha256,
        options=options,
        priority=priority,
        status=JobStatus.QUEUED,
        idempotency_key=idempotency_key,
        idempotency_fingerprint=idempotency_fingerprint,
        submitted_by=submitted_by[:255],
        reprint_of=reprint_of,
        expires_at=(Now() + timedelta(seconds=ttl)) if ttl is not None else None,
    )


def _idempotent_replay(tenant: str, key: str, fingerprint: str) -> PrintJob | None:
    existing = PrintJob.objects.filter(tenant=tenant, idempotency_key=key).first()
    if existing is None:
        return None
    if existing.idempotency_fingerprint != fingerprint:
        raise _idempotency_conflict()
    return existing


def _check_content_type(content_type: Any) -> str:
    if isinstance(content_type, str):
        inputs.check_string("content_type", content_type)
    return formats.check_content_type(content_type)


def _check_content(content: Any) -> bytes:
    if isinstance(content, memoryview | bytearray):
        content = bytes(content)
    if not isinstance(content, bytes):
        raise Invalid(message="'document' must be bytes.")
    if not content:
        raise Invalid(message="'document' is empty.")
    limit = qprint_settings.MAX_DOCUMENT_BYTES
    if len(content) > limit:
        raise DocumentTooLarge(
            message=f"The document is {len(content)} bytes; the limit is {limit} bytes."
        )
    return content


def _check_options(options: Any) -> dict[str, Any]:
    return inputs.json_object("options", options, qprint_settings.MAX_DETAIL_BYTES)


def _check_priority(priority: Any) -> int:
    if priority is None:
        return 0
    priority = inputs.integer("priority", priority)
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise Invalid(message=f"'priority' must be between -{MAX_PRIORITY} and {MAX_PRIORITY}.")
    return priority


def _check_expires_in(expires_in: Any) -> int | None:
    if expires_in is DEFAULT_TTL:
        return qprint_settings.JOB_TTL_SECONDS
    if expires_in is None:
        return None
    if isinstance(expires_in, float) and expires_in.is_integer():
        expires_in = int(expires_in)
    if (
        isinstance(expires_in, bool)
        or not isinstance(expires_in, int)
        or not 0 < expires_in <= LONGEST_TTL_SECONDS
    ):
        raise Invalid(
            message="'expires_in' must be a positive number of seconds, "
            f"at most {LONGEST_TTL_SECONDS} (a century)."
        )
    return expires_in


def reprint_job(
    job: PrintJob | uuid.UUID | str,
    *,
    force: bool = False,
    by: str = "",
    tenant: str | None = None,
) -> PrintJob:
    """Make a new QUEUED job with the same document, ``reprint_of`` set.

    A job already reprinted raises :class:`Conflict` (``already_reprinted``) unless ``force``:
    the original's row is locked while deciding, so two clicks at once make one reprint.
    """
    by = inputs.label("by", by, 255)
    # The fit check reads the document (up to RENDER_TIMEOUT_SECONDS): before the row is locked.
    unlocked = jobs.job_in(PrintJob.objects.all(), job, tenant)
    content = storage.open_document(unlocked)
    reported = formats.reported_printer_of(unlocked.device_id, unlocked.printer)
    fit = media.check_fit(reported, content, unlocked.content_type, unlocked.options)
    with transaction.atomic():
        original = jobs.locked_job(job, tenant)
        if not force and PrintJob.objects.filter(reprint_of=original).exists():
            raise Conflict("already_reprinted", "This job was already reprinted.")
        device = Device.objects.get(pk=original.device_id)
        reprint = _create_job(
            device,
            content,
            original.content_type,
            original.sha256,
            printer=original.printer,
            title=original.title,
            options=original.options,
            priority=original.priority,
            ttl=qprint_settings.JOB_TTL_SECONDS,
            submitted_by=by or original.submitted_by,
            reprint_of=original,
        )
        events.record_server_event(
            reprint,
            JobStatus.QUEUED,
            message=fit.message,
            detail={"reprint_of": str(original.pk), "by": by, **fit.detail},
        )
        events.record_server_event(
            original, "REPRINTED", detail={"reprint": str(reprint.pk), "by": by, "force": force}
        )
        outbox.announce_job(reprint.pk, device.tenant, JobStatus.QUEUED, waited=False)
        wake_after_commit(device.tenant, device.pk, JOB_QUEUED)
    logger.info("job_reprinted job=%s reprint=%s force=%s", original.pk, reprint.pk, force)
    return reprint
