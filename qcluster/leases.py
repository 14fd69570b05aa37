"""Named leases for singleton work: the only module that writes ``cluster_lease``.

Invariants (each one holds on PostgreSQL with any number of contenders, and on SQLite):

- **At most one holder at a time.** A lease changes hands only through one conditional UPDATE,
  compare-and-set on ``version``::

      UPDATE cluster_lease SET holder_node_id = :me, expires_at = now() + :ttl,
             version = version + 1, ...
       WHERE name = :name AND version = :seen_version
         AND (expires_at < now() OR holder_node_id = :me OR holder_node_id IS NULL)

  The version comes from a SELECT just before, which also tells (database clock) whether the
  UPDATE can match at all, so a live lease of another node costs one read. Of several nodes that
  saw the same version, the database lets exactly one UPDATE match; the others match no row and
  get 0. A missing row is first created free (``INSERT ... ON CONFLICT DO
  NOTHING``, so a concurrent insert is tolerated) and then taken by the same UPDATE.
- **The database clock decides.** Every comparison and every stored time is ``now()`` of the
  database (``STATEMENT_TIMESTAMP()`` on PostgreSQL, so a statement inside a longer transaction
  still uses its own time). No node's clock is ever compared with another's.
- **Every change bumps ``version``**, which is the fencing token: work that writes shared state
  can make its write conditional on ``fence(name, token)`` so a holder that lost the lease
  (paused, partitioned) cannot overwrite its successor.
- **Each change is its own short transaction** (``transaction.atomic(durable=True)``): a lease is
  never taken inside a caller's transaction that could roll it back or hold it open. Reads may
  run anywhere.

No advisory locks: they do not survive PgBouncer transaction pooling and give no fencing token.

A holder stops acting ``QCLUSTER["LEASE_SAFETY_SECONDS"]`` before expiry (``is_leader``), so it
has stopped before anyone else can take the lease, even with some clock-rate drift between the
database and the holder's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import (
    BooleanField,
    Case,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    Q,
    Value,
    When,
)
from django.db.models.functions import Now

from qcluster import identity
from qcluster.conf import cluster_settings
from qcluster.models import LEASE_NAME_MAX_LENGTH, NODE_ID_MAX_LENGTH, ClusterLease

#: The lease held by the node that runs the sweep.
SWEEPER_LEASE = "cluster-sweeper"


@dataclass(frozen=True)
class Lease:
    holder_node_id: str
    expires_at: datetime
    version: int


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("A lease name must be a non-empty string.")
    if len(name) > LEASE_NAME_MAX_LENGTH:
        raise ValueError(
            f"A lease name is at most {LEASE_NAME_MAX_LENGTH} characters, got {len(name)}."
        )
    return name


def _check_node(node_id: str) -> str:
    if not node_id or len(node_id) > NODE_ID_MAX_LENGTH:
        raise ValueError(f"A node id is 1 to {NODE_ID_MAX_LENGTH} characters, got {node_id!r}.")
    return node_id


def _ttl(ttl: timedelta | float | int) -> timedelta:
    if not isinstance(ttl, timedelta):
        ttl = timedelta(seconds=ttl)
    if ttl.total_seconds() <= 0:
        raise ValueError(f"A lease ttl must be positive, got {ttl}.")
    return ttl


def _now_plus(delta: timedelta):
    """``now() + delta`` on the database clock."""
    return ExpressionWrapper(Now() + Value(delta), output_field=DateTimeField())


def _now_minus(delta: timedelta):
    """``now() - delta`` on the database clock."""
    return ExpressionWrapper(Now() - Value(delta), output_field=DateTimeField())


def _free_or_mine(node_id: str) -> Q:
    return Q(expires_at__lt=Now()) | Q(holder_node_id=node_id) | Q(holder_node_id__isnull=True)


def _outside_transactions() -> None:
    """``RuntimeError`` inside the caller's ``transaction.atomic()``, as every change of a lease
    raises there (Django's check of a durable block), tested before the lease is read so that
    the answer never depends on who holds it. An empty block: psycopg sends nothing for it."""
    with transaction.atomic(durable=True):
        pass


def _held_since(changes_holder: Q) -> Case:
    """``acquired_at`` as a take or renewal leaves it: now when the holder changes or the lease
    had expired (held again after a break), else as it was."""
    broken = Q(expires_at__lt=Now()) | Q(expires_at__isnull=True)
    return Case(When(changes_holder | broken, then=Now()), default=F("acquired_at"))


class LeaseClient:
    """The lease operations on behalf of one node (``leases.as_node(node_id)``)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = _check_node(node_id)

    def __repr__(self) -> str:
        return f"<LeaseClient node={self.node_id}>"

    def try_acquire(self, name: str, ttl: timedelta | float) -> int:
        """Take or extend the lease; return the fencing token (new ``version``), or 0.

        Succeeds when the lease is free, expired, or already ours.
        """
        name, ttl = _check_name(name), _ttl(ttl)
        _outside_transactions()
        me = self.node_id
        # Read the version to compare-and-set, and (database clock) whether the UPDATE can match
        # at all: a live lease of another node costs one SELECT, not a doomed UPDATE too.
        takeable = ExpressionWrapper(_free_or_mine(me), output_field=BooleanField())
        current = ClusterLease.objects.filter(name=name).annotate(takeable=takeable)
        row = current.values_list("version", "takeable").first()
        if row is None:
            with transaction.atomic(durable=True):
                ClusterLease.objects.bulk_create(
                    [ClusterLease(name=name, holder_node_id=None, version=0)],
                    ignore_conflicts=True,
                )
            row = current.values_list("version", "takeable").get()
        seen, takeable_now = row
        if not takeable_now:
            return 0
        changes_holder = Q(holder_node_id__isnull=True) | ~Q(holder_node_id=me)
        with transaction.atomic(durable=True):
            updated = (
                ClusterLease.objects.filter(name=name, version=seen)
                .filter(_free_or_mine(me))
                .update(
                    holder_node_id=me,
                    acquired_at=_held_since(changes_holder),
                    transitions=Case(
                        When(changes_holder, then=F("transitions") + 1),
                        default=F("transitions"),
                    ),
                    renewed_at=Now(),
                    expires_at=_now_plus(ttl),
                    version=F("version") + 1,
                )
            )
        return seen + 1 if updated else 0

    def renew(self, name: str, ttl: timedelta | float) -> int:
        """Extend a lease this node holds; return the new fencing token, or 0 if not the holder.

        A lease that expired is renewed only if nobody took it meanwhile.
        """
        name, ttl = _check_name(name), _ttl(ttl)
        _outside_transactions()
        seen = (
            ClusterLease.objects.filter(name=name, holder_node_id=self.node_id)
            .values_list("version", flat=True)
            .first()
        )
        if seen is None:
            return 0
        with transaction.atomic(durable=True):
            updated = ClusterLease.objects.filter(
                name=name, version=seen, holder_node_id=self.node_id
            ).update(
                renewed_at=Now(),
                acquired_at=_held_since(Q()),
                expires_at=_now_plus(ttl),
                version=F("version") + 1,
            )
        return seen + 1 if updated else 0

    def release(self, name: str) -> bool:
        """Give the lease up at once (only the holder can); True if this node held it."""
        name = _check_name(name)
        with transaction.atomic(durable=True):
            updated = ClusterLease.objects.filter(name=name, holder_node_id=self.node_id).update(
                holder_node_id=None,
                expires_at=Now(),
                version=F("version") + 1,
                transitions=F("transitions") + 1,
            )
        return bool(updated)

    def release_all(self) -> list[str]:
        """Give up every lease this node holds (when it drains); returns their names."""
        return release_all_held_by(self.node_id)

    def held_continuously_for(self, name: str, duration: timedelta | float) -> bool:
        """True if this node has held the lease without a break for at least ``duration``.

        On the database clock (``acquired_at`` moves when the holder changes, and when its own
        lease is taken again or renewed after it expired), so a process without history of its
        own (``cluster_runtime --once``) can tell how long its node has held a lease.
        """
        name = _check_name(name)
        if not isinstance(duration, timedelta):
            duration = timedelta(seconds=duration)
        return ClusterLease.objects.filter(
            name=name, holder_node_id=self.node_id, acquired_at__lte=_now_minus(duration)
        ).exists()

    def is_leader(self, name: str) -> bool:
        """True while this node holds the lease with more than the safety margin left."""
        name = _check_name(name)
        margin = timedelta(seconds=cluster_settings.LEASE_SAFETY_SECONDS)
        return ClusterLease.objects.filter(
            name=name, holder_node_id=self.node_id, expires_at__gt=_now_plus(margin)
        ).exists()


def holder(name: str) -> Lease | None:
    """Who holds the lease now (database clock), or None when it is free or expired."""
    name = _check_name(name)
    row = (
        ClusterLease.objects.filter(name=name, holder_node_id__isnull=False, expires_at__gt=Now())
        .values_list("holder_node_id", "expires_at", "version")
        .first()
    )
    return Lease(*row) if row else None


def holders() -> dict[str, str | None]:
    """Every lease row's current holder (database clock), None when it is free or expired."""
    live = Q(holder_node_id__isnull=False, expires_at__gt=Now())
    rows = ClusterLease.objects.annotate(
        live=ExpressionWrapper(live, output_field=BooleanField())
    ).values_list("name", "holder_node_id", "live")
    return {name: holder if is_live else None for name, holder, is_live in rows}


def fence(name: str, token: int) -> Exists:
    """A condition true only while ``token`` is still the lease's current, unexpired version.

    Use it in the write that must not happen after the lease changed hands::

        Report.objects.filter(pk=pk).filter(leases.fence("reports", token)).update(...)
    """
    name = _check_name(name)
    return Exists(ClusterLease.objects.filter(name=name, version=token, expires_at__gt=Now()))


def release_all_held_by(node_id: str) -> list[str]:
    """Release every lease ``node_id`` holds (its drain, or the sweeper after it is lost).

    Not durable: the sweeper runs it inside the transaction that marks the node LOST, so the
    LOST transition and the release commit together (a crash between them cannot strand a lease).
    """
    with transaction.atomic():
        names = list(
            ClusterLease.objects.select_for_update()
            .filter(holder_node_id=node_id)
            .values_list("name", flat=True)
        )
        ClusterLease.objects.filter(name__in=names, holder_node_id=node_id).update(
            holder_node_id=None,
            expires_at=Now(),
            version=F("version") + 1,
            transitions=F("transitions") + 1,
        )
    return names


def hand_over_problem(holder_node_id: str | None, expires_at: datetime | None) -> str:
    """Why an operator's hand-over cannot be made, or ``""``: a lease given to a holder needs an
    expiry (a holder with none would hold it for ever, and nobody could take it over)."""
    if holder_node_id and expires_at is None:
        return "A lease given to a holder needs an expiry (leave the holder empty to free it)."
    return ""


def force_hand_over(name: str, holder_node_id: str | None, expires_at: datetime | None) -> int:
    """An operator's edit (admin): set holder and expiry as given, bumping ``version``.

    Returns the new version. The holder change is counted in ``transitions``. Not durable: it
    commits with the admin's own transaction around the edit. A holder without an expiry is
    refused (``ValueError``, :func:`hand_over_problem`): no node could ever take the lease.
    """
    name = _check_name(name)
    problem = hand_over_problem(holder_node_id, expires_at)
    if problem:
        raise ValueError(problem)
    with transaction.atomic():
        lease, _ = ClusterLease.objects.select_for_update().get_or_create(name=name)
        changed = lease.holder_node_id != holder_node_id
        ClusterLease.objects.filter(name=name).update(
            holder_node_id=holder_node_id or None,
            expires_at=expires_at,
            acquired_at=Now() if changed else F("acquired_at"),
            version=F("version") + 1,
            transitions=F("transitions") + (1 if changed else 0),
        )
        return lease.version + 1


def as_node(node_id: str) -> LeaseClient:
    """The lease operations on behalf of ``node_id`` (tests, tools, the runtime's --node-id)."""
    return LeaseClient(node_id)


def _me() -> LeaseClient:
    return LeaseClient(identity.node_id())


def try_acquire(name: str, ttl: timedelta | float) -> int:
    """Take or extend the lease for this node; the fencing token, or 0. See ``LeaseClient``."""
    return _me().try_acquire(name, ttl)


def renew(name: str, ttl: timedelta | float) -> int:
    return _me().renew(name, ttl)


def release(name: str) -> bool:
    return _me().release(name)


def is_leader(name: str) -> bool:
    return _me().is_leader(name)
