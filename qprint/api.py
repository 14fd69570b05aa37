"""qprint's Python API: every operation the HTTP API, the admin, the commands and host code use.

One code path per operation, whoever calls it. Each mutation runs in one transaction and wakes the
device after it commits (``qprint.wakeups.wake_after_commit``), so a device never hears of a
change it cannot yet see. Refusals raise :mod:`qprint.errors` exceptions carrying the SPEC's codes.

    from qprint import api
    job, created = api.submit_job("acme", "front-desk", pdf_bytes, "application/pdf",
                                  title="Invoice 42", idempotency_key="invoice-42")
    api.cancel_job(job)
"""

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, transaction
from django.db.models import BooleanField, Count, ExpressionWrapper, F, Q, Subquery, sql
from django.db.models.constants import OnConflict
from django.db.models.functions import Now

from qprint import credentials, documents, events
from qprint.conf import qprint_settings
from qprint.errors import (
    Conflict,
    DocumentTooLarge,
    Invalid,
    NotFound,
    UnsupportedContentType,
)
from qprint.models import (
    ApplicationKey,
    CommandStatus,
    Device,
    DeviceCommand,
    DevicePrinter,
    EventSource,
    PrintJob,
)
from qprint.states import CANCELLABLE_AT_ONCE, CANCELLABLE_BY_DEVICE, JobStatus, is_final
from qprint.wakeups import wake_after_commit

logger = logging.getLogger("qprint.api")

#: Content types qprint delivers (parameters such as ``; charset=utf-8`` are ignored when
#: checking). The agent hands them to the spooler as they are; anything else is answered 415.
ACCEPTED_CONTENT_TYPES: frozenset[str] = frozenset(
    {
        "application/pdf",
        "application/postscript",
        "application/vnd.cups-raw",
        "application/vnd.cups-pdf",
        "application/octet-stream",
        "text/plain",
        "image/png",
        "image/jpeg",
        "image/pwg-raster",
        "image/urf",
        "application/zpl",
        "application/x-zpl",
    }
)

#: ``expires_in`` not given: ``QPRINT["JOB_TTL_SECONDS"]`` applies.
DEFAULT_TTL = object()

MAX_PRIORITY = 1_000_000


# --------------------------------------------------------------------------------------------
# Lookups
# --------------------------------------------------------------------------------------------


def get_device(tenant: str, name: str) -> Device:
    """The device ``name`` of ``tenant``; :class:`NotFound` (``unknown_device``) otherwise."""
    device = Device.objects.filter(tenant=tenant, name=name).first()
    if device is None:
        raise NotFound("unknown_device", f"No device named {name!r}.")
    return device


def get_job(tenant: str, job_id: uuid.UUID | str) -> PrintJob:
    """The job ``job_id`` of ``tenant`` (with its device); :class:`NotFound` otherwise."""
    try:
        job_uuid = uuid.UUID(str(job_id))
    except ValueError:
        raise NotFound("not_found", "No such job.") from None
    job = PrintJob.objects.select_related("device").filter(tenant=tenant, pk=job_uuid).first()
    if job is None:
        raise NotFound("not_found", "No such job.")
    return job


@dataclass(frozen=True)
class DeviceSummary:
    """What the application sees of a device (``GET api/v1/devices``)."""

    name: str
    description: str
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
    printers: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "enabled": self.enabled,
            "online": self.online,
            "ready": self.ready,
            "paused": self.paused,
            "node": self.node,
            "queue_depth": self.queue_depth,
            "last_seen_at": self.last_seen_at.isoformat() if self.last_seen_at else None,
            "control_revision": self.control_revision,
            "settings_revision": self.settings_revision,
            "agent_info": self.agent_info,
            "printers": self.printers,
        }


def _summarised(queryset):
    return (
        queryset.annotate(
            online=ExpressionWrapper(
                Q(connection_id__isnull=False, connection_lease_expires_at__gt=Now()),
                output_field=BooleanField(),
            ),
            queue_depth=Count("jobs", filter=Q(jobs__status=JobStatus.QUEUED)),
        )
        .prefetch_related("printers")
        .order_by("name")
    )


