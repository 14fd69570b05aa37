"""The job state machine, as data: statuses, their rank, and the moves allowed between them.

A job moves forward only and never leaves a final state (docs/JOBS.md, States). Skipping
forward is allowed (CLAIMED -> FAILED when the download fails). The claim and the event
recording ask :func:`can_move` before they write; nothing else changes a job's status.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _


class JobStatus(models.TextChoices):
    QUEUED = "QUEUED", _("Queued")
    CLAIMED = "CLAIMED", _("Claimed")
    RECEIVED = "RECEIVED", _("Received")
    SPOOLED = "SPOOLED", _("Spooled")
    PRINTED = "PRINTED", _("Printed")
    FAILED = "FAILED", _("Failed")
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN", _("Outcome unknown")
    CANCELLED = "CANCELLED", _("Cancelled")
    EXPIRED = "EXPIRED", _("Expired")


FINAL: frozenset[str] = frozenset(
    {
        JobStatus.PRINTED,
        JobStatus.FAILED,
        JobStatus.OUTCOME_UNKNOWN,
        JobStatus.CANCELLED,
        JobStatus.EXPIRED,
    }
)

#: QUEUED < CLAIMED < RECEIVED < SPOOLED < final.
RANK: dict[str, int] = {
    JobStatus.QUEUED: 0,
    JobStatus.CLAIMED: 1,
    JobStatus.RECEIVED: 2,
    JobStatus.SPOOLED: 3,
    **{status: 4 for status in FINAL},
}

#: Every move a job may make. Anything not listed is refused.
TRANSITIONS: dict[str, frozenset[str]] = {
    JobStatus.QUEUED: frozenset({JobStatus.CLAIMED, JobStatus.CANCELLED, JobStatus.EXPIRED}),
    JobStatus.CLAIMED: frozenset(
        {
            JobStatus.RECEIVED,
            JobStatus.SPOOLED,
            JobStatus.PRINTED,
            JobStatus.FAILED,
            JobStatus.OUTCOME_UNKNOWN,
            JobStatus.CANCELLED,
            JobStatus.EXPIRED,
        }
    ),
    JobStatus.RECEIVED: frozenset(
        {
            JobStatus.SPOOLED,
            JobStatus.PRINTED,
            JobStatus.FAILED,
            JobStatus.OUTCOME_UNKNOWN,
            JobStatus.CANCELLED,
        }
    ),
    JobStatus.SPOOLED: frozenset(
        {JobStatus.PRINTED, JobStatus.FAILED, JobStatus.OUTCOME_UNKNOWN, JobStatus.CANCELLED}
    ),
    **{status: frozenset() for status in FINAL},
}

#: Statuses a device may report in an event (PROGRESS changes nothing and is not a status).
DEVICE_EVENT_TYPES: frozenset[str] = frozenset(
    {
        JobStatus.RECEIVED,
        JobStatus.SPOOLED,
        JobStatus.PRINTED,
        JobStatus.FAILED,
        JobStatus.OUTCOME_UNKNOWN,
        JobStatus.CANCELLED,
        "PROGRESS",
    }
)

#: Statuses in which the application may still cancel a job outright.
CANCELLABLE_AT_ONCE: frozenset[str] = frozenset({JobStatus.QUEUED, JobStatus.CLAIMED})
#: Statuses in which a cancel must be asked of the device (CANCEL_JOB command).
CANCELLABLE_BY_DEVICE: frozenset[str] = frozenset({JobStatus.RECEIVED, JobStatus.SPOOLED})
#: Statuses in which a job expires when ``expires_at`` has passed.
EXPIRABLE: frozenset[str] = frozenset({JobStatus.QUEUED, JobStatus.CLAIMED})


def is_final(status: str) -> bool:
    return status in FINAL


def rank(status: str) -> int:
    return RANK[status]


def can_move(current: str, target: str) -> bool:
    """True when a job in ``current`` may move to ``target`` (forward only, final is final)."""
    return target in TRANSITIONS.get(current, frozenset())
