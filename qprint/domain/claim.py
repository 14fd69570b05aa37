"""The claim: how a device is handed its next job (docs/JOBS.md, "Delivery guarantee", 1 and 3).

Invariant: a job is handed out by exactly one QUEUED -> CLAIMED transition, and a device holds at
most one CLAIMED job. Every later claim by that device, on any node, replays the same assignment
(same ``claim_id``) until the job leaves CLAIMED; the next job is not handed out before that. A job
that left CLAIMED is never handed out again.

How it holds, in one transaction per claim:

1. The device row is locked (``SELECT ... FOR NO KEY UPDATE``): claims of one device are
   serialised across every node. (``NO KEY``: inserting a job or an event only takes a key-share
   lock on the device row, so submissions and event recording never queue behind a claim, and a
   claim never deadlocks with a transaction holding a job row.) The gate
   (:func:`qprint.core.gate.refusal`) is evaluated from that locked row, the lease judged on the
   database clock (``Device.objects.with_liveness()``). The row is locked by the device's id, or,
   for a claim of the device HTTP API, by the hash of the token the request presents: the token
   is checked from the locked row (:class:`qprint.domain.credentials.PresentedToken`), with no
   lookup of its own.
2. If the device already has a CLAIMED job, that job's assignment is answered again (the replay).
3. Else the next claimable job (``PrintJob.objects.claimable()``: QUEUED, unexpired, priority
   desc, oldest first) moves to CLAIMED with an
   UPDATE guarded by ``status = 'QUEUED'``; a rowcount of 0 (a cancel or expiry won the job) moves
   on to the next candidate. The partial unique constraint ``qprint_job_one_claimed_per_device``
   backs the "one CLAIMED job per device" rule in the schema itself.

Round trips (PostgreSQL): ONE statement, committed by itself (:func:`_at_once_sql`). Its
first CTE locks the device row as step 1 does and reads its next candidate; the claim is made
only when that locked row opens the gate (:func:`qprint.core.gate.open_sql`, the SQL form of the
gate's rule, pinned to :func:`qprint.core.gate.refusal` by a test) and holds the token presented;
then the held job (the replay) or the guarded UPDATE of the candidate with its CLAIMED server
event, as below. The locked row is always returned: a refusal is told from it by the gate's own
function, so a refused claim costs that one round trip too.

The statement's subqueries read the snapshot it started with, which predates its lock when the
lock had to wait. A claim committed meanwhile is then unseen; the UPDATE checks its candidate's
own row again (taken: nothing claimed), and a second CLAIMED job of the device is refused by the
constraint (the statement fails whole). Either way, and for a tenant with webhook endpoints (their
deliveries are written in the claim's transaction), the claim takes the transaction's way:

Two statements between BEGIN and COMMIT. The first locks the device row, judges the gate and
reads the next candidate (a subquery of the same SELECT; it may be stale if the lock had to wait,
which costs at most another round, never a wrong answer). The second, run once the lock is held
and so on a fresh snapshot, is one statement of data-modifying CTEs: the held CLAIMED job (the
replay) or the guarded ``UPDATE ... WHERE status = 'QUEUED' AND NOT EXISTS (held)`` of the
candidate with its CLAIMED server event (``INSERT ... SELECT FROM claimed``). A candidate lost
meanwhile (cancelled, expired) yields neither; the next candidate is read again and the second
statement repeats. A pushed claim, which sends small documents with the assignment, reads the
document's bytes in the claim's statement too (a scalar subquery of its last SELECT, where the
database keeps documents: :func:`qprint.documents.storage.document_select`).

A socket in push mode woken by a job (:func:`claim_on_wakeup`) locks the row with what the
connection's read would say of it, guarded by its ``connection_id``, and lets the socket's
session decide from that row whether to claim. In the one statement, the claim is made when the
row agrees with what the socket has told its device (:class:`Told`: nothing to send before the
assignment), and the session decides from the row it returned; a decision to claim that the
statement did not make is served by the transaction's way.

On SQLite (no data-modifying CTEs) steps 2 and 3 run as separate statements, inside
``transaction_mode = "IMMEDIATE"`` transactions, which serialise writers at BEGIN (``FOR UPDATE``
is a no-op there). Nothing else writes ``claim_id``, ``claim_node`` or moves a job into CLAIMED.
"""

