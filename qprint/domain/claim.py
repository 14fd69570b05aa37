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
   (:func:`qprint.domain.gate.refusal`) is evaluated from that locked row, the lease judged on the
   database clock (``Device.objects.with_liveness()``).
2. If the device already has a CLAIMED job, that job's assignment is answered again (the replay).
3. Else the next claimable job (``PrintJob.objects.claimable()``: QUEUED, unexpired, priority
   desc, oldest first) moves to CLAIMED with an
   UPDATE guarded by ``status = 'QUEUED'``; a rowcount of 0 (a cancel or expiry won the job) moves
   on to the next candidate. The partial unique constraint ``qprint_job_one_claimed_per_device``
   backs the "one CLAIMED job per device" rule in the schema itself.

On SQLite the same code runs inside ``transaction_mode = "IMMEDIATE"`` transactions, which
serialise writers at BEGIN (``FOR UPDATE`` is a no-op there). Nothing else writes ``claim_id``,
``claim_node`` or moves a job into CLAIMED.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from qprint import cluster
from qprint.domain import events, gate
from qprint.domain.states import JobStatus
from qprint.errors import NotFound
from qprint.models import Device, PrintJob
from qprint.webhooks import outbox

logger = logging.getLogger("qprint.claim")

#: Candidates tried when cancels or expiries keep winning the race for the next job.
_MAX_CANDIDATES = 10


@dataclass(frozen=True)
class Assignment:
    """What a device is told to print: the assignment body of docs/API.md minus
    ``document_url`` (``qprint.serializers.assignment_object`` adds it)."""

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

    @classmethod
    def of(cls, job: PrintJob) -> "Assignment":
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
)


def claim_next_job(device_id: int, *, node: str | None = None) -> Assignment | None:
    """Hand the device its job: the one it already holds, else the next one, else ``None``.

    Raises :class:`~qprint.errors.Disabled` (403) for a disabled device and
    :class:`~qprint.errors.GateClosed` (409) with code ``not_connected``, ``not_ready``,
    ``stale_control``, ``stale_settings`` or ``paused`` when the device may not claim now.
    ``node`` is recorded as ``claim_node`` (default: this node's id).
    """
    node = node or cluster.node_id()
    with transaction.atomic():
        device = _lock_device(device_id)
        gate.check(device)

        held = (
            PrintJob.objects.filter(device_id=device_id, status=JobStatus.CLAIMED)
            .only(*_ASSIGNMENT_FIELDS)
            .first()
        )
        if held is not None:
            logger.debug(
                "claim_replayed job=%s device=%s claim=%s", held.pk, device_id, held.claim_id
            )
            return Assignment.of(held)

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
                outbox.announce_job(candidate.pk, candidate.tenant, JobStatus.CLAIMED)
                logger.info(
                    "job_claimed job=%s device=%s claim=%s node=%s",
                    candidate.pk,
                    device_id,
                    claim_id,
                    node,
                )
                return Assignment.of(candidate)
        return None


def _lock_device(device_id: int) -> Device:
    """The device row, locked for this transaction, with the lease judged on the database clock."""
    device = (
        Device.objects.select_for_update(of=("self",), no_key=True)
        .with_liveness()
        .only(
            "id",
            "tenant",
            "enabled",
            "paused",
            "control_revision",
            "control_applied_revision",
            "settings_revision",
            "settings_applied_revision",
            "connection_id",
            "connection_ready",
            "connection_lease_expires_at",
        )
        .filter(pk=device_id)
        .first()
    )
    if device is None:
        raise NotFound("unknown_device", "No such device.")
    return device
