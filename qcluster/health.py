"""Health and readiness of this node, as the load balancer and the orchestrator see them.

- ``cluster.node.heartbeat``: UP while this node's heartbeat is within two intervals, DEGRADED when
  later, DOWN past ``lost_after_seconds`` (ages on the database clock). A node that has not
  registered yet (its ``cluster_runtime`` is still starting) is DEGRADED, not DOWN, so a liveness
  probe does not kill a pod that is only starting.
- ``database``: UP when the database answers, DOWN otherwise.

The overall status is the worst of the checks. Ready means: the database answers and the node is
neither DRAINING nor STOPPED (the load balancer must stop routing to it).
"""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now

from qcluster import nodes
from qcluster.models import ClusterNode, ClusterSetting, NodeStatus

UP, DEGRADED, DOWN = "UP", "DEGRADED", "DOWN"
_RANK = {UP: 0, DEGRADED: 1, DOWN: 2}
NOT_READY_STATUSES = (NodeStatus.DRAINING, NodeStatus.STOPPED)


def _heartbeat_check(node_id: str) -> dict:
    config = ClusterSetting.objects.load_config()
    row = (
        ClusterNode.objects.filter(node_id=node_id)
        .annotate(age=ExpressionWrapper(Now() - F("heartbeat_at"), output_field=DurationField()))
        .values("status", "age")
        .first()
    )
    detail = {
        "node": node_id,
        "heartbeat_seconds": config.heartbeat_seconds,
        "lost_after_seconds": config.lost_after_seconds,
    }
    if row is None or row["age"] is None:
        return {"status": DEGRADED, **detail, "reason": "node not registered yet"}
    age = max(0.0, row["age"].total_seconds())
    if age > config.lost_after_seconds:
        status = DOWN
    elif age > 2 * config.heartbeat_seconds:
        status = DEGRADED
    else:
        status = UP
    return {"status": status, **detail, "node_status": row["status"], "age_seconds": round(age, 3)}


def health(node_id: str) -> dict:
    """The report: ``{"status": UP|DEGRADED|DOWN, "checks": {name: {"status": ..., ...}}}``."""
    try:
        heartbeat = _heartbeat_check(node_id)
        database = {"status": UP, "vendor": connection.vendor}
    except DatabaseError as exc:
        error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        heartbeat = {"status": DOWN, "node": node_id, "reason": "database unavailable"}
        database = {"status": DOWN, "vendor": connection.vendor, "error": error}
    checks = {"cluster.node.heartbeat": heartbeat, "database": database}
    status = max((c["status"] for c in checks.values()), key=_RANK.__getitem__)
    return {"status": status, "checks": checks}


def readiness(node_id: str) -> dict:
    """``{"ready": bool, "node": ..., "node_status": ...}``; not ready while DRAINING/STOPPED."""
    try:
        status = nodes.node_status(node_id)
    except DatabaseError:
        return {"ready": False, "node": node_id, "reason": "database unavailable"}
    if status in NOT_READY_STATUSES:
        return {"ready": False, "node": node_id, "node_status": status, "reason": "draining"}
    return {"ready": True, "node": node_id, "node_status": status}