import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import (
    CharField,
    Exists,
    F,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    UUIDField,
)
from django.db.models.functions import Now
from django.utils import timezone

from qprint.core import cluster, gate, prepared, sql
from qprint.core.prepared import Param, PreparedQuery
from qprint.core.states import JobStatus
from qprint.documents import storage
from qprint.domain import connection as connections
from qprint.domain import credentials, events
from qprint.models import Device, DeviceCommand, PrintJob, raw
from qprint.webhooks import outbox

logger = logging.getLogger("qprint.claim")

#: Candidates tried when cancels or expiries keep winning the race for the next job.
_MAX_CANDIDATES = 10

#: :attr:`Assignment.document` when the claim did not read the document.
NOT_READ: Any = object()


class NotClaimed:
    """What :func:`claim_on_wakeup` returns when its caller decided not to claim."""


#: The one :class:`NotClaimed`.
NOT_CLAIMED = NotClaimed()


@dataclass(frozen=True)
class _Handout:
    """What a claim's row carries besides the job: ``inline_max``, the document when it has at
    most that many bytes (None: not asked for); ``for_push``: a pushed claim's, which does not
    read whether another job waits (its socket claims the next job itself)."""

    inline_max: int | None = None
    for_push: bool = False


@dataclass(frozen=True)
class Assignment:
    """What a device is told to print: the assignment body of docs/API.md minus
    ``document_url`` (``qprint.models.serializers.assignment_object`` adds it)."""

    job_id: uuid.UUID
    claim_id: uuid.UUID
    printer: str | None
    title: str
    content_type: str
    size: int
    sha256: str
    options: dict[str, Any]
    priority: int
    created_at: datetime
    #: The document's bytes, read by the claim's own statement when asked to
    #: (``inline_max``; None: gone, or larger); :data:`NOT_READ` otherwise.
    document: Any = NOT_READ
    #: Whether another job of the device waited to be claimed when the claim read its queue; a
    #: device that is told False need not claim again after this job (a job submitted after that
    #: read wakes it). None: not read (a pushed claim's: the socket claims the next job itself).
    more_queued: bool | None = None

    @classmethod
    def of(cls, job: PrintJob, more_queued: bool | None = None) -> "Assignment":
        return cls(
            job_id=job.pk,
            claim_id=job.claim_id,
            printer=job.printer,
            title=job.title,
            content_type=job.content_type,
            size=job.size,
            sha256=job.sha256,
            options=job.options,
            priority=job.priority,
            created_at=job.created_at,
            more_queued=more_queued,
        )


_ASSIGNMENT_FIELDS = (
    "id",
    "tenant",
    "device_id",
    "claim_id",
    "printer",
    "title",
    "content_type",
    "size",
    "sha256",
    "options",
    "priority",
    "created_at",
    "status",
    "waited_until",
)


