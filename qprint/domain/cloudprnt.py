"""CloudPRNT printers: devices of kind ``cloudprnt`` that poll the server by themselves
(docs/CLOUDPRNT.md). The use cases of the transport ``qprint.cloudprnt``, on the same rules as
every device:

- :func:`poll_live` / :func:`poll` - the poll is the printer's connection: the common case is
  ONE statement, its authentication included (:func:`qprint.domain.connection.poll_live`); a
  poll it does not match is authenticated as every device is and takes
  :func:`qprint.domain.connection.poll`. With the claim gate open (:mod:`qprint.core.gate`,
  judged from the row the poll returned) and a job held or claimable, the job is claimed by THE
  claim (:func:`qprint.domain.claim.claim_next_job`), replayed at every poll until it leaves
  CLAIMED. The printer's state (``statusCode``) and what it reports of itself are kept as its
  printer (``DevicePrinter``), written only when they changed.
- :func:`fetch` - the printer GETs the job: RECEIVED, recorded once (a device event under an id
  derived from the claim, through :mod:`qprint.domain.events`); a repeated GET gets the same bytes
  and records nothing new.
- :func:`confirm` - the printer's confirmation: 2xx PRINTED, any other code FAILED with the code
  and its meaning (the same way: one event id per claim).
- :func:`expire_unconfirmed` - a job fetched and not confirmed within
  ``QPRINT["CLOUDPRNT_CONFIRM_SECONDS"]`` ends OUTCOME_UNKNOWN (run with the expiry task); a
  final job is never claimable, so it is never offered again.
- :func:`check_submission` - the formats and options a CloudPRNT device takes, checked at
  submission (422 ``unsupported_format`` / ``unsupported_option``).

Media: the device's settings ``media_types`` (default :data:`DEFAULT_MEDIA_TYPES`) are what its
printer takes as they are; a PDF, PNG or JPEG job is also offered as ``image/png`` rendered at the
``dots`` setting (default 576: 80 mm paper at 203 dpi) by the document renderer.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from qprint.core import cloudprnt_protocol as protocol
from qprint.core import cluster, gate
from qprint.core.conf import qprint_settings
from qprint.core.errors import Conflict, EventRejected, Invalid, NotFound, QPrintError
from qprint.core.states import JobStatus
from qprint.core.text import storable
from qprint.documents import render, storage
from qprint.domain import claim, connection, credentials, devices, events
from qprint.models import Device, DeviceKind, PrintJob
from qprint.webhooks import outbox

logger = logging.getLogger("qprint.cloudprnt")

#: The device's one printer, as its printer list shows it.
PRINTER_NAME = "cloudprnt"
RENDERED = "image/png"
#: Jobs the renderer turns into ``image/png`` for a printer that takes it (listed in this order).
RENDERABLE = tuple(sorted(render.RENDERABLE))
DEFAULT_MEDIA_TYPES = (
    "image/png",
    "image/jpeg",
    "text/plain",
    "application/vnd.star.starprnt",
    "application/vnd.star.line",
)
DEFAULT_DOTS = 576
MAX_DOTS = 4096
#: Pages of a PDF rendered into the one image a printer gets.
MAX_RENDERED_PAGES = 20
#: Event ids of a claim's RECEIVED and final events (one of each per claim, on any node).
_EVENT_NAMESPACE = uuid.UUID("6c1d3f6e-9a51-4d0b-8f7e-2f0c61c1a7d2")


class MacRefused(QPrintError):
    """A poll or request from another printer than the one the device is bound to (403)."""

    code = "printer_mismatch"
    status = 403
    default_message = "This device is bound to another printer."


class MediaRefused(QPrintError):
    """The printer asked for a media type the job was not offered in (415)."""

    code = "unsupported_media_type"
    status = 415
    default_message = "The job was not offered in that media type."


# --- what a device takes ----------------------------------------------------------------------


def media_types(settings: dict[str, Any]) -> tuple[str, ...]:
    """The media types the device's printer takes as they are (its ``media_types`` setting)."""
    listed = settings.get("media_types") if isinstance(settings, dict) else None
    if isinstance(listed, list) and listed and all(isinstance(t, str) for t in listed):
        return tuple(t.strip().lower() for t in listed if t.strip())
    return DEFAULT_MEDIA_TYPES


