"""Job events: how a job's status moves after the claim (docs/JOBS.md: states, delivery rule 2).

Invariant: an event is recorded once per ``event_id``, on any node. A replay (same id, same
content) answers as the first delivery did, without changing anything; a different event under the
same id is refused with ``event_conflict``. A job moves forward only (``qprint.core.states``)
and never leaves a final state.

How it holds: the job row is locked (``SELECT ... FOR NO KEY UPDATE``) while the event is judged,
so the deliveries of one job's events are serialised across nodes, and the ``event_id`` column is
unique, so a duplicate that slips past the lookup (same id reported for another job, or a lookup
that predates the lock) does not insert: answered as a replay or a conflict. The ``fingerprint``
is the SHA-256 of the event's canonical content (job, type, claim, time, message, detail).

Round trips (PostgreSQL): a new event that the judge accepts is **one statement**, outside any
transaction of its own (:func:`_at_once`): the lock's own SELECT, as a CTE, locks the job row and
reads what the judge needs; the event is inserted only when that row says the judge would accept
it (the statuses it may come from are the judge's own predicate, :func:`_applies`, evaluated in
Python and passed as a list) and the job moves as that row says. The row stays locked until the
statement ends, so the decision and the writes see one version of it. When the statement writes
nothing (a replay, a refusal, a tenant with webhooks, whose deliveries are written in Python in the
move's transaction) the event takes the way of a transaction: two statements between BEGIN and
COMMIT. The first locks the job row and looks the ``event_id`` up (a subquery of the same SELECT);
the second inserts the event (``ON CONFLICT (event_id) DO NOTHING``) and moves the job with an
UPDATE guarded by the status it was judged in and by the INSERT having happened, in one statement
of data-modifying CTEs. A replay is the lock and one read of the recorded event. On SQLite the
INSERT runs in a savepoint and the UPDATE after it. An event of the device HTTP API locks its job
joined to the device holding the token the request presents
(:class:`qprint.domain.credentials.PresentedToken`) and checks the device's standing from that
row: its token needs no lookup of its own.

A device socket's events sent together (:func:`record_events_together`) share one transaction, and
a run of them about one job (each moving it forward from the one before, under one claim: a job's
SPOOLED and how it ended) is one statement of the same form: the job locked once, the events
inserted in the order they came only when the row says the judge would accept the first and none
of the later ids is recorded yet, the job moved once, to the last event's status. Each event is
answered with the job as it stood after it. A run that writes nothing is recorded event by event.

Server events (QUEUED, CLAIMED, CANCELLED, EXPIRED, REPRINTED) are written to the same table with
``source = SERVER`` through :func:`record_server_event`, or, where the claim and the submission
make their change in one statement, through the ``INSERT`` this module writes for them
(:func:`server_event_insert`).

This module is the one writer of ``qprint_job_event`` (``tests/qprint/test_owners.py`` fails when
another module writes it).
"""

import copy
import functools
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, IntegrityError, connection, transaction
from django.db.models import (
    BooleanField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
    UUIDField,
)
from django.db.models.functions import Now
from django.utils import timezone

from qprint.core import prepared, wire
from qprint.core.device_events import (
    DeviceEvent,
    canonical_json,
    fingerprint_of,
    parse_device_event,
)
from qprint.core.errors import EventRejected, Invalid, NotFound, QPrintError
from qprint.core.prepared import Param, PreparedQuery
from qprint.core.states import JobStatus, can_move, is_final
from qprint.domain import credentials
from qprint.domain.wakeups import JOB_RELEASED, JOB_RELEASED_NOTHING_QUEUED, wake_after_commit
from qprint.models import Device, EventSource, PrintJob, PrintJobEvent, raw
from qprint.signals import send_job_finished_after_commit
from qprint.webhooks import outbox

logger = logging.getLogger("qprint.events")

PROGRESS = "PROGRESS"


@dataclass(frozen=True)
class EventOutcome:
    """``created`` is False for a replay (HTTP 200), True for a new event (HTTP 201).
    ``queued``: asked for by a pushing socket (``pushes_next``) and read in the event's own
    statement, whether the device has another claimable job; None when not read (a replay, a
    refusal, SQLite): the socket then claims to find out."""

    created: bool
    job: PrintJob
    event: PrintJobEvent
    queued: bool | None = None


def record_device_event(
    device: Device | int | credentials.PresentedToken,
    job_id: uuid.UUID | str,
    payload: Any,
    *,
    token_hash: str | None = None,
    pushes_next: bool = False,
) -> EventOutcome:
    """Record an event the device reports about one of its jobs, moving the job if it says so.

    Raises :class:`~qprint.core.errors.Invalid` (422) for a malformed body,
    :class:`~qprint.core.errors.NotFound` (404) when the job is not this device's, and
    :class:`~qprint.core.errors.EventRejected` (409) with ``event_conflict``, ``stale_claim``,
    ``job_cancelled`` or ``backwards``. ``device``: the device, its id, or the token an HTTP
    request presents (:class:`~qprint.domain.credentials.PresentedToken`): the job is then locked
    joined to the device holding that token's hash (an agent's only), whose standing is checked
    from the locked row; when the lock matches no row (or the body is malformed) the token is
    authenticated the one way in first (401, 429, 403 as any device request, counted by the
    throttle), outside the event's transaction, and a right token is then served by its device's
    id. ``token_hash``: the event of a device socket (``device`` may then be its id), whose
    device must still hold that token (401) and be enabled (403), judged in the job lock's own
    statement. In every case the device's standing is answered before the body or the job.
    ``pushes_next``: the caller is the device's socket in push mode, which claims the next job
    itself once this event is answered; a job leaving CLAIMED then publishes no wakeup of the
    device (it would only make that socket read its row), and the outcome says whether the
    device has a job to claim (:attr:`EventOutcome.queued`), read by the event's statement after
    the lock: a job submitted after that statement began publishes its wakeup after it commits,
    and the socket handles that wakeup after this event.
    """
    if isinstance(device, credentials.PresentedToken):
        return _presented_event(device, job_id, payload, pushes_next)
    device_id = device.pk if isinstance(device, Device) else int(device)
    job_uuid, event = _parsed(job_id, payload, device_id=device_id, token_hash=token_hash)
    outcomes = _device_event_at_once(device_id, job_uuid, [(event, pushes_next)], token_hash)
    if outcomes is not None:
        return outcomes[0]
    with transaction.atomic():
        return _device_event(device_id, job_uuid, event, token_hash, pushes_next)