def claim_next_job(
    device: int | credentials.PresentedToken,
    *,
    node: str | None = None,
    token_hash: str | None = None,
    inline_max: int | None = None,
    for_push: bool = False,
) -> Assignment | None:
    """Hand the device its job: the one it already holds, else the next one, else ``None``.

    Raises :class:`~qprint.core.errors.Disabled` (403) for a disabled device and
    :class:`~qprint.core.errors.GateClosed` (409) with code ``not_connected``, ``not_ready``,
    ``stale_control``, ``stale_settings`` or ``paused`` when the device may not claim now.
    ``node`` is recorded as ``claim_node`` (default: this node's id). ``device``: its id, or the
    token an HTTP request presents (:class:`~qprint.domain.credentials.PresentedToken`): the
    device row is then locked by the token's hash (an agent's only) and checked from the locked
    row; a token the lock matches no row of is authenticated the one way in (401, 429, 403 as
    any device request, counted by the throttle), outside this transaction. ``token_hash``: the
    claim of a device socket (``device`` its id), whose device must still hold that token (401
    otherwise), judged from the locked row (:func:`qprint.domain.credentials.require_token`).
    ``inline_max``: the document goes with the assignment when it has at most that many bytes
    (a pushed claim's, or a device's that asked for it): the claim's own statement then reads
    them where the database keeps them (:attr:`Assignment.document`; :data:`NOT_READ` where it
    does not). ``for_push``: a pushed claim's, whose socket claims the next job itself: it does
    not read :attr:`Assignment.more_queued`.
    """
    handout = _Handout(inline_max, for_push)
    node = node or cluster.node_id()
    if isinstance(device, credentials.PresentedToken):
        presented = device
        lock_values = {"digest": presented.token_hash, "kind": presented.kind}
        found = _at_once(_AT_ONCE_BY_TOKEN, lock_values, presented.token_hash, node, handout)
        if found is not None and found.device is not None:
            presented.require(found.device.token_hash, found.device.enabled)
            answer = _answer(found)
            if answer is not _TRANSACTION:
                return answer
        if found is None or found.device is not None:
            with transaction.atomic():
                locked = _LOCK_DEVICE_BY_TOKEN.first(**lock_values)
                if locked is not None:
                    presented.require(locked.token_hash, locked.enabled)
                    return _claim_locked(locked, node, handout)
        device = presented.authenticate().pk  # the lock matched nothing: the full way decides
    found = _at_once(_AT_ONCE_BY_ID, {"device_id": device}, device, node, handout, token_hash)
    if found is not None:
        if found.device is None:
            raise credentials.no_device(token_hash)
        if token_hash is not None:
            credentials.require_token(found.device.token_hash, found.device.enabled, token_hash)
        answer = _answer(found)
        if answer is not _TRANSACTION:
            return answer
    return _claim_in_transaction(device, node, token_hash, handout)


def _claim_in_transaction(
    device_id: int, node: str, token_hash: str | None, handout: _Handout
) -> Assignment | None:
    """The claim in a transaction of its own: the lock, then the claim (steps 1 to 3)."""
    with transaction.atomic():
        locked = _lock_device(device_id, token_hash)
        if token_hash is not None:
            credentials.require_token(locked.token_hash, locked.enabled, token_hash)
        return _claim_locked(locked, node, handout)


@dataclass(frozen=True)
class Told:
    """What a socket in push mode has told its device (its session's record): the control
    revision and pause sent, the settings revision sent, the job last pushed. A wakeup's claim
    made in the statement that locks the row (:func:`claim_on_wakeup`) claims only when the row
    asks the socket to send nothing before the assignment: the same control, no newer settings,
    no pending command."""

    control_revision: int
    paused: bool
    settings_revision: int
    pushed_job: str | None


def claim_on_wakeup(
    device_id: int,
    connection_id: uuid.UUID,
    decide: Callable[[connections.DeviceState], bool],
    *,
    token_hash: str,
    inline_max: int,
    told: Told,
) -> Assignment | NotClaimed | None:
    """The wakeup of a socket in push mode: the device row locked as the claim locks it, read
    with what :func:`qprint.domain.connection.read` would say of the connection
    (:class:`~qprint.domain.connection.Replaced` when it no longer holds the row);
    ``decide(state)`` (the socket session's plan, no I/O) says whether to claim now; if so, the
    claim as :func:`claim_next_job` makes it for ``token_hash`` and ``inline_max``. Returns the
    assignment, None (nothing to hand out), or :data:`NOT_CLAIMED` (not asked to).

    On PostgreSQL it is ONE statement: the lock, the read and the claim, made when the row agrees
    with ``told`` (what the socket has told its device: :class:`Told`) and the gate is open;
    ``decide`` then judges the row that statement read. A plan that wants a claim the statement
    did not make (the row changed, a candidate lost, a tenant with webhooks) gets it from
    :func:`claim_next_job`'s transaction. When the statement is not tried (SQLite, a device the
    webhook hint sends the transaction's way) or lost a race: the lock, then ``decide`` on the
    locked row, then the claim, in one transaction."""
    node = cluster.node_id()
    handout = _Handout(inline_max, for_push=True)
    lock_values = {"device_id": device_id, "connection_id": connection_id}
    found = _at_once(_AT_ONCE_ON_WAKEUP, lock_values, device_id, node, handout, token_hash, told)
    if found is not None:
        if found.device is None:
            raise _replaced(device_id, connection_id)
        wanted = decide(connections.state_of(found.device))
        if found.assignment is not None:
            return found.assignment
        if not wanted:
            return NOT_CLAIMED
        return _claim_in_transaction(device_id, node, token_hash, handout)
    with transaction.atomic():
        locked = _LOCK_DEVICE_ON_WAKEUP.first(**lock_values)
        if locked is None:
            raise _replaced(device_id, connection_id)
        if not decide(connections.state_of(locked)):
            return NOT_CLAIMED
        credentials.require_token(locked.token_hash, locked.enabled, token_hash)
        return _claim_locked(locked, node, handout)


