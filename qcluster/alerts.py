"""Alerts for operators: rows in ``cluster_alert``, raised by the sweeper, acknowledged by staff."""

from __future__ import annotations

from django.db.models import Count
from django.db.models.functions import Now

from qcluster.models import ClusterAlert

NODE_LOST = "cluster.node.lost"
MASS_LOST_SUSPECTED = "cluster.mass_lost_suspected"


def raise_alert(code: str, message: str, node_id: str = "") -> ClusterAlert:
    """Record an alert (``raised_at`` is the database clock). Call it inside the transaction that
    made the change the alert is about, so both commit or neither does."""
    return ClusterAlert.objects.create(code=code, node_id=node_id, message=message)


def has_open(code: str) -> bool:
    """True while an alert with ``code`` waits for acknowledgement."""
    return ClusterAlert.objects.filter(code=code, acknowledged_at__isnull=True).exists()


def acknowledge(alert_ids: list[int], by: str) -> int:
    """Acknowledge the given alerts (those not acknowledged yet); returns how many."""
    return ClusterAlert.objects.filter(pk__in=alert_ids, acknowledged_at__isnull=True).update(
        acknowledged_at=Now(), acknowledged_by=by[:150]
    )


def unacknowledged_count() -> int:
    return ClusterAlert.objects.filter(acknowledged_at__isnull=True).count()


def open_by_code() -> dict[str, int]:
    """Alerts waiting for acknowledgement, by code."""
    rows = (
        ClusterAlert.objects.filter(acknowledged_at__isnull=True)
        .values_list("code")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return dict(rows)