@dataclass(frozen=True)
class EventReport:
    """One event of several sent together (a socket's ``event`` frame, an item of an HTTP
    request's list): the job, the HTTP event body, and whether the socket pushes the next job
    after it (``pushes_next`` of :func:`record_device_event`)."""

    job_id: Any
    payload: Any
    pushes_next: bool = False


def record_presented_events(
    presented: credentials.PresentedToken, job_id: Any, payloads: list[Any]
) -> list[EventOutcome | QPrintError | DatabaseError]:
    """Several events of one job in one HTTP request (docs/API.md, "Several events of a job at
    once"), each answered as :func:`record_device_event` answers it alone, in order. The request
    is refused whole, with nothing recorded, for an empty or too long list, a malformed event
    (422, naming it) and a job that is not the device's (404), each after the device's standing
    (401, 429, 403). When the events make one run (:func:`_run_of`: a job's SPOOLED and how it
    ended) that the judge accepts, one statement records them, the token matched in the job's
    lock as for one event. Otherwise the token is authenticated first and they are recorded as a
    socket's events are (:func:`record_events_together`)."""
    try:
        if not 1 <= len(payloads) <= wire.MAX_EVENTS_TOGETHER:
            raise Invalid(
                message=f"From 1 to {wire.MAX_EVENTS_TOGETHER} events may be sent at once."
            )
        parsed = [_parsed_item(job_id, payload, n) for n, payload in enumerate(payloads)]
    except (Invalid, NotFound):
        credentials.answer_standing(presented)
        raise
    reports = [EventReport(job_id, payload) for payload in payloads]
    if connection.vendor == "postgresql" and _run_of(reports, parsed, 0) == len(reports):
        job_uuid, run = _run_at(reports, parsed, 0, len(reports))
        try:
            outcomes = _presented_event_at_once(presented, job_uuid, run)
        except DatabaseError:  # nothing written (a later id taken meanwhile, say): as below
            outcomes = None
        if outcomes is not None:
            return outcomes
    device_id = presented.authenticate().pk
    outcomes = record_events_together(device_id, reports, token_hash=None)
    if isinstance(outcomes[0], NotFound):  # not the device's job: so for every event
        raise outcomes[0]
    return outcomes


def _parsed_item(job_id: Any, payload: Any, n: int) -> tuple[uuid.UUID, DeviceEvent]:
    """:func:`_parsed` of the event at index ``n`` of a list, its refusal naming it."""
    try:
        return _parsed(job_id, payload)
    except Invalid as exc:
        raise type(exc)(code=exc.code, message=f"Event {n}: {exc.message}") from None


def record_events_together(
    device_id: int, reports: list[EventReport], *, token_hash: str | None
) -> list[EventOutcome | QPrintError | DatabaseError]:
    """Consecutive events of one device, sent together: a socket's, sent without waiting for
    the answers (docs/PROTOCOL.md, "Operations over the socket"), or an HTTP request's list
    (:func:`record_presented_events`, its device authenticated: no ``token_hash``). Recorded in
    one transaction: one commit
    instead of one per event, and one statement for each run of events of one job that follow
    each other (:func:`_run_of`: a job's SPOOLED and how it ended, say), or for each event alone,
    when it can be (:func:`_at_once`). When the whole batch is one such run, its statement
    commits by itself, with no transaction around it. Each event is answered as
    :func:`record_device_event` answers it alone (its outcome, or the refusal it raises, in
    order). A refusal writes nothing and does not stop the others. A database error rolls the
    whole transaction back; every event is then recorded on its own transaction, as if they had
    come one at a time, so none is lost or recorded twice (an error then is that event's
    outcome: the socket answers it 503, the device sends it again). On SQLite (no batches: its
    event path uses savepoints) each runs alone."""
    if connection.vendor != "postgresql" or len(reports) == 1:
        return [_alone(device_id, report, token_hash) for report in reports]
    parsed = [_parsed_report(device_id, report, token_hash) for report in reports]
    one_run = _run_of(reports, parsed, 0) == len(reports)
    if one_run:
        job_uuid, run = _run_at(reports, parsed, 0, len(reports))
        try:
            outcomes = _device_event_at_once(device_id, job_uuid, run, token_hash)
        except DatabaseError:  # nothing written (a later id taken meanwhile, say): as below
            outcomes = None
        if outcomes is not None:
            return outcomes
    try:
        with transaction.atomic():
            # A run that wrote nothing by itself writes nothing here either: event by event.
            return _recorded_in_order(device_id, reports, parsed, token_hash, runs=not one_run)
    except DatabaseError:
        logger.debug("socket_events_one_by_one device=%s events=%s", device_id, len(reports))
    return [_alone(device_id, report, token_hash) for report in reports]


def _parsed_report(
    device_id: int, report: EventReport, token_hash: str | None
) -> tuple[uuid.UUID, DeviceEvent] | QPrintError:
    """The job's id and the event of ``report``, or the refusal its parsing raised."""
    try:
        return _parsed(report.job_id, report.payload, device_id=device_id, token_hash=token_hash)
    except QPrintError as exc:
        return exc