def _replaced(device_id: int, connection_id: uuid.UUID) -> connections.Replaced:
    return connections.Replaced(f"device {device_id}: connection {connection_id} replaced")


def _claim_locked(device: Device, node: str, handout: _Handout) -> Assignment | None:
    """Steps 2 and 3 for the device row locked (and its credential checked) by the caller."""
    gate.check(device)
    if connection.vendor == "postgresql":
        return _claim_in_one_statement(device, node, handout)
    return _claim_step_by_step(device, node, for_push=handout.for_push)


def _claimed(job_id, device: Device, claim_id, node: str, waited: bool) -> None:
    """Inside the claim's transaction, once the job moved: the application is told (webhooks,
    and a ``?wait`` request watching the job)."""
    outbox.announce_job(
        job_id, device.tenant, JobStatus.CLAIMED, subscribed=device.announced, waited=waited
    )
    logger.info("job_claimed job=%s device=%s claim=%s node=%s", job_id, device, claim_id, node)


def _claim_step_by_step(device: Device, node: str, for_push: bool) -> Assignment | None:
    """Steps 2 and 3 as separate statements (SQLite); ``for_push``: a pushed claim's, which does
    not read whether another job waits."""
    device_id = device.pk
    held = PrintJob.objects.filter(device_id=device_id).held().only(*_ASSIGNMENT_FIELDS).first()
    if held is not None:
        logger.debug("claim_replayed job=%s device=%s claim=%s", held.pk, device_id, held.claim_id)
        return Assignment.of(held, None if for_push else _more_queued(device_id, held.pk))

    for _attempt in range(_MAX_CANDIDATES):
        candidate = (
            PrintJob.objects.filter(device_id=device_id)
            .claimable()
            .only(*_ASSIGNMENT_FIELDS)
            .first()
        )
        if candidate is None:
            return None
        claim_id = uuid.uuid4()
        moved = PrintJob.objects.filter(pk=candidate.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.CLAIMED,
            claim_id=claim_id,
            claim_node=node,
            claimed_at=Now(),
            attempts=F("attempts") + 1,
        )
        if moved == 1:
            candidate.status = JobStatus.CLAIMED
            candidate.claim_id = claim_id
            events.record_server_event(
                candidate, JobStatus.CLAIMED, detail={"claim_id": str(claim_id), "node": node}
            )
            waited = candidate.waited_until is not None and candidate.waited_until > timezone.now()
            _claimed(candidate.pk, device, claim_id, node, waited)
            more = None if for_push else _more_queued(device_id, candidate.pk)
            return Assignment.of(candidate, more)
    return None


def _more_queued(device_id: int, job_id) -> bool:
    """:attr:`Assignment.more_queued` of the claim's statements (SQLite)."""
    return PrintJob.objects.filter(device_id=device_id).claimable().exclude(pk=job_id).exists()


_COLUMNS = "id, claim_id, printer, title, content_type, size, sha256, options, priority, created_at"