def _summary(device: Device) -> DeviceSummary:
    online = bool(device.online)
    return DeviceSummary(
        name=device.name,
        description=device.description,
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
        printers=[
            {
                "name": p.name,
                "is_default": p.is_default,
                "status": p.status,
                "capabilities": p.capabilities,
                "updated_at": p.updated_at.isoformat(),
            }
            for p in device.printers.all()
        ],
    )


def list_devices(tenant: str) -> list[DeviceSummary]:
    """Every device of ``tenant``, by name. "online" is a live lease on the database clock."""
    return [_summary(d) for d in _summarised(Device.objects.filter(tenant=tenant))]


def device_summary(tenant: str, name: str) -> DeviceSummary:
    """One device of ``tenant``; :class:`NotFound` (``unknown_device``) otherwise."""
    device = _summarised(Device.objects.filter(tenant=tenant, name=name)).first()
    if device is None:
        raise NotFound("unknown_device", f"No device named {name!r}.")
    return _summary(device)


# --------------------------------------------------------------------------------------------
# Jobs
# --------------------------------------------------------------------------------------------


def submit_job(
    tenant: str,
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
    """
    if isinstance(device, Device):
        if device.tenant != tenant:
            raise NotFound("unknown_device", f"No device named {device.name!r}.")
        device_name = device.name
    else:
        device_name = device
    content_type = _check_content_type(content_type)
    content = _check_content(content)
    options = _check_options(options)
    priority = _check_priority(priority)
    ttl = _check_expires_in(expires_in)
    printer = _check_text("printer", printer, 255) or None
    title = _check_text("title", title, 255)
    if idempotency_key is not None:
        idempotency_key = _check_text("idempotency_key", idempotency_key, 255) or None
    sha256 = documents.digest(content)
    fingerprint = events.fingerprint_of(
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

    target = _submission_target(tenant, device_name, idempotency_key)
    if target.idempotent_job is not None:
        if target.idempotent_fingerprint != fingerprint:
            raise _idempotency_conflict()
        return PrintJob.objects.get(pk=target.idempotent_job), False

    with transaction.atomic():
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
        if connection.vendor == "postgresql" and type(documents.backend()) is (
            documents.DatabaseDocuments
        ):
            job = _insert_job_in_one_statement(target, content, content_type, sha256, **fields)
        else:
            job = _insert_job_step_by_step(target, content, content_type, sha256, **fields)
        if job is None:
            # A concurrent submission with this key committed first: answer with its job.
            existing = _idempotent_replay(tenant, idempotency_key, fingerprint)
            if existing is None:
                raise RuntimeError(f"idempotency key {idempotency_key!r} taken but not found")
            return existing, False
        wake_after_commit(tenant, target.pk, "job_queued")
    logger.info(
        "job_queued job=%s tenant=%s device=%s size=%s priority=%s",
        job.pk,
        tenant,
        target.name,
        job.size,
        job.priority,
    )
    return job, True


def _submission_target(tenant: str, name: str, idempotency_key: str | None) -> Device:
    """The device (``NotFound`` otherwise) and, in the same statement, the job already made
    under ``idempotency_key`` (``idempotent_job``, ``idempotent_fingerprint``)."""
    made = PrintJob.objects.filter(tenant=tenant, idempotency_key=idempotency_key)
    device = (
        Device.objects.filter(tenant=tenant, name=name)
        .annotate(
            idempotent_job=Subquery(made.values("pk")[:1]),
            idempotent_fingerprint=Subquery(made.values("idempotency_fingerprint")[:1]),
        )
        .first()
    )
    if device is None:
        raise NotFound("unknown_device", f"No device named {name!r}.")
    if idempotency_key is None:
        device.idempotent_job = None
    return device


def _insert_job_step_by_step(
    target: Device, content: bytes, content_type: str, sha256: str, **fields: Any
) -> PrintJob | None:
    """The job, its document and its QUEUED event as separate statements; None when the
    idempotency key was taken meanwhile."""
    try:
        with transaction.atomic():
            job = _create_job(target, content, content_type, sha256, **fields)
    except IntegrityError:
        if not fields["idempotency_key"]:
            raise
        return None
    events.record_server_event(
        job, JobStatus.QUEUED, detail={"submitted_by": fields["submitted_by"]}
    )
    return job


def _insert_job_in_one_statement(
    target: Device, content: bytes, content_type: str, sha256: str, **fields: Any
) -> PrintJob | None:
    """The job, its document row and its QUEUED event in one statement of data-modifying CTEs
    (PostgreSQL, documents in the database). The job's INSERT is Django's own (``ON CONFLICT DO
    NOTHING``: a taken idempotency key inserts nothing, and so neither do the other two)."""
    job = _new_job(target, content, content_type, sha256, **fields)
    query = sql.InsertQuery(PrintJob, on_conflict=OnConflict.IGNORE)
    query.insert_values([f for f in PrintJob._meta.local_concrete_fields if not f.generated], [job])
    compiler = query.get_compiler(using=DEFAULT_DB_ALIAS)
    compiler.returning_fields = [
        PrintJob._meta.get_field("created_at"),
        PrintJob._meta.get_field("expires_at"),
    ]
    [(insert_job, params)] = compiler.as_sql()
    detail = {"submitted_by": fields["submitted_by"]}
    statement = f"""
        WITH job AS ({insert_job}),
        document AS (INSERT INTO qprint_document (job_id, content) SELECT %s, %s FROM job),
        queued AS (
            INSERT INTO qprint_job_event
                (event_id, job_id, device_id, source, type, message, detail, fingerprint)
            SELECT %s, %s, NULL, %s, %s, '', %s::jsonb, %s FROM job
        )
        SELECT created_at, expires_at FROM job
    """
    params = [
        *params,
        job.pk,
        content,
        uuid.uuid4(),
        job.pk,
        EventSource.SERVER.value,
        JobStatus.QUEUED.value,
        json.dumps(detail),
        events.server_event_fingerprint(job.pk, JobStatus.QUEUED, "", detail),
    ]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
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
    """Insert a QUEUED job and its document. ``expires_at`` is ``created_at + ttl`` on the
    database clock (both come from the same statement)."""
    job = _new_job(
        device,
        content,
        content_type,
        sha256,
        printer=printer,
        title=title,
        options=options,
        priority=priority,
        ttl=ttl,
        idempotency_key=idempotency_key,
        idempotency_fingerprint=idempotency_fingerprint,
        submitted_by=submitted_by,
        reprint_of=reprint_of,
    )
    job.save(force_insert=True)
    job.expires_at = job.created_at + timedelta(seconds=ttl) if ttl is not None else None
    documents.save_document(job, content)
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
    if not isinstance(content_type, str) or not content_type.strip():
        raise Invalid(message="'content_type' is required.")
    base = content_type.split(";", 1)[0].strip().lower()
    if base not in ACCEPTED_CONTENT_TYPES:
        raise UnsupportedContentType(
            message=f"Content type {base!r} is not supported; use one of "
            f"{', '.join(sorted(ACCEPTED_CONTENT_TYPES))}."
        )
    return content_type.strip()[:100]


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
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise Invalid(message="'options' must be a JSON object.")
    return options


def _check_priority(priority: Any) -> int:
    if priority is None:
        return 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise Invalid(message="'priority' must be an integer.")
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise Invalid(message=f"'priority' must be between -{MAX_PRIORITY} and {MAX_PRIORITY}.")
    return priority


def _check_expires_in(expires_in: Any) -> int | None:
    if expires_in is DEFAULT_TTL:
        return qprint_settings.JOB_TTL_SECONDS
    if expires_in is None:
        return None
    if isinstance(expires_in, bool) or not isinstance(expires_in, int) or expires_in <= 0:
        raise Invalid(message="'expires_in' must be a positive number of seconds.")
    return expires_in


def _check_text(name: str, value: Any, max_length: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Invalid(message=f"'{name}' must be a string.")
    if len(value) > max_length:
        raise Invalid(message=f"'{name}' is longer than {max_length} characters.")
    return value


def _locked_job(job: PrintJob | uuid.UUID | str, tenant: str | None) -> PrintJob:
    job_id = job.pk if isinstance(job, PrintJob) else job
    queryset = PrintJob.objects.select_for_update(of=("self",), no_key=True)
    if tenant is not None:
        queryset = queryset.filter(tenant=tenant)
    try:
        locked = queryset.filter(pk=uuid.UUID(str(job_id))).first()
    except ValueError:
        locked = None
    if locked is None:
        raise NotFound("not_found", "No such job.")
    return locked


def cancel_job(
    job: PrintJob | uuid.UUID | str, *, tenant: str | None = None, by: str = ""
) -> PrintJob:
    """Cancel a job as the application.

    QUEUED or CLAIMED: the job is CANCELLED at once (a later device event answers
    ``job_cancelled``). RECEIVED or SPOOLED: ``cancel_requested`` is set and a ``CANCEL_JOB``
    command goes to the device, which reports the outcome (once per job). Final: :class:`Conflict`
    (``job_final``). ``tenant`` restricts the lookup to that tenant.
    """
    with transaction.atomic():
        locked = _locked_job(job, tenant)
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
            DeviceCommand.objects.create(
                device_id=locked.device_id,
                type=DeviceCommand.CANCEL_JOB,
                payload={"job_id": str(locked.pk), "claim_id": str(locked.claim_id)},
            )
            events.record_server_event(
                locked, "CANCEL_REQUESTED", message=reason, detail={"by": by}
            )
            wake_after_commit(locked.tenant, locked.device_id, "command")
            logger.info("job_cancel_requested job=%s device=%s", locked.pk, locked.device_id)
    return locked


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
    with transaction.atomic():
        original = _locked_job(job, tenant)
        if not force and PrintJob.objects.filter(reprint_of=original).exists():
            raise Conflict("already_reprinted", "This job was already reprinted.")
        content = documents.open_document(original)
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
            reprint, JobStatus.QUEUED, detail={"reprint_of": str(original.pk), "by": by}
        )
        events.record_server_event(
            original, "REPRINTED", detail={"reprint": str(reprint.pk), "by": by, "force": force}
        )
        wake_after_commit(device.tenant, device.pk, "job_queued")
    logger.info("job_reprinted job=%s reprint=%s force=%s", original.pk, reprint.pk, force)
    return reprint


# --------------------------------------------------------------------------------------------
# Device control, settings, commands, printers
# --------------------------------------------------------------------------------------------


def _device_id(device: Device | int) -> int:
    return device.pk if isinstance(device, Device) else int(device)


def _set_paused(device: Device | int, paused: bool, reason: str) -> Device:
    device_id = _device_id(device)
    with transaction.atomic():
        changed = Device.objects.filter(pk=device_id, paused=not paused).update(
            paused=paused, control_revision=F("control_revision") + 1
        )
        fresh = Device.objects.filter(pk=device_id).first()
        if fresh is None:
            raise NotFound("unknown_device", "No such device.")
        if changed:
            wake_after_commit(fresh.tenant, fresh.pk, reason)
            logger.info(
                "device_%s device=%s control_revision=%s", reason, fresh, fresh.control_revision
            )
    return fresh


def pause_device(device: Device | int) -> Device:
    """Pause the device (bumps ``control_revision``; no-op when already paused)."""
    return _set_paused(device, True, "paused")


def resume_device(device: Device | int) -> Device:
    """Resume the device (bumps ``control_revision``; no-op when not paused)."""
    return _set_paused(device, False, "resumed")


def update_settings(device: Device | int, values: dict[str, Any]) -> Device:
    """Replace the device's settings with ``values`` and bump ``settings_revision``."""
    if not isinstance(values, dict):
        raise Invalid(message="'settings' must be a JSON object.")
    device_id = _device_id(device)
    with transaction.atomic():
        changed = Device.objects.filter(pk=device_id).update(
            settings=values, settings_revision=F("settings_revision") + 1
        )
        if not changed:
            raise NotFound("unknown_device", "No such device.")
        fresh = Device.objects.get(pk=device_id)
        wake_after_commit(fresh.tenant, fresh.pk, "settings")
    logger.info("device_settings device=%s settings_revision=%s", fresh, fresh.settings_revision)
    return fresh


def send_command(
    device: Device | int, type: str, payload: dict[str, Any] | None = None
) -> DeviceCommand:
    """Queue a command for the device (delivered over its socket, result reported back)."""
    if not isinstance(type, str) or not type.strip() or len(type) > 50:
        raise Invalid(message="'type' must be a non-empty string of at most 50 characters.")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise Invalid(message="'payload' must be a JSON object.")
    device_id = _device_id(device)
    with transaction.atomic():
        target = Device.objects.filter(pk=device_id).only("id", "tenant").first()
        if target is None:
            raise NotFound("unknown_device", "No such device.")
        command = DeviceCommand.objects.create(device=target, type=type.strip(), payload=payload)
        wake_after_commit(target.tenant, target.pk, "command")
    logger.info("command_queued command=%s device=%s type=%s", command.pk, device_id, command.type)
    return command


def pending_commands(device: Device | int) -> list[DeviceCommand]:
    """Commands the device has not finished (PENDING or DELIVERED), oldest first."""
    return list(
        DeviceCommand.objects.filter(
            device_id=_device_id(device),
            status__in=[CommandStatus.PENDING, CommandStatus.DELIVERED],
        ).order_by("created_at")
    )


def record_command_result(
    device: Device | int,
    command_id: uuid.UUID | str,
    status: str,
    result: Any = None,
) -> DeviceCommand:
    """Record the device's result of a command (``DONE`` or ``FAILED``).

    A command already finished is answered as it is (the device may retry its report).
    """
    if status not in (CommandStatus.DONE, CommandStatus.FAILED):
        raise Invalid(message="'status' must be DONE or FAILED.")
    try:
        command_uuid = uuid.UUID(str(command_id))
    except ValueError:
        raise NotFound("not_found", "No such command.") from None
    device_id = _device_id(device)
    with transaction.atomic():
        command = (
            DeviceCommand.objects.select_for_update()
            .filter(pk=command_uuid, device_id=device_id)
            .first()
        )
        if command is None:
            raise NotFound("not_found", "No such command.")
        if command.status in (CommandStatus.DONE, CommandStatus.FAILED, CommandStatus.EXPIRED):
            return command
        DeviceCommand.objects.filter(pk=command.pk).update(
            status=status, result=result, finished_at=Now()
        )
        command.refresh_from_db()
    logger.info("command_finished command=%s device=%s status=%s", command.pk, device_id, status)
    return command


def replace_printers(device: Device | int, printers: Any) -> list[DevicePrinter]:
    """Replace the device's printer list with ``printers`` (a list of objects with ``name``,
    ``is_default``, ``status``, ``capabilities``)."""
    if not isinstance(printers, list):
        raise Invalid(message="'printers' must be a list.")
    rows: dict[str, DevicePrinter] = {}
    device_id = _device_id(device)
    for index, item in enumerate(printers):
        if not isinstance(item, dict):
            raise Invalid(message=f"'printers[{index}]' must be an object.")
        name = item.get("name")
        if not isinstance(name, str) or not name or len(name) > 255:
            raise Invalid(message=f"'printers[{index}].name' must be a non-empty string.")
        status = item.get("status") or ""
        capabilities = item.get("capabilities") or {}
        if not isinstance(status, str) or not isinstance(capabilities, dict):
            raise Invalid(
                message=f"'printers[{index}]': 'status' must be a string, 'capabilities' an object."
            )
        rows[name] = DevicePrinter(
            device_id=device_id,
            name=name,
            is_default=bool(item.get("is_default")),
            status=status[:100],
            capabilities=capabilities,
        )
    with transaction.atomic():
        if not Device.objects.select_for_update(no_key=True).filter(pk=device_id).exists():
            raise NotFound("unknown_device", "No such device.")
        DevicePrinter.objects.filter(device_id=device_id).delete()
        created = DevicePrinter.objects.bulk_create(rows.values())
    return created


# --------------------------------------------------------------------------------------------
# Credentials: devices and application keys
# --------------------------------------------------------------------------------------------


def create_device(tenant: str, name: str, *, description: str = "") -> tuple[Device, str]:
    """Register a device; returns it and its token (shown once, only its hash is stored)."""
    tenant, name = _check_text("tenant", tenant, 100), _check_text("name", name, 150)
    if not tenant or not name:
        raise Invalid(message="A device needs a tenant and a name.")
    token = credentials.new_secret()
    try:
        with transaction.atomic():
            device = Device.objects.create(
                tenant=tenant,
                name=name,
                description=description,
                token_hash=credentials.hash_secret(token),
            )
    except IntegrityError:
        raise Conflict("device_exists", f"Device {tenant}/{name} already exists.") from None
    logger.info("device_created device=%s", device)
    return device, token


def rotate_device_token(device: Device | int) -> str:
    """Give the device a new token; the old one stops working at once (its socket is told)."""
    device_id = _device_id(device)
    token = credentials.new_secret()
    with transaction.atomic():
        target = Device.objects.select_for_update(no_key=True).filter(pk=device_id).first()
        if target is None:
            raise NotFound("unknown_device", "No such device.")
        Device.objects.filter(pk=device_id).update(token_hash=credentials.hash_secret(token))
        wake_after_commit(target.tenant, target.pk, "token_rotated")
    logger.info("device_token_rotated device=%s", target)
    return token


def set_device_enabled(device: Device | int, enabled: bool) -> Device:
    """Enable or disable a device. A disabled device cannot claim (403) or connect."""
    device_id = _device_id(device)
    with transaction.atomic():
        changed = Device.objects.filter(pk=device_id, enabled=not enabled).update(enabled=enabled)
        fresh = Device.objects.filter(pk=device_id).first()
        if fresh is None:
            raise NotFound("unknown_device", "No such device.")
        if changed:
            wake_after_commit(fresh.tenant, fresh.pk, "enabled" if enabled else "disabled")
            logger.info("device_%s device=%s", "enabled" if enabled else "disabled", fresh)
    return fresh


def disable_device(device: Device | int) -> Device:
    return set_device_enabled(device, False)


def enable_device(device: Device | int) -> Device:
    return set_device_enabled(device, True)


def create_application_key(tenant: str, name: str) -> tuple[ApplicationKey, str]:
    """Create an application key for ``tenant``; returns it and the secret (shown once)."""
    tenant, name = _check_text("tenant", tenant, 100), _check_text("name", name, 150)
    if not tenant or not name:
        raise Invalid(message="A key needs a tenant and a name.")
    secret = credentials.new_secret()
    try:
        with transaction.atomic():
            key = ApplicationKey.objects.create(
                tenant=tenant, name=name, key_hash=credentials.hash_secret(secret)
            )
    except IntegrityError:
        raise Conflict("key_exists", f"A live key {tenant}/{name} already exists.") from None
    logger.info("appkey_created tenant=%s name=%s", tenant, name)
    return key, secret


def revoke_application_key(tenant: str, name: str) -> ApplicationKey:
    """Revoke the live key ``name`` of ``tenant``; it stops working at once."""
    with transaction.atomic():
        key = (
            ApplicationKey.objects.select_for_update()
            .filter(tenant=tenant, name=name, revoked=False)
            .first()
        )
        if key is None:
            raise NotFound("not_found", f"No live key named {tenant}/{name}.")
        ApplicationKey.objects.filter(pk=key.pk).update(revoked=True)
        key.revoked = True
    logger.info("appkey_revoked tenant=%s name=%s", tenant, name)
    return key