def dots(settings: dict[str, Any]) -> int:
    """The printable width in dots (its ``dots`` setting) images are rendered at."""
    value = settings.get("dots") if isinstance(settings, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 8 <= value <= MAX_DOTS:
        return value
    return DEFAULT_DOTS


def accepted_formats(settings: dict[str, Any]) -> tuple[str, ...]:
    """Every job content type the device can print: its media types, and what the renderer
    turns into ``image/png`` when it takes that."""
    taken = media_types(settings)
    extra = tuple(t for t in RENDERABLE if RENDERED in taken and t not in taken)
    return taken + extra


def offered(settings: dict[str, Any], content_type: str) -> tuple[str, ...]:
    """The media types a job of ``content_type`` is offered in, preferred first: its own type
    when the printer takes it, then ``image/png`` rendered from it when it can be."""
    base = content_type.split(";", 1)[0].strip().lower()
    taken = media_types(settings)
    types = [base] if base in taken else []
    if base in RENDERABLE and RENDERED in taken and RENDERED not in types:
        types.append(RENDERED)
    return tuple(types)


def check_submission(device: Device, content_type: str, options: dict[str, Any]) -> None:
    """At submission, for a CloudPRNT device: 422 ``unsupported_format`` naming what it takes,
    or ``unsupported_option`` for a cut or buzzer option it cannot do. Other devices: nothing."""
    if device.kind != DeviceKind.CLOUDPRNT:
        return
    if not offered(device.settings, content_type):
        base = content_type.split(";", 1)[0].strip().lower()
        raise Invalid(
            "unsupported_format",
            f"The CloudPRNT printer {device.name!r} does not take {base}; it takes "
            f"{', '.join(accepted_formats(device.settings))}.",
        )
    cut = options.get("cut")
    if cut is not None and cut not in protocol.CUTS:
        raise Invalid("unsupported_option", f"option 'cut': one of {', '.join(protocol.CUTS)}.")
    for name in ("buzzer_start", "buzzer_end"):
        value = options.get(name)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 9
        ):
            raise Invalid("unsupported_option", f"option '{name}': a number from 1 to 9.")


# --- the poll ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PollAnswer:
    """What the poll answers: a job to fetch (``job_token``, ``media_types``), or none; ``ask``:
    request the printer to describe itself (its model, firmware, encodings, poll interval)."""

    job_token: str | None = None
    media_types: tuple[str, ...] = ()
    ask: bool = False


def poll(device: Device, report: protocol.Poll, *, node: str | None = None) -> PollAnswer:
    """A poll of ``device`` (authenticated, enabled, of kind ``cloudprnt``): the full way, for a
    poll :func:`poll_live` did not match (the first one, a lease run out, another MAC)."""
    node = node or cluster.node_id()
    try:
        polled = connection.poll(
            device.pk, report.mac, node, qprint_settings.CLOUDPRNT_POLL_SECONDS
        )
    except connection.MacRefused as refused:
        raise _mac_refused(device, refused.bound, report.mac, "poll") from None
    return _answer(device, polled, report, node)


def _mac_refused(device: Device, bound: str, mac: str, what: str) -> MacRefused:
    """The refusal of a poll, GET or confirmation from a printer other than the bound one, logged
    and kept in the device's ``agent_info`` (``refused_mac``, ``refused_at``) for the admin."""
    logger.warning("cloudprnt_mac_refused device=%s bound=%s polled=%s", device, bound, mac)
    devices.keep_agent_info(
        device.pk, {"refused_mac": mac, "refused_at": datetime.now(UTC).isoformat()}
    )
    return MacRefused(message=f"This device is bound to printer {bound}; a {what} came from {mac}.")


def poll_live(
    token: str, user: str, report: protocol.Poll, *, node: str | None = None
) -> PollAnswer | None:
    """The common poll, its authentication included, in one statement
    (:func:`qprint.domain.connection.poll_live`): the live printer of the device holding
    ``token`` (named ``user``, when given), polling from its bound MAC. ``None`` when that
    statement matched nothing (it wrote nothing): authenticate the way every device does
    (:func:`qprint.domain.credentials.authenticate_device`, whose throttle counts the wrong
    credentials) and :func:`poll`. The token is hashed and the stored hash compared in constant
    time as the credential lookup does. A user name the database could not hold (a NUL) names
    no device: the full way answers it."""
    if not storable(user):
        return None
    node = node or cluster.node_id()
    digest = credentials.hash_secret(token)
    found = connection.poll_live(
        digest, user, report.mac, node, qprint_settings.CLOUDPRNT_POLL_SECONDS
    )
    if found is None:
        return None
    device, polled = found
    try:
        credentials.require_token(device.token_hash, device.enabled, digest)
    except QPrintError:
        return None  # the full way decides, and counts it
    return _answer(device, polled, report, node)