#: Steps 2 and 3 as CTEs, for the device and candidate of the SQL expressions ``{device}`` and
#: ``{candidate}``: the held job, or the candidate claimed with its server event (``{event}``,
#: filled per call). The guard is in the UPDATE's WHERE: still claimable (QUEUED, unexpired:
#: ``raw.claimable_job``, the queryset's predicate) and no job of the device CLAIMED (the partial
#: unique constraint backs the same rule in the schema).
_HANDOUT_CTES = f"""held AS (
    SELECT {_COLUMNS} FROM qprint_job
    WHERE device_id = {{device}} AND {{held}}
    LIMIT 1
), claimed AS (
    UPDATE qprint_job
    SET status = %(claimed_status)s::text, claim_id = %(claim_id)s::uuid,
        claim_node = %(node)s::text, claimed_at = now(), attempts = attempts + 1
    WHERE id = {{candidate}} AND device_id = {{device}} AND {{claimable}}
      AND NOT EXISTS (SELECT 1 FROM held)
    RETURNING {_COLUMNS}, COALESCE(waited_until > now(), false) AS waited
), recorded AS (
    {{event}}
    RETURNING job_id
)"""
#: The claim's row from those CTEs (what :func:`_assignment_of_row` reads): the held job unless
#: it is ``{pushed}``, or the job this claim moved; each with whether another job of the device
#: waits behind it (the statement's snapshot still sees the job it moved as QUEUED).
_HANDED_OUT = f"""SELECT 'held' AS got, {_COLUMNS}, false AS waited, {{document:held}} AS document,
        {{more:held}} AS more_queued
    FROM held WHERE held.id IS DISTINCT FROM {{pushed}}
    UNION ALL
    SELECT 'claimed', {_COLUMNS}, waited, {{document:claimed}}, {{more:claimed}} FROM claimed
    WHERE EXISTS (SELECT 1 FROM recorded)"""


def _handout(
    device: str, candidate: str, pushed: str, document: bool, *, for_push: bool
) -> tuple[str, str]:
    """:data:`_HANDOUT_CTES` and :data:`_HANDED_OUT` for these SQL expressions, the shared
    predicates in place, ``{event}`` left to fill. ``document``: the claim's row carries the
    document's bytes when it has at most ``%(inline_max)s`` bytes (else NULL). ``for_push``: a
    pushed claim's row says NULL of whether another job waits (the socket claims the next job
    itself)."""
    ctes = (
        _HANDOUT_CTES.replace("{device}", device)
        .replace("{candidate}", candidate)
        .replace("{held}", raw.held_job("qprint_job"))
        .replace("{claimable}", raw.claimable_job("qprint_job"))
    )
    handed_out = (
        _HANDED_OUT.replace("{pushed}", pushed)
        .replace("{document:held}", _document_column("held", document))
        .replace("{document:claimed}", _document_column("claimed", document))
        .replace("{more:held}", _more_column(device, "held", for_push))
        .replace("{more:claimed}", _more_column(device, "claimed", for_push))
    )
    return ctes, handed_out


def _document_column(rows: str, document: bool) -> str:
    """The last column of the claim's row: the document of the job of ``rows`` (``held`` or
    ``claimed``) when ``document`` is asked for, it has at most ``inline_max`` bytes and the
    database keeps it, else NULL."""
    select = storage.document_select(f"{rows}.id") if document else None
    if select is None:
        return "NULL::bytea"
    return f"CASE WHEN {rows}.size <= %(inline_max)s THEN {select} END"


def _more_column(device: str, rows: str, for_push: bool) -> str:
    """The claim row's ``more_queued``: another claimable job of the device than the one of
    ``rows``, unless the claim is ``for_push`` (NULL)."""
    if for_push:
        return "NULL::boolean"
    return raw.other_claimable_job_exists(device, f"{rows}.id")


