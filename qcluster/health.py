"""Health and readiness of this node, as the load balancer and the orchestrator see them.

- ``cluster.node.heartbeat``: UP while this node's heartbeat is within two intervals, DEGRADED when
  later, DOWN past ``lost_after_seconds`` (ages on the database clock). A node that has not
  registered yet (its ``cluster_runtime`` is still starting) is DEGRADED, not DOWN, so a liveness
  probe does not kill a pod that is only starting.
- ``database``: UP when the database answers, DOWN otherwise.

Every check says why in words (``reason``); the report never carries a driver's error text (it is
public: a probe has no credentials), the node's log does. The overall status is the worst of the
checks, with the reasons of those that are not UP. Ready means: the database answers and the node is
neither DRAINING nor STOPPED (the load balancer must stop routing to it).
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, connection
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now

from qcluster import nodes
from qcluster.models import ClusterNode, ClusterSetting, NodeStatus

logger = logging.getLogger("qcluster.health")

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
        status, reason = DOWN, "no heartbeat for longer than lost_after_seconds: the node is lost"
    elif age > 2 * config.heartbeat_seconds:
        status, reason = DEGRADED, "heartbeat late (more than two intervals)"
    else:
        status, reason = UP, "heartbeat on time"
    return {
        "status": status,
        **detail,
        "node_status": row["status"],
        "age_seconds": round(age, 3),
        "reason": reason,
    }


def health(node_id: str) -> dict:
    """The report: ``{"status": UP|DEGRADED|DOWN, "reason": words, "checks": {name: {"status":
    ..., "reason": words, ...}}}``."""
    try:
        heartbeat = _heartbeat_check(node_id)
        database = {"status": UP, "vendor": connection.vendor, "reason": "the database answers"}
    except DatabaseError as exc:
        logger.warning("health_database_unavailable node=%s error=%s", node_id, exc)
        heartbeat = {"status": DOWN, "node": node_id, "reason": "unknown: the database is down"}
        database = {
            "status": DOWN,
            "vendor": connection.vendor,
            "reason": "the database does not answer",
        }
    checks = {"cluster.node.heartbeat": heartbeat, "database": database}
    status = max((c["status"] for c in checks.values()), key=_RANK.__getitem__)
    failing = [f"{name}: {c['reason']}" for name, c in checks.items() if c["status"] != UP]
    return {"status": status, "reason": "; ".join(failing) or "all checks pass", "checks": checks}


def readiness(node_id: str) -> dict:
    """``{"ready": bool, "node": ..., "node_status": ...}``; not ready while DRAINING/STOPPED."""
    try:
        status = nodes.node_status(node_id)
    except DatabaseError:
        return {"ready": False, "node": node_id, "reason": "database unavailable"}
    if status in NOT_READY_STATUSES:
        return {"ready": False, "node": node_id, "node_status": status, "reason": "draining"}
    return {"ready": True, "node": node_id, "node_status": status}