def _run_of(
    reports: list[EventReport], parsed: list[tuple[uuid.UUID, DeviceEvent] | QPrintError], at: int
) -> int:
    """How many events from ``at`` on make one run, recorded in one statement: events of one
    job under one claim with ids of their own, each moving the job forward from the one before
    (never PROGRESS, never the same step twice), only the last one asking whether to push next.
    0 when the event at ``at`` did not parse; 1 when it runs alone."""
    first = parsed[at]
    if isinstance(first, QPrintError):
        return 0
    job_uuid, event = first
    ids = {event.event_id}
    end = at + 1
    while end < len(parsed) and not reports[end - 1].pushes_next:
        following = parsed[end]
        if isinstance(following, QPrintError):
            break
        same_job, after = following
        if (
            same_job != job_uuid
            or after.claim_id != event.claim_id
            or after.event_id in ids
            or PROGRESS in (event.type, after.type)
            or not can_move(event.type, after.type)
        ):
            break
        ids.add(after.event_id)
        event = after
        end += 1
    return end - at


def _run_at(
    reports: list[EventReport], parsed: list[Any], at: int, length: int
) -> tuple[uuid.UUID, list[tuple[DeviceEvent, bool]]]:
    """The job and the events (each with its ``pushes_next``) of the run of ``length`` at ``at``."""
    return parsed[at][0], [(parsed[n][1], reports[n].pushes_next) for n in range(at, at + length)]


def _recorded_in_order(
    device_id: int,
    reports: list[EventReport],
    parsed: list[tuple[uuid.UUID, DeviceEvent] | QPrintError],
    token_hash: str | None,
    *,
    runs: bool = True,
) -> list[EventOutcome | QPrintError]:
    """The outcomes of ``reports`` in order, inside the caller's transaction: each run
    (:func:`_run_of`) in one statement when it can be (``runs``), else each of its events in
    turn."""
    outcomes: list[EventOutcome | QPrintError] = []
    at = 0
    while at < len(reports):
        length = _run_of(reports, parsed, at)
        if length == 0:
            outcomes.append(parsed[at])  # refused before anything was written
            at += 1
            continue
        job_uuid, run = _run_at(reports, parsed, at, length)
        done = None
        if runs and length > 1:
            done = _device_event_at_once(device_id, job_uuid, run, token_hash)
        if done is None:
            done = []
            for event, pushes_next in run:
                try:
                    alone = _device_event_at_once(
                        device_id, job_uuid, [(event, pushes_next)], token_hash
                    )
                    done.append(
                        alone[0]
                        if alone is not None
                        else _device_event(device_id, job_uuid, event, token_hash, pushes_next)
                    )
                except QPrintError as exc:
                    done.append(exc)
        outcomes.extend(done)
        at += length
    return outcomes


def _alone(
    device_id: int, report: EventReport, token_hash: str | None
) -> EventOutcome | QPrintError | DatabaseError:
    """One event in its own transaction; the refusal or the database's error as its outcome."""
    try:
        return record_device_event(
            device_id,
            report.job_id,
            report.payload,
            token_hash=token_hash,
            pushes_next=report.pushes_next,
        )
    except (QPrintError, DatabaseError) as exc:
        return exc


def _parsed(
    job_id: Any, payload: Any, *, device_id: int | None = None, token_hash: str | None = None
) -> tuple[uuid.UUID, DeviceEvent]:
    """The job's id and the event of ``payload`` (422, 404). A socket's device (``token_hash``)
    has its standing answered first, as over HTTP."""
    try:
        event = parse_device_event(payload)
        try:
            job_uuid = uuid.UUID(str(job_id))
        except ValueError:
            raise NotFound(message="No such job.") from None
    except (Invalid, NotFound):
        credentials.answer_standing(device_id, token_hash)
        raise
    return job_uuid, event


def _presented_event(
    presented: credentials.PresentedToken, job_id: Any, payload: Any, pushes_next: bool
) -> EventOutcome:
    """The event of an HTTP request: its token matched in the job's lock."""
    try:
        job_uuid, event = _parsed(job_id, payload)
    except (Invalid, NotFound):
        # The device's standing is answered first, as the HTTP API always did.
        credentials.answer_standing(presented)
        raise
    outcomes = _presented_event_at_once(presented, job_uuid, [(event, pushes_next)])
    if outcomes is not None:
        return outcomes[0]
    with transaction.atomic():
        job = _LOCK_JOB_BY_TOKEN.first(**_by_token(presented, job_uuid, event.event_id))
        if job is not None:
            presented.require(job.device_token_hash, job.device_enabled)
            return _record_locked(job, job.device_id, event, pushes_next)
    # No job of a device holding this token: the full way decides the device's standing (and
    # counts a wrong token); a right one looks its job up by the device's id.
    device_id = presented.authenticate().pk
    with transaction.atomic():
        return _device_event(device_id, job_uuid, event, None, pushes_next)


def _by_token(
    presented: credentials.PresentedToken, job_uuid: uuid.UUID, event_id: uuid.UUID
) -> dict[str, Any]:
    """The values of the job lock matched to the token an HTTP request presents."""
    return {
        "job": job_uuid,
        "digest": presented.token_hash,
        "kind": presented.kind,
        "event_id": event_id,
    }


def _presented_event_at_once(
    presented: credentials.PresentedToken,
    job_uuid: uuid.UUID,
    run: list[tuple[DeviceEvent, bool]],
) -> list[EventOutcome] | None:
    """:func:`_device_event_at_once` for an HTTP request: the job locked joined to the device
    holding the token it presents, whose hash is also the hint of :data:`_ANNOUNCING`."""
    lock = _by_token(presented, job_uuid, run[0][0].event_id)
    token = presented.token_hash
    return _at_once(_GATE_BY_TOKEN, lock, token, token, job_uuid, run)


def _device_event_at_once(
    device_id: int,
    job_uuid: uuid.UUID,
    run: list[tuple[DeviceEvent, bool]],
    token_hash: str | None,
) -> list[EventOutcome] | None:
    """The events of device ``device_id`` in ``run`` (one, or several of one job following each
    other, each with its ``pushes_next``) in one statement (:func:`_at_once`), or None: then
    :func:`_device_event`, in a transaction, answers each."""
    lock = {"job": job_uuid, "device": device_id, "event_id": run[0][0].event_id}
    return _at_once(_GATE, lock, device_id, token_hash, job_uuid, run)