def _answer(
    device: Device, polled: connection.Polled, report: protocol.Poll, node: str
) -> PollAnswer:
    """What a poll answers once its statement ran: the printer's row kept, then a job claimed
    when one is held or claimable and the claim gate (judged from the row) is open."""
    described = _keep_printer(device, polled, report)
    state = polled.state
    if report.printing or not (state.claimed_job_id or state.job_queued):
        return PollAnswer(ask=not described)
    if not gate.is_open(state):
        return PollAnswer()
    try:
        assignment = claim.claim_next_job(device.pk, node=node)
    except QPrintError as refused:  # the gate closed between the two statements
        logger.info("cloudprnt_claim_refused device=%s code=%s", device, refused.code)
        return PollAnswer()
    if assignment is None:
        return PollAnswer(ask=not described)
    return PollAnswer(
        job_token=str(assignment.claim_id),
        media_types=offered(device.settings, assignment.content_type),
    )


def _keep_printer(device: Device, polled: connection.Polled, report: protocol.Poll) -> bool:
    """Write the printer's row when its state or what it says of itself changed (announcing a
    new state as ``device.printer_state``); a poll that changes nothing writes nothing. True when
    the printer has described itself (its model is known): else the answer asks it to."""
    stored = polled.printer_capabilities
    status = report.status
    about = report.about_itself()
    known = bool((stored or {}).get("model") or about.get("model"))
    state_changed = (
        stored is None
        or polled.printer_status != status.state
        or stored.get("state_reasons") != list(status.reasons)
        or stored.get("status_code") != status.code
    )
    described = stored is None or any(stored.get(k) != v for k, v in about.items())
    formats = list(accepted_formats(device.settings))
    if not (state_changed or described or (stored or {}).get("document_formats") != formats):
        return known
    capabilities = {
        **(stored or {}),
        **about,
        "document_formats": formats,
        "media_types": list(media_types(device.settings)),
        "dots": dots(device.settings),
        "copies_max": 1,
        "sides": ["one-sided"],
        "color": False,
        "mac": report.mac,
        "status_code": status.code,
        "state_message": status.text,
        "state_reasons": list(status.reasons),
    }
    with transaction.atomic():
        printer = devices.keep_printer(device.pk, PRINTER_NAME, status.state, capabilities)
        if about:
            devices.keep_agent_info(device.pk, {"client": "cloudprnt", **about})
        if state_changed and stored is not None:
            outbox.announce_printer_state(device.pk, device.tenant, printer)
    if state_changed:
        logger.info(
            "cloudprnt_printer_state device=%s state=%s code=%s reasons=%s",
            device,
            status.state,
            status.code,
            ",".join(status.reasons),
        )
    return known


# --- the job ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    content: bytes
    content_type: str
    options: dict[str, Any]


def _event_id(claim_id: uuid.UUID, step: str) -> str:
    return str(uuid.uuid5(_EVENT_NAMESPACE, f"{claim_id}:{step}"))


def _held_job(device: Device, token: str | None, statuses: tuple[str, ...] | None) -> PrintJob:
    """The device's job under claim ``token`` (absent: the job it holds, the latest claimed) in
    ``statuses`` (``None``: any status but QUEUED). A job never claimed (cancelled or expired
    while queued) is none of them."""
    jobs = PrintJob.objects.filter(device_id=device.pk, claimed_at__isnull=False)
    jobs = jobs.filter(status__in=statuses) if statuses else jobs.exclude(status=JobStatus.QUEUED)
    if token:
        try:
            jobs = jobs.filter(claim_id=uuid.UUID(token))
        except ValueError:
            raise NotFound(message="No such job on this printer.") from None
    job = jobs.order_by("-claimed_at").first()
    if job is None:
        raise NotFound(message="No such job on this printer.")
    return job


def check_mac(device: Device, mac: str, what: str) -> None:
    """A job's GET or confirmation (``what``) names the printer the device is bound to (403
    otherwise)."""
    if device.printer_mac and mac != device.printer_mac:
        raise _mac_refused(device, device.printer_mac, mac, what)


def fetch(device: Device, mac: str, token: str | None, media_type: str) -> Fetched:
    """The job's document in ``media_type`` (404 no such job, 415 not offered in that type);
    the job becomes RECEIVED, once."""
    check_mac(device, mac, "job request")
    job = _held_job(device, token, (JobStatus.CLAIMED, JobStatus.RECEIVED))
    types = offered(device.settings, job.content_type)
    media_type = (media_type or (types[0] if types else "")).strip().lower()
    if media_type not in types:
        raise MediaRefused(
            message=f"The job is offered as {', '.join(types) or 'nothing'}, "
            f"not {media_type or '?'}."
        )
    base = render.base_type(job.content_type)
    if media_type == base:
        content = storage.open_document(job)
    else:
        content = _rendered(job, base, dots(device.settings))
    if job.status == JobStatus.CLAIMED:
        detail = {"media_type": media_type, "mac": mac}
        try:
            _record(device, job, "received", JobStatus.RECEIVED, f"fetched as {media_type}", detail)
        except EventRejected as refused:
            if refused.code != "event_conflict":  # not a concurrent GET: the job ended meanwhile
                raise NotFound(message="The job is no longer to be printed.") from None
    return Fetched(content=content, content_type=media_type, options=job.options or {})


