"""The predicates every reader of devices and jobs shares, written once as queryset methods.

- "The connection is live": the row names a connection whose lease has not expired, judged on the
  database clock (``connection_lease_expires_at > now()``): :meth:`DeviceQuerySet.live`,
  :meth:`DeviceQuerySet.with_liveness` (annotation ``connection_live``).
- "Queue depth": the device's QUEUED jobs: :meth:`DeviceQuerySet.with_queue_depth` (annotation
  ``queue_depth``), a correlated count evaluated for the rows read only (a join with ``GROUP BY``
  would count every device's jobs before a page is cut).
- "Claimable": a QUEUED job that has not expired: :meth:`PrintJobQuerySet.claimable`.

The guarded statements of the connection record are raw SQL (one round trip each); their copies of
the first and the last predicate are in :mod:`qprint.core.sql`, and
``tests/qprint/models/test_predicates.py`` pins that each copy agrees with its queryset.
"""

from __future__ import annotations

from django.db import models
from django.db.models import BooleanField, Count, ExpressionWrapper, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Now

from qprint.core.states import JobStatus


def live_connection() -> Q:
    """A device row whose connection lease is live (database clock)."""
    return Q(connection_id__isnull=False, connection_lease_expires_at__gt=Now())


def claimable_job() -> Q:
    """A job a claim may hand out: QUEUED and not past its ``expires_at`` (database clock)."""
    return Q(status=JobStatus.QUEUED) & (Q(expires_at__isnull=True) | Q(expires_at__gt=Now()))


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
        from qprint.models.jobs import PrintJob

        queued = (
            PrintJob.objects.filter(device=OuterRef("pk"), status=JobStatus.QUEUED)
            .order_by()
            .values("device")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return self.annotate(queue_depth=Coalesce(Subquery(queued), 0))

    def live_connections_by_node(self) -> dict[str, int]:
        """Live connections per node holding them (metrics, the ``connections`` gauge)."""
        rows = self.live().order_by().values_list("connection_node").annotate(n=Count("pk"))
        return {node: int(n) for node, n in rows}


class PrintJobQuerySet(models.QuerySet):
    def claimable(self) -> PrintJobQuerySet:
        """Jobs a claim may hand out, in claim order (priority first, then the oldest)."""
        return self.filter(claimable_job()).order_by("-priority", "created_at")