def _device_event(
    device_id: int,
    job_uuid: uuid.UUID,
    event: DeviceEvent,
    token_hash: str | None,
    pushes_next: bool,
) -> EventOutcome:
    """The event of device ``device_id``, inside the caller's transaction: the job locked, the
    socket's standing (``token_hash``) judged from the locked row, then the event recorded."""
    job = _LOCK_JOB.first(job=job_uuid, device=device_id, event_id=event.event_id)
    if token_hash is not None:  # the device's standing is answered first, as over HTTP
        if job is None:
            credentials.still_held(device_id, token_hash)
        else:
            credentials.require_token(job.device_token_hash, job.device_enabled, token_hash)
    if job is None:
        raise NotFound(message="No such job on this device.")
    return _record_locked(job, device_id, event, pushes_next)


def _record_locked(
    job: PrintJob, device_id: int, event: DeviceEvent, pushes_next: bool
) -> EventOutcome:
    """The event judged and recorded for ``job``, locked by the caller's transaction (the
    device's standing already answered)."""
    fingerprint = event.fingerprint(job.pk)

    if job.recorded_pk is not None:
        if job.recorded_fingerprint != fingerprint:
            raise _conflict(event.event_id)
        return EventOutcome(
            created=False, job=job, event=PrintJobEvent.objects.get(pk=job.recorded_pk)
        )

    try:
        _judge(job, event)
    except EventRejected:
        # The lookup above may predate the lock (a delivery of this very event, holding the
        # lock, committed meanwhile): a replay is answered as one, never refused.
        replay = _replay_of(event.event_id, fingerprint)
        if replay is None:
            raise
        return EventOutcome(created=False, job=job, event=replay)
    target = event.type if event.type != PROGRESS and event.type != job.status else None
    if connection.vendor == "postgresql":
        recorded, queued = _record_in_one_statement(
            job, device_id, event, fingerprint, target, not pushes_next
        )
    else:
        recorded, queued = _record_step_by_step(
            job, device_id, event, fingerprint, target, not pushes_next
        )
    if recorded is None:
        # The same event_id was recorded concurrently (for another job, since this job's row
        # is locked, or before the lock was granted): answer as that delivery did.
        replay = _replay_of(event.event_id, fingerprint)
        if replay is None:
            raise RuntimeError(f"event {event.event_id} conflicted but cannot be read")
        return EventOutcome(created=False, job=job, event=replay)
    return EventOutcome(created=True, job=job, event=recorded, queued=queued)


def _recorded(event_id):
    return PrintJobEvent.objects.filter(event_id=event_id)


def _build_job_lock(*, by_token: bool = False, locked: bool = True):
    """The job row locked for the event, the event id's earlier record (the replay) and whether
    the tenant has webhooks, in one SELECT: the job of the device by id, or (``by_token``) of the
    device of the transport's kind holding the token hashed ``digest`` (an HTTP request's).
    ``locked=False``: without its ``FOR NO KEY UPDATE``, which the one-statement event adds
    (Django compiles a lock only inside a transaction)."""
    event_id = Param("event_id", UUIDField())
    device = credentials.jobs_device(by_token=by_token)
    jobs = (
        PrintJob.objects.select_for_update(of=("self",), no_key=True)
        if locked
        else PrintJob.objects
    )
    return jobs.filter(pk=Param("job", UUIDField()), **device).annotate(
        recorded_pk=Subquery(_recorded(event_id).values("pk")[:1]),
        recorded_fingerprint=Subquery(_recorded(event_id).values("fingerprint")[:1]),
        announced=outbox.tenant_subscribed(OuterRef("tenant")),
        device_token_hash=F("device__token_hash"),
        device_enabled=F("device__enabled"),
        waited=ExpressionWrapper(Q(waited_until__gt=Now()), output_field=BooleanField()),
        device_name=F("device__name"),
    )[:1]


_LOCK_JOB = PreparedQuery(_build_job_lock)
_LOCK_JOB_BY_TOKEN = PreparedQuery(functools.partial(_build_job_lock, by_token=True))
#: The same SELECTs for the first CTE of the one-statement event (:func:`_at_once`).
_GATE = PreparedQuery(functools.partial(_build_job_lock, locked=False))
_GATE_BY_TOKEN = PreparedQuery(functools.partial(_build_job_lock, by_token=True, locked=False))


def _conflict(event_id: uuid.UUID) -> EventRejected:
    return EventRejected(
        "event_conflict", f"Event {event_id} was already recorded with different content."
    )


def _event_row(
    job: PrintJob, device_id: int, event: DeviceEvent, fingerprint: str
) -> PrintJobEvent:
    """The device event's row, not yet saved (both paths below record the same columns)."""
    return PrintJobEvent(
        event_id=event.event_id,
        job=job,
        device_id=device_id,
        source=EventSource.DEVICE,
        type=event.type,
        message=event.message,
        detail=event.detail,
        occurred_at=event.occurred_at,
        fingerprint=fingerprint,
    )


def _record_step_by_step(
    job: PrintJob,
    device_id: int,
    event: DeviceEvent,
    fingerprint: str,
    target: str | None,
    wake: bool = True,
) -> tuple[PrintJobEvent | None, bool | None]:
    """INSERT in a savepoint, then the guarded UPDATE (SQLite); None: the event_id is taken.
    Whether another job is queued is not read here (None)."""
    recorded = _event_row(job, device_id, event, fingerprint)
    try:
        with transaction.atomic():
            recorded.save(force_insert=True)
    except IntegrityError:
        return None, None
    if target is not None:
        _move(job, target, reason=event.message, wake=wake)
    return recorded, None