def _rendered(job: PrintJob, content_type: str, width: int) -> bytes:
    """``image/png`` of the job's document at ``width`` dots, one-bit, its pages one under the
    other (a receipt), drawn by the render worker and kept in the process's render cache: a
    printer's second GET of the job is not drawn again."""

    def drawn() -> bytes:
        content = storage.open_document(job)
        return render.render_strip(
            content, content_type, pages=MAX_RENDERED_PAGES, width=width, mode="mono"
        )

    return render.keep((job.pk, "strip", width, "mono"), drawn)


def _record(
    device: Device, job: PrintJob, step: str, status: str, message: str, detail: dict[str, Any]
) -> bool:
    """Record the claim's ``step`` event, one id per claim and step (any node): True when this
    call recorded it, False for a replay; :class:`EventRejected` as the events module says."""
    payload = {
        "event_id": _event_id(job.claim_id, step),
        "type": status,
        "claim_id": str(job.claim_id),
        "occurred_at": datetime.now(UTC).isoformat(),
        "message": message,
        "detail": detail,
    }
    return events.record_device_event(device, job.pk, payload).created


@dataclass(frozen=True)
class Confirmed:
    status: str
    recorded: bool


def confirm(device: Device, mac: str, token: str | None, said: protocol.Confirmation) -> Confirmed:
    """The printer's confirmation of the job ``token``: PRINTED, or FAILED with the code and its
    meaning. A confirmation repeated, or for a job that ended meanwhile, changes nothing."""
    check_mac(device, mac, "confirmation")
    job = _held_job(device, token, None)
    status = said.status
    if said.printed:
        target, message = JobStatus.PRINTED, status.text
    else:
        target = JobStatus.FAILED
        message = status.text + (f" ({', '.join(status.reasons)})" if status.reasons else "")
    detail = {"code": status.code, "printer_state_reasons": list(status.reasons), "mac": mac}
    try:
        recorded = _record(device, job, "confirmed", target, message, detail)
    except EventRejected:  # confirmed already, or the job ended (cancelled, unconfirmed)
        recorded = False
    job.refresh_from_db(fields=["status"])
    logger.info(
        "cloudprnt_confirmed device=%s job=%s code=%s status=%s recorded=%s",
        device,
        job.pk,
        status.code,
        job.status,
        recorded,
    )
    return Confirmed(status=job.status, recorded=recorded)


# --- the unconfirmed sweep --------------------------------------------------------------------


def _unconfirmed():
    cutoff = Now() - timedelta(seconds=qprint_settings.CLOUDPRNT_CONFIRM_SECONDS)
    return Q(status=JobStatus.RECEIVED, received_at__lt=cutoff, device__kind=DeviceKind.CLOUDPRNT)


def expire_unconfirmed(batch: int = 200) -> int:
    """Jobs a CloudPRNT printer fetched and never confirmed in time: OUTCOME_UNKNOWN (the
    printer may or may not have printed them; nothing reprints them). Returns how many."""
    seconds = qprint_settings.CLOUDPRNT_CONFIRM_SECONDS
    due = list(
        PrintJob.objects.filter(_unconfirmed())
        .order_by("received_at")
        .values_list("pk", flat=True)[:batch]
    )
    ended = 0
    for job_id in due:
        with transaction.atomic():
            job = (
                PrintJob.objects.select_for_update(of=("self",), no_key=True)
                .filter(_unconfirmed(), pk=job_id)
                .first()
            )
            if job is not None and events.move_by_server(
                job,
                JobStatus.OUTCOME_UNKNOWN,
                reason=f"the printer fetched the job and did not confirm it within {seconds:g} s",
            ):
                ended += 1
    if ended:
        logger.info("cloudprnt_unconfirmed count=%s", ended)
    return ended


def forget_printer(device: Device | int) -> None:
    """Unbind the device's printer (it was replaced): the next poll with its token binds again.

    Raises :class:`NotFound` (``unknown_device``), or :class:`Conflict` (``not_cloudprnt``) for an
    agent's device, which has no printer of its own to forget."""
    device_id = device.pk if isinstance(device, Device) else int(device)
    if not connection.forget_printer(device_id):
        if Device.objects.filter(pk=device_id).exists():
            raise Conflict(
                "not_cloudprnt",
                f"Device {device_id} is an agent's device, not a CloudPRNT printer.",
            )
        raise NotFound("unknown_device", "No such device.")
    logger.info("cloudprnt_printer_forgotten device=%s", device_id)
