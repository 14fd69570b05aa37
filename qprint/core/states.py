"""The state machines, as data: a job's statuses, their rank and the moves allowed between them,
and a device command's statuses.

A job moves forward only and never leaves a final state (docs/JOBS.md, States). Skipping forward
is allowed (CLAIMED -> FAILED when the download fails). Two modules move a job, each within
:data:`TRANSITIONS`:

- the claim (:mod:`qprint.domain.claim`) makes the one move QUEUED -> CLAIMED, and does not ask
  :func:`can_move`: its UPDATE is guarded in SQL by the claimable predicate (``status =
  'QUEUED'``, unexpired) and by "the device holds no CLAIMED job";
- the event recording (:mod:`qprint.domain.events`: device events, and the server's cancel and
  expiry through ``move_by_server``) asks :func:`can_move` before it writes, and its UPDATE is
  guarded by the status it judged (``WHERE status = <current>``).

Nothing else changes a job's status (``tests/qprint/core/test_states.py`` checks the claim's move
is one of the table's).
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


#: A device command's statuses: PENDING -> DELIVERED -> DONE / FAILED, or EXPIRED from either of
#: the first two (the moves are :mod:`qprint.domain.commands`'s).
class CommandStatus(models.TextChoices):
    PENDING = "PENDING", _("Pending")
    DELIVERED = "DELIVERED", _("Delivered")
    DONE = "DONE", _("Done")
    FAILED = "FAILED", _("Failed")
    EXPIRED = "EXPIRED", _("Expired")