#: The INSERT of a device event and the job's guarded move, in one statement (PostgreSQL). The
#: UPDATE runs only when the INSERT did (``EXISTS (recorded)``) and only from the status judged.
#: ``queued``: when a pushing socket asks, whether the device has a claimable job (the shared
#: predicate, ``raw.claimable_job``), read on this statement's snapshot.
_RECORD_SQL = """
WITH recorded AS (
    INSERT INTO qprint_job_event
        (event_id, job_id, device_id, source, type, message, detail, occurred_at, fingerprint)
    VALUES (%(event_id)s, %(job)s, %(device)s, %(source)s, %(type)s, %(message)s,
            %(detail)s::jsonb, %(occurred_at)s, %(fingerprint)s)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING id, recorded_at
), moved AS (
    UPDATE qprint_job
    SET status = %(target)s, status_reason = %(reason)s,
        received_at = CASE WHEN %(received)s THEN now() ELSE received_at END,
        finished_at = CASE WHEN %(final)s THEN now() ELSE finished_at END
    WHERE id = %(job)s AND status = %(current)s AND %(target)s::text IS NOT NULL
      AND EXISTS (SELECT 1 FROM recorded)
    RETURNING status, status_reason, received_at, finished_at
)
SELECT recorded.id, recorded.recorded_at, moved.status, moved.status_reason, moved.received_at,
       moved.finished_at,
       %(ask_queued)s AND EXISTS (SELECT 1 FROM qprint_job q WHERE q.device_id = %(device)s
                                  AND {claimable}) AS queued
FROM recorded LEFT JOIN moved ON true
""".replace("{claimable}", raw.claimable_job("q"))


def _reason(message: str) -> str:
    """A job's ``status_reason`` for a move an event with ``message`` made: its first 1,000
    characters, as every move records it."""
    return message[:1000]


def _event_columns(event: DeviceEvent, fingerprint: str) -> dict[str, Any]:
    """The parameters of a device event's row and of its move's reason, as both one-statement
    forms bind them."""
    return {
        "event_id": event.event_id,
        "source": EventSource.DEVICE.value,
        "type": event.type,
        "message": event.message,
        "detail": json.dumps(event.detail),
        "occurred_at": event.occurred_at,
        "fingerprint": fingerprint,
        "reason": _reason(event.message),
    }


def _record_in_one_statement(
    job: PrintJob,
    device_id: int,
    event: DeviceEvent,
    fingerprint: str,
    target: str | None,
    wake: bool = True,
) -> tuple[PrintJobEvent | None, bool | None]:
    """The event and the move in one statement (PostgreSQL); None: the event_id is taken. The
    second value: whether the device has a claimable job, read when ``wake`` is False (the
    pushing socket claims next), else None. It is read as well when the event moves the job out
    of CLAIMED, for the wakeup that follows (:func:`_moved`)."""
    current = job.status
    releases = current == JobStatus.CLAIMED and target is not None
    params = {
        **_event_columns(event, fingerprint),
        "job": job.pk,
        "device": device_id,
        "target": target,
        "received": target == JobStatus.RECEIVED,
        "final": target is not None and is_final(target),
        "current": current,
        "ask_queued": not wake or releases,
    }
    rows = prepared.fetch(_RECORD_SQL, params)
    if not rows:
        return None, None
    [row] = rows
    event_pk, recorded_at, *move, queued = row
    if target is not None:
        if move[0] is None:  # cannot happen while the row is locked; refuse rather than guess
            raise EventRejected("backwards", f"The job is no longer {current}.")
        _set_moved(job, move, current, target, wake, bool(queued) if releases else None)
    return _saved_row(job, device_id, event, fingerprint, event_pk, recorded_at), (
        bool(queued) if not wake else None
    )


def _set_moved(
    job: PrintJob, move: list[Any], current: str, target: str, wake: bool, queued: bool | None
) -> None:
    """``job`` as the statement's UPDATE left it (``move``: status, reason, received and
    finished times), then what follows its move (:func:`_moved`)."""
    job.status, job.status_reason, job.received_at, job.finished_at = move
    _moved(job, current, target, wake=wake, queued=queued)


def _saved_row(
    job: PrintJob, device_id: int, event: DeviceEvent, fingerprint: str, pk: int, recorded_at
) -> PrintJobEvent:
    """The event's row as the statement's INSERT saved it."""
    recorded = _event_row(job, device_id, event, fingerprint)
    recorded.pk, recorded.recorded_at = pk, recorded_at
    recorded._state.adding, recorded._state.db = False, DEFAULT_DB_ALIAS
    return recorded


