"""The predicates every reader of devices and jobs shares, written once as queryset methods.

- "The connection is live": the row names a connection whose lease has not expired, judged on the
  database clock (``connection_lease_expires_at > now()``): :meth:`DeviceQuerySet.live`,
  :meth:`DeviceQuerySet.with_liveness` (annotation ``connection_live``).
- "Queue depth": the device's QUEUED jobs: :meth:`DeviceQuerySet.with_queue_depth` (annotation
  ``queue_depth``), a correlated count evaluated for the rows read only (a join with ``GROUP BY``
  would count every device's jobs before a page is cut).
- "Claimable": a QUEUED job that has not expired: :meth:`PrintJobQuerySet.claimable`.
- "Held": the job a device holds, CLAIMED (at most one per device, a partial unique constraint):
  :meth:`PrintJobQuerySet.held`.
- "Pending": a command not yet delivered to its device: :meth:`DeviceCommandQuerySet.pending`.

The guarded statements of the claim, the connection record and command delivery are raw SQL (one
round trip each); their copies of these predicates are in :mod:`qprint.models.raw`, and
``tests/qprint/models/test_predicates.py`` pins that each copy agrees with its queryset. A status
is written into the statement (:class:`qprint.core.sql.Literal`), as in the raw copies: bound as
a parameter, a prepared statement's generic plan could not use the partial indexes on it.
"""

from __future__ import annotations

from django.db import models
from django.db.models import BooleanField, Count, ExpressionWrapper, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Now

from qprint.core.sql import Literal
from qprint.core.states import CommandStatus, JobStatus


def live_connection() -> Q:
    """A device row whose connection lease is live (database clock)."""
    return Q(connection_id__isnull=False, connection_lease_expires_at__gt=Now())


def held_job() -> Q:
    """The job its device holds: CLAIMED, until a device event or the server moves it on."""
    return Q(status=Literal(JobStatus.CLAIMED.value))


def pending_command() -> Q:
    """A command not delivered to its device yet."""
    return Q(status=Literal(CommandStatus.PENDING.value))


def claimable_job() -> Q:
    """A job a claim may hand out: QUEUED and not past its ``expires_at`` (database clock)."""
    return Q(status=Literal(JobStatus.QUEUED.value)) & (
        Q(expires_at__isnull=True) | Q(expires_at__gt=Now())
    )


class DeviceQuerySet(models.QuerySet):
    def live(self) -> DeviceQuerySet:
        """Devices with a live connection."""
        return self.filter(live_connection())

    def with_liveness(self) -> DeviceQuerySet:
        """Annotate ``connection_live`` (bool) on each device."""
        return self.annotate(
            connection_live=ExpressionWrapper(live_connection(), output_field=BooleanField())
        )

    def with_queue_depth(self) -> DeviceQuerySet:
        """Annotate ``queue_depth``: the device's QUEUED jobs."""
        # The job model through the relation: qprint.models.jobs imports this module.
        jobs = self.model._meta.get_field("jobs").related_model
        queued = (
            jobs.objects.filter(device=OuterRef("pk"), status=Literal(JobStatus.QUEUED.value))
            .order_by()
            .values("device")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return self.annotate(queue_depth=Coalesce(Subquery(queued), 0))

    def for_summary(self) -> DeviceQuerySet:
        """Read as ``DeviceSummary.of`` needs: liveness and queue depth judged in SQL, printers
        prefetched."""
        return self.with_liveness().with_queue_depth().prefetch_related("printers")

    def live_connections_by_node(self) -> dict[str, int]:
        """Live connections per node holding them (metrics, the ``connections`` gauge)."""
        rows = self.live().order_by().values_list("connection_node").annotate(n=Count("pk"))
        return {node: int(n) for node, n in rows}


class PrintJobQuerySet(models.QuerySet):
    def claimable(self) -> PrintJobQuerySet:
        """Jobs a claim may hand out, in claim order (priority first, then the oldest)."""
        return self.filter(claimable_job()).order_by("-priority", "created_at")

    def held(self) -> PrintJobQuerySet:
        """The jobs their devices hold (CLAIMED): at most one per device."""
        return self.filter(held_job())


class DeviceCommandQuerySet(models.QuerySet):
    def pending(self) -> DeviceCommandQuerySet:
        """Commands not delivered to their device yet."""
        return self.filter(pending_command())