def _assignment_of_row(row, document_read: bool) -> Assignment:
    _, job_id, claim_id, printer, title, content_type, size, sha256, options, priority, created = (
        row[:11]
    )
    document = row[12] if document_read else NOT_READ
    return Assignment(
        job_id=job_id,
        claim_id=claim_id,
        printer=printer,
        title=title,
        content_type=content_type,
        size=size,
        sha256=sha256,
        options=sql.json_value(options),
        priority=priority,
        created_at=created,
        document=bytes(document) if isinstance(document, memoryview) else document,
        more_queued=None if row[13] is None else bool(row[13]),
    )


def _handed_out(row, document_read: bool, device: Device, claim_id, node: str) -> Assignment:
    """The assignment of a claim statement's row (``held``: a replay, logged; ``claimed``: the
    job moved by this claim, announced: :func:`_claimed`)."""
    assignment = _assignment_of_row(row, document_read)
    if row[0] == "held":
        logger.debug(
            "claim_replayed job=%s device=%s claim=%s",
            assignment.job_id,
            device.pk,
            assignment.claim_id,
        )
    else:
        _claimed(assignment.job_id, device, claim_id, node, bool(row[11]))
    return assignment


def _claim_in_one_statement(device: Device, node: str, handout: _Handout) -> Assignment | None:
    """Steps 2 and 3 in one statement per candidate (PostgreSQL); with ``inline_max``, the
    document read in it too (where the database keeps it)."""
    ctes, handed_out = _handout(
        "%(device)s",
        "%(candidate)s",
        "NULL::uuid",
        handout.inline_max is not None,
        for_push=handout.for_push,
    )
    template = f"WITH {ctes}\n{handed_out}"
    document_read = "%(inline_max)s" in template
    candidate = device.next_job_id
    for _attempt in range(_MAX_CANDIDATES):
        claim_id = uuid.uuid4()
        detail = {"claim_id": str(claim_id), "node": node}
        event, event_params = events.server_event_insert(
            "claimed", candidate, JobStatus.CLAIMED, detail=detail, named=True
        )
        statement = template.replace("{event}", event)
        params = {
            "device": device.pk,
            "candidate": candidate,
            "claim_id": claim_id,
            "node": node,
            "claimed_status": JobStatus.CLAIMED.value,
            **event_params,
        }
        if document_read:
            params["inline_max"] = handout.inline_max
        rows = prepared.fetch(statement, params)
        if rows:
            return _handed_out(rows[0], document_read, device, claim_id, node)
        if candidate is None:
            return None
        # The candidate was cancelled or expired meanwhile: read the next one afresh.
        candidate = (
            PrintJob.objects.filter(device_id=device.pk)
            .claimable()
            .values_list("id", flat=True)
            .first()
        )
    return None


# -- the claim in one statement (PostgreSQL) ---------------------------------------------------

#: After the lock's SELECT (the CTE ``gate``, the device row ``FOR NO KEY UPDATE`` with its next
#: candidate, its held job, a pending command and whether its tenant has webhook endpoints): the
#: claim made only when the locked row says it may be (``go``): the gate open
#: (:func:`qprint.core.gate.open_sql`, the rule of :func:`qprint.core.gate.refusal`), the token
#: still the device's when one is given, no webhook endpoint of the tenant (whose deliveries are
#: written in the claim's transaction), and, for a wakeup, the row agreeing with what the socket
#: told its device (:class:`Told`). Then the transaction's way's CTEs (:func:`_handout`), for the
#: device and candidate ``go`` found: the held job (not the one last pushed), or the candidate
#: moved to CLAIMED with its server event. The row of ``gate`` is always
#: returned, so the caller answers a refusal from it; the claim's columns follow when one was made.
#:
#: The subqueries of one statement share its snapshot, taken before the lock: when the lock had
#: to wait, a claim committed meanwhile by another transaction may be unseen. The candidate's own
#: row is then checked again by the UPDATE (no longer QUEUED: nothing claimed), and a second
#: CLAIMED job of the device is refused by ``qprint_job_one_claimed_per_device``: the statement
#: fails whole, writes nothing, and the claim takes the transaction's way, which locks first and
#: then reads.
_AT_ONCE_GO = """go AS (
    SELECT gate.id, gate.next_job_id FROM gate
    WHERE NOT gate.announced AND {gate_open}
      AND (%(token_hash)s::text IS NULL OR gate.token_hash = %(token_hash)s::text)
      AND (NOT %(told)s::boolean
           OR (gate.control_revision = %(told_control)s::integer
               AND gate.paused = %(told_paused)s::boolean
               AND gate.settings_revision <= %(told_settings)s::integer
               AND NOT gate.command_pending))
)"""
#: The columns ``got`` adds to the lock's: what :func:`_assignment_of_row` reads.
_GOT_COLUMNS = 14