#: After the lock's SELECT (the CTE ``gate``, first in the statement): the events inserted only
#: when the locked row says the judge would accept the first (the device's standing when a token
#: is given; its claim; a status of ``_sources``; no replay; no webhook endpoint of the tenant,
#: whose deliveries are written in the move's transaction), and the job moved as that row says,
#: to the last event's status. The UPDATE's conditions are the gate's values only: the row stays
#: locked by the gate until the statement ends, so it moves whenever the events were recorded and
#: the gate's status was not the last event's. ``queued``, whether another job of the device
#: waits to be claimed, is read for a pushing socket (``ask_queued``) and when the job leaves
#: CLAIMED (for the wakeup that follows). A run of several events of one job (``{rows}``, in
#: the order they came; each moves forward from the one before, which :func:`_run_of` checked)
#: also needs none of the later ids recorded (``{later}``, an array literal bound as text, as
#: ``_sources``); one of them recorded meanwhile by another job fails the whole statement on the
#: unique ``event_id``, which writes nothing. ``received_at`` is set once, by the move into
#: RECEIVED (a RECEIVED reported again under a new id moves nothing).
_AT_ONCE_TAIL = """{later_cte}, recorded AS (
    INSERT INTO qprint_job_event
        (event_id, job_id, device_id, source, type, message, detail, occurred_at, fingerprint)
    SELECT e.event_id, gate.id, gate.device_id, %(source)s, e.type, e.message, e.detail,
           e.occurred_at, e.fingerprint
    FROM gate, (VALUES {rows}) AS e(event_id, type, message, detail, occurred_at, fingerprint, n)
    WHERE gate.recorded_pk IS NULL AND NOT gate.announced{later}
      AND (%(token_hash)s::text IS NULL
           OR (gate.device_enabled AND gate.device_token_hash = %(token_hash)s::text))
      AND gate.claim_id = %(claim)s AND gate.status = ANY(%(sources)s::text[])
    ORDER BY e.n
    {on_conflict}RETURNING id, recorded_at, event_id
), moved AS (
    UPDATE qprint_job
    SET status = %(target)s, status_reason = %(reason)s,
        received_at = CASE WHEN %(received)s AND gate.received_at IS NULL THEN now()
                           ELSE qprint_job.received_at END,
        finished_at = CASE WHEN %(final)s THEN now() ELSE qprint_job.finished_at END
    FROM gate
    WHERE qprint_job.id = gate.id AND %(moves)s AND gate.status <> %(target)s
      AND EXISTS (SELECT 1 FROM recorded)
    RETURNING qprint_job.status, qprint_job.status_reason, qprint_job.received_at,
              qprint_job.finished_at
)
SELECT gate.*, recorded.event_id, recorded.id, recorded.recorded_at, moved.status,
       moved.status_reason, moved.received_at, moved.finished_at,
       (%(ask_queued)s OR ({held} AND moved.status IS NOT NULL))
       AND EXISTS (SELECT 1 FROM qprint_job q WHERE q.device_id = gate.device_id
                   AND {claimable}) AS queued
FROM gate LEFT JOIN recorded ON true LEFT JOIN moved ON true
""".replace("{claimable}", raw.claimable_job("q")).replace("{held}", raw.held_job("gate"))
#: One row of ``VALUES`` per event of the statement (``{n}``: its place in the run).
_AT_ONCE_ROW = (
    "(%(event_id{n})s::uuid, %(type{n})s::text, %(message{n})s::text, %(detail{n})s::jsonb,"
    " %(occurred_at{n})s::timestamptz, %(fingerprint{n})s::text, {n})"
)
#: What the tail adds to the lock's columns: the event's id, its row's id and time, the move,
#: ``queued``.
_AT_ONCE_COLUMNS = 8


@functools.cache
def _at_once_tail(count: int) -> tuple[str, list[str]]:
    """The tail for ``count`` events with ``%s`` placeholders (the lock's are positional) and
    its values' names, in order. One event keeps ``ON CONFLICT DO NOTHING`` (its id taken by
    another job meanwhile: nothing written, the transaction's way answers)."""
    tail = (
        _AT_ONCE_TAIL.replace(
            "{rows}", ", ".join(_AT_ONCE_ROW.replace("{n}", str(n)) for n in range(count))
        )
        .replace(
            "{later_cte}",
            ", later AS (SELECT 1 FROM qprint_job_event WHERE event_id = ANY(%(later)s::uuid[]))"
            if count > 1
            else "",
        )
        .replace("{later}", " AND NOT EXISTS (SELECT 1 FROM later)" if count > 1 else "")
        .replace("{on_conflict}", "ON CONFLICT (event_id) DO NOTHING\n    " if count == 1 else "")
    )
    return prepared.positional(tail)


@functools.cache
def _at_once_sql(lock_sql: str, count: int) -> tuple[str, list[str]]:
    """The whole statement around the lock's compiled SELECT (one per lock query, alias and
    number of events), and the names of the tail's values."""
    tail, names = _at_once_tail(count)
    return f"WITH gate AS ({lock_sql} FOR NO KEY UPDATE OF qprint_job){tail}", names


#: Devices (by id, or by the token an HTTP request presents) whose tenant had a webhook endpoint
#: when an event or a claim of theirs was last tried in one statement, and until when (monotonic
#: seconds) their events and claims go straight to the transaction's way, which writes the
#: deliveries with the move. Only which way is tried first depends on it: both do the same.
_ANNOUNCING: dict[Any, float] = {}
_ANNOUNCING_SECONDS = 60.0


def remember_announcing(key: Any) -> None:
    """The device ``key`` names has a tenant with webhook endpoints: see :data:`_ANNOUNCING`."""
    _ANNOUNCING[key] = time.monotonic() + _ANNOUNCING_SECONDS


def announcing(key: Any) -> bool:
    """Whether the device ``key`` names goes the transaction's way (:data:`_ANNOUNCING`)."""
    until = _ANNOUNCING.get(key)
    if until is None:
        return False
    if until < time.monotonic():
        _ANNOUNCING.pop(key, None)
        return False
    return True


def _at_once(
    lock: PreparedQuery,
    lock_values: dict[str, Any],
    hint: Any,
    token_hash: str | None,
    job_uuid: uuid.UUID,
    run: list[tuple[DeviceEvent, bool]],
) -> list[EventOutcome] | None:
    """The events of ``run`` (each with its ``pushes_next``: one event, or several of one job
    that :func:`_run_of` found to follow each other) recorded and the job moved in one statement
    (PostgreSQL), committed with it unless the caller's transaction holds it; their outcomes in
    order, or None when the statement wrote nothing (no such job of the device, a replay, a
    refusal, a tenant with webhooks): the caller then takes the way of a transaction, which
    answers each of those. ``lock``: the event's lock query without its lock (``_GATE``, by the
    device's id, or ``_GATE_BY_TOKEN``, by the presented token), and its ``lock_values`` (the
    first event's id); ``hint``: the key of :data:`_ANNOUNCING`. Not tried (None) on SQLite,
    nor for a device the hint sends the transaction's way."""
    if connection.vendor != "postgresql" or announcing(hint):
        return None
    lock_sql, params = lock.statement(**lock_values)
    sql, names = _at_once_sql(lock_sql, len(run))
    first, last = run[0][0], run[-1][0]
    fingerprints = [event.fingerprint(job_uuid) for event, _ in run]
    values: dict[str, Any] = {
        "source": EventSource.DEVICE.value,
        "token_hash": token_hash,
        "claim": first.claim_id,
        "sources": _sources(first.type),
        "later": "{" + ",".join(str(event.event_id) for event, _ in run[1:]) + "}",
        "target": last.type,
        "reason": _reason(last.message),
        "received": any(event.type == JobStatus.RECEIVED for event, _ in run),
        "final": is_final(last.type),
        "moves": last.type != PROGRESS,
        "ask_queued": any(pushes_next for _, pushes_next in run),
    }
    for n, ((event, _), fingerprint) in enumerate(zip(run, fingerprints, strict=True)):
        values.update(
            {f"{name}{n}": value for name, value in _event_columns(event, fingerprint).items()}
        )
    params.extend(values[name] for name in names)
    rows = prepared.fetch(sql, params)
    if not rows:
        return None
    [job] = lock.instances([rows[0]])
    saved = {}
    for row in rows:
        event_id, event_pk, recorded_at, *move, queued = row[-_AT_ONCE_COLUMNS:]
        if event_pk is not None:
            saved[event_id] = (event_pk, recorded_at)
    if not saved:
        if job.announced:
            remember_announcing(hint)
        return None
    if len(saved) != len(run):  # one INSERT writes all the rows or none
        raise RuntimeError(f"job {job.pk}: {len(saved)} of {len(run)} events recorded")
    if last.type != PROGRESS and last.type != job.status and move[0] is None:
        # cannot happen: the gate holds the row it decided on
        raise RuntimeError(f"events of job {job.pk} were recorded but the job not moved")
    return _outcomes_of_run(job, run, fingerprints, saved, move, queued)


def _outcomes_of_run(
    job: PrintJob,
    run: list[tuple[DeviceEvent, bool]],
    fingerprints: list[str],
    saved: dict[uuid.UUID, tuple[int, Any]],
    move: list[Any],
    queued: bool,
) -> list[EventOutcome]:
    """Each event's outcome, the job as it stood after that event (what its answer says), and
    what follows each move (:func:`_moved`): the run's statement moved the job once, to the last
    event's status, as the events one by one would have moved it step by step. ``job`` (the
    lock's row, held by nothing else) becomes the first event's; each later one gets a copy."""
    outcomes = []
    for n, ((event, pushes_next), fingerprint) in enumerate(zip(run, fingerprints, strict=True)):
        current = job.status
        if n:  # the job after this step; each answer keeps its own (the first, the lock's row)
            job = copy.copy(job)
        if event.type != PROGRESS and event.type != current:
            if n == len(run) - 1:
                job.status, job.status_reason, job.received_at, job.finished_at = move
            else:
                job.status, job.status_reason = event.type, _reason(event.message)
                if event.type == JobStatus.RECEIVED:
                    job.received_at = move[2]
            released = current == JobStatus.CLAIMED  # the statement read ``queued`` then
            _moved(
                job,
                current,
                event.type,
                wake=not pushes_next,
                queued=bool(queued) if released else None,
            )
        event_pk, recorded_at = saved[event.event_id]
        recorded = _saved_row(job, job.device_id, event, fingerprint, event_pk, recorded_at)
        outcomes.append(
            EventOutcome(
                created=True, job=job, event=recorded, queued=bool(queued) if pushes_next else None
            )
        )
    return outcomes


def _replay_of(event_id: uuid.UUID, fingerprint: str) -> PrintJobEvent | None:
    existing = PrintJobEvent.objects.filter(event_id=event_id).first()
    if existing is None:
        return None
    if existing.fingerprint != fingerprint:
        raise _conflict(event_id)
    return existing


def _judge(job: PrintJob, event: DeviceEvent) -> None:
    """Refuse the event when it may not apply to ``job`` as it is now."""
    if job.claim_id != event.claim_id:
        raise EventRejected(
            "stale_claim", f"Claim {event.claim_id} is not the job's current claim."
        )
    if job.status == JobStatus.CANCELLED and _cancelled_by_application(job):
        raise EventRejected("job_cancelled", "The job was cancelled by the application.")
    if not _applies(job.status, event.type):
        raise EventRejected(
            "backwards", f"The job is {job.status}; it cannot move to {event.type}."
        )


def _applies(status: str, event_type: str) -> bool:
    """Whether an event of ``event_type`` may be recorded for a job in ``status`` (its claim
    being the job's, and the job not cancelled by the application): a PROGRESS always, the same
    step reported again under a new id while not final (recorded, nothing moves), else a move
    forward."""
    if event_type == PROGRESS:
        return True
    if event_type == status and not is_final(status):
        return True
    return can_move(status, event_type)


@functools.cache
def _sources(event_type: str) -> str:
    """The statuses an event of ``event_type`` may be recorded from in one statement
    (:func:`_at_once`): those :func:`_applies` accepts, CANCELLED aside (the judge must ask who
    cancelled the job). An array literal (``{QUEUED,CLAIMED}``), bound as text: psycopg makes
    a dumper of its own for a list parameter at every call."""
    statuses = [
        status
        for status in JobStatus.values
        if status != JobStatus.CANCELLED and _applies(status, event_type)
    ]
    return "{" + ",".join(statuses) + "}"


def _cancelled_by_application(job: PrintJob) -> bool:
    return job.events.filter(source=EventSource.SERVER, type=JobStatus.CANCELLED).exists()


def _move(job: PrintJob, target: str, *, reason: str = "", wake: bool = True) -> None:
    """Move ``job`` (row locked by the caller) to ``target`` with a guarded UPDATE."""
    current = job.status
    changes: dict[str, Any] = {"status": target, "status_reason": _reason(reason)}
    if target == JobStatus.RECEIVED:
        changes["received_at"] = Now()
    if is_final(target):
        changes["finished_at"] = Now()
    moved = PrintJob.objects.filter(pk=job.pk, status=current).update(**changes)
    if moved != 1:  # cannot happen while the row is locked; refuse rather than guess
        raise EventRejected("backwards", f"The job is no longer {current}.")
    job.refresh_from_db(fields=["status", "status_reason", "received_at", "finished_at"])
    _moved(job, current, target, wake=wake)