@functools.cache
def _at_once_sql(
    lock_sql: str, event_sql: str, document: bool, for_push: bool
) -> tuple[str, list[str]]:
    """The statement around the lock's compiled SELECT (positional placeholders, as the tail's
    become) and the names of the tail's values in order. ``document``: the claim reads the
    document's bytes (where the database keeps them); ``for_push``: a pushed claim's."""
    ctes, handed_out = _handout(
        "(SELECT id FROM go)",
        "(SELECT next_job_id FROM go)",
        "%(told_pushed)s::uuid",
        document,
        for_push=for_push,
    )
    go = _AT_ONCE_GO.replace("{gate_open}", gate.open_sql("gate"))
    tail = (
        f", {go}, {ctes.replace('{event}', event_sql)}, got AS (\n    {handed_out}\n)\n"
        "SELECT gate.*, got.* FROM gate LEFT JOIN got ON true"
    )
    lock = f"{lock_sql} FOR NO KEY UPDATE OF qprint_device"
    tail, names = prepared.positional(tail)
    return f"WITH gate AS ({lock}){tail}", names


@dataclass(frozen=True)
class _Found:
    """What the claim's one statement found: the locked device row (None: no row matched the
    lock), and the assignment it made or replayed (None: none)."""

    device: Device | None
    assignment: Assignment | None


#: :func:`_answer`'s "the transaction's way decides".
_TRANSACTION: Any = object()


def _at_once(
    lock: PreparedQuery,
    lock_values: dict[str, Any],
    hint: Any,
    node: str,
    handout: _Handout,
    token_hash: str | None = None,
    told: Told | None = None,
) -> _Found | None:
    """The claim in one statement (:func:`_at_once_sql`), committed by itself (in a savepoint
    when the caller's transaction holds it); None when not tried (SQLite; a device whose tenant
    has webhooks, by ``hint``: :func:`qprint.domain.events.announcing`) or when the statement
    failed on the one-CLAIMED-job constraint (a claim it could not see won): the caller takes
    the transaction's way."""
    if connection.vendor != "postgresql" or events.announcing(hint):
        return None
    claim_id = uuid.uuid4()
    detail = {"claim_id": str(claim_id), "node": node}
    event_sql, event_params = events.server_event_insert(
        "claimed", None, JobStatus.CLAIMED, detail=detail, named=True, job_column="id"
    )
    document = handout.inline_max is not None and storage.in_database()
    lock_sql, params = lock.statement(**lock_values)
    sql, names = _at_once_sql(lock_sql, event_sql, document, handout.for_push)
    values = {
        "token_hash": token_hash,
        "told": told is not None,
        "told_control": told.control_revision if told else None,
        "told_paused": told.paused if told else None,
        "told_settings": told.settings_revision if told else None,
        "told_pushed": told.pushed_job if told else None,
        "claimed_status": JobStatus.CLAIMED.value,
        "claim_id": claim_id,
        "node": node,
        "inline_max": handout.inline_max,
        **event_params,
    }
    params.extend(values[name] for name in names)
    try:
        if connection.in_atomic_block:
            with transaction.atomic():  # a savepoint: a failed statement leaves the rest
                rows = prepared.fetch(sql, params)
        else:
            rows = prepared.fetch(sql, params)
    except IntegrityError:
        logger.debug("claim_at_once_raced device=%s", hint)
        return None
    if not rows:
        return _Found(None, None)
    [device] = lock.instances(rows)
    got = rows[0][-_GOT_COLUMNS:]
    if device.announced:
        events.remember_announcing(hint)
    if got[0] is None:
        return _Found(device, None)
    return _Found(device, _handed_out(got, document, device, claim_id, node))