def _device_label(job: PrintJob) -> str:
    """``tenant/name`` of the job's device, for the logs (read only when the lock did not)."""
    name = getattr(job, "device_name", None)
    if name is None:
        name = Device.objects.filter(pk=job.device_id).values_list("name", flat=True).first()
    return f"{job.tenant}/{name}"


def _moved(
    job: PrintJob, current: str, target: str, *, wake: bool = True, queued: bool | None = None
) -> None:
    """What follows a move once it commits: the device is woken (unless its socket claims the
    next job itself: ``wake=False``; ``queued``: whether the move's statement found another job
    of the device to claim, None when it did not read it), the application told."""
    logger.info(
        "job_status job=%s device=%s from=%s to=%s", job.pk, _device_label(job), current, target
    )
    # A job locked by record_device_event knows whether its tenant has webhooks (``announced``).
    outbox.announce_job(
        job.pk,
        job.tenant,
        target,
        subscribed=getattr(job, "announced", True),
        waited=_waited(job),
    )
    if current == JobStatus.CLAIMED and wake:
        reason = JOB_RELEASED_NOTHING_QUEUED if queued is False else JOB_RELEASED
        wake_after_commit(job.tenant, job.device_id, reason)
    if is_final(target):
        send_job_finished_after_commit(job)


def _waited(job: PrintJob) -> bool:
    """Whether a ``?wait`` request watches the job (the lock's ``waited``, else the column)."""
    waited = getattr(job, "waited", None)
    if waited is not None:
        return bool(waited)
    return job.waited_until is not None and job.waited_until > timezone.now()


def record_server_event(
    job: PrintJob, type: str, *, message: str = "", detail: dict[str, Any] | None = None
) -> PrintJobEvent:
    """Record what the server did to ``job`` (QUEUED, CLAIMED, CANCELLED, EXPIRED, REPRINTED)."""
    event_id = uuid.uuid4()
    detail = detail or {}
    return PrintJobEvent.objects.create(
        event_id=event_id,
        job_id=job.pk,
        device=None,
        source=EventSource.SERVER,
        type=type,
        message=message,
        detail=detail,
        fingerprint=server_event_fingerprint(job.pk, type, message, detail),
    )


def server_event_insert(
    rows: str,
    job_id,
    type: str,
    *,
    detail: dict[str, Any],
    message: str = "",
    named: bool,
    job_column: str | None = None,
) -> tuple[str, Any]:
    """The server event of ``job_id`` as an ``INSERT ... SELECT ... FROM rows``, for a statement
    of data-modifying CTEs that writes the job in the same round trip: one event per row of the CTE
    ``rows`` (none when the CTE changed nothing). Returns the SQL and its parameters, named
    (``%(server_event_*)s``, a dict to merge) or positional (``%s``, a list in order).
    ``job_column``: the job is the one in that column of ``rows``, known only to the statement
    (``job_id`` None): the statement computes the fingerprint, hashing the same canonical text
    as :func:`server_event_fingerprint` with the job's id put in its place."""
    values = {
        "event_id": uuid.uuid4(),
        "job_id": job_id,
        "source": EventSource.SERVER.value,
        "type": str(type),
        "message": message,
        "detail": json.dumps(detail),
    }
    if job_column is not None:
        del values["job_id"]
        text = canonical_json(_server_event_content(_JOB_SLOT, type, message, detail))
        values["fingerprint_head"], _, values["fingerprint_tail"] = text.rpartition(_JOB_SLOT)
    else:
        values["fingerprint"] = (
            server_event_fingerprint(job_id, type, message, detail) if job_id is not None else ""
        )
    if named:
        p = {name: f"%(server_event_{name})s" for name in values}
        params: Any = {f"server_event_{name}": value for name, value in values.items()}
    else:
        p = dict.fromkeys(values, "%s")
        params = list(values.values())
    if job_column is not None:
        job = f"{rows}.{job_column}"
        fingerprint = (
            f"encode(sha256(convert_to({p['fingerprint_head']}::text || {job}::text"
            f" || {p['fingerprint_tail']}::text, 'UTF8')), 'hex')"
        )
    else:
        job, fingerprint = f"{p['job_id']}::uuid", p["fingerprint"]
    statement = f"""INSERT INTO qprint_job_event
            (event_id, job_id, device_id, source, type, message, detail, fingerprint)
        SELECT {p["event_id"]}::uuid, {job}, NULL, {p["source"]}, {p["type"]},
               {p["message"]}, {p["detail"]}::jsonb, {fingerprint}
        FROM {rows}"""
    return statement, params


#: Where the job's id goes in the canonical text of a server event whose job only the statement
#: knows (:func:`server_event_insert`'s ``job_column``).
_JOB_SLOT = "job-id-known-to-the-statement"


def _server_event_content(job_id: str, type: str, message: str, detail: dict[str, Any]) -> dict:
    return {"job_id": job_id, "type": type, "message": message, "detail": detail}


def server_event_fingerprint(job_id, type: str, message: str, detail: dict[str, Any]) -> str:
    """The fingerprint of a server event (both ways of writing one)."""
    return fingerprint_of(_server_event_content(str(job_id), type, message, detail))


def move_by_server(job: PrintJob, target: str, *, reason: str = "", detail=None) -> bool:
    """Move a job (row locked by the caller) on the server's own authority, with its event.

    Used for CANCELLED (application) and EXPIRED (expiry). Returns False when the state machine
    does not allow the move (the job went on meanwhile).
    """
    if not can_move(job.status, target):
        return False
    _move(job, target, reason=reason)
    record_server_event(job, target, message=reason, detail=detail)
    return True