def _answer(found: _Found) -> Assignment | None:
    """A claim's answer from its one statement, the credential already checked: the assignment
    it made or replayed; the gate's refusal; None when the row says there is nothing to hand
    out; else :data:`_TRANSACTION` (a tenant with webhooks, a candidate lost meanwhile)."""
    if found.assignment is not None:
        return found.assignment
    gate.check(found.device)
    if found.device.next_job_id is None and found.device.claimed_job_id is None:
        return None
    return _TRANSACTION


def _build_lock(
    *, by_token: bool = False, on_wakeup: bool = False, state: bool = False, locks: bool = True
) -> QuerySet:
    """The claim's lock of the device row: by id, or (``by_token``) by the hash of the token an
    HTTP request presents, of a device of the transport's kind (``token_hash`` is unique).
    ``on_wakeup``: by id and the socket's connection. ``state`` (implied by ``on_wakeup``): with
    the rest of what the connection's read says (``command_pending``, ``claimed_job_id``:
    :func:`claim_on_wakeup`, and the claim in one statement). ``locks`` False: the SELECT
    without its lock, which the claim in one statement adds (Django compiles a
    ``select_for_update`` only inside a transaction)."""
    if by_token:
        match = {"token_hash": Param("digest", CharField()), "kind": Param("kind", CharField())}
    else:
        match = {"pk": Param("device_id", IntegerField())}
    if on_wakeup:
        match["connection_id"] = Param("connection_id", UUIDField())
    if on_wakeup or state:
        held = PrintJob.objects.filter(device_id=OuterRef("pk")).held().values("id")[:1]
        pending = DeviceCommand.objects.filter(device_id=OuterRef("pk")).pending()
        wakeup = {"claimed_job_id": Subquery(held), "command_pending": Exists(pending)}
    else:
        wakeup = {}
    devices = Device.objects.all()
    if locks:
        devices = devices.select_for_update(of=("self",), no_key=True)
    return (
        devices.with_liveness()
        .annotate(
            next_job_id=Subquery(
                PrintJob.objects.filter(device_id=OuterRef("pk")).claimable().values("id")[:1]
            ),
            announced=outbox.tenant_subscribed(OuterRef("tenant")),
            **wakeup,
        )
        .only(
            "id",
            "tenant",
            "name",  # the logs name the device tenant/name
            "enabled",
            "paused",
            "control_revision",
            "control_applied_revision",
            "settings_revision",
            "settings_applied_revision",
            "connection_id",
            "connection_ready",
            "connection_lease_expires_at",
            "token_hash",
        )
        .filter(**match)[:1]
    )


_LOCK_DEVICE = PreparedQuery(_build_lock)
_LOCK_DEVICE_BY_TOKEN = PreparedQuery(functools.partial(_build_lock, by_token=True))
_LOCK_DEVICE_ON_WAKEUP = PreparedQuery(functools.partial(_build_lock, on_wakeup=True))
_AT_ONCE_BY_ID = PreparedQuery(functools.partial(_build_lock, state=True, locks=False))
_AT_ONCE_BY_TOKEN = PreparedQuery(
    functools.partial(_build_lock, by_token=True, state=True, locks=False)
)
_AT_ONCE_ON_WAKEUP = PreparedQuery(functools.partial(_build_lock, on_wakeup=True, locks=False))


def _lock_device(device_id: int, token_hash: str | None = None) -> Device:
    """The device row, locked for this transaction, with the lease judged on the database clock,
    its next candidate job (``next_job_id``) and whether its tenant has webhook endpoints
    (``announced``), read in the same statement."""
    device = _LOCK_DEVICE.first(device_id=device_id)
    if device is None:
        raise credentials.no_device(token_hash)
    return device
