"""Prometheus text lines of qcluster (names prefixed ``qcluster_``).

Read from the database, so any node answers for the whole cluster.
"""

from __future__ import annotations

from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now

from qcluster import alerts, overview
from qcluster.models import LIVE_STATUSES, ClusterLease, ClusterNode


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render() -> str:
    lines = [
        "# HELP qcluster_nodes Nodes of the cluster by status.",
        "# TYPE qcluster_nodes gauge",
    ]
    for status, count in overview.nodes_by_status().items():
        lines.append(f'qcluster_nodes{{status="{status}"}} {count}')
    lines += [
        "# HELP qcluster_node_connections Realtime connections each live node reports.",
        "# TYPE qcluster_node_connections gauge",
    ]
    live = ClusterNode.objects.filter(status__in=LIVE_STATUSES).values_list(
        "node_id", "connections", "running_tasks"
    )
    live = list(live)
    for node_id, connections, _running in live:
        lines.append(f'qcluster_node_connections{{node="{_label(node_id)}"}} {connections}')
    lines += [
        "# HELP qcluster_node_running_tasks Singleton tasks running on each live node.",
        "# TYPE qcluster_node_running_tasks gauge",
    ]
    for node_id, _connections, running in live:
        lines.append(f'qcluster_node_running_tasks{{node="{_label(node_id)}"}} {running}')
    lines += [
        "# HELP qcluster_alerts_unacknowledged Alerts waiting for an operator.",
        "# TYPE qcluster_alerts_unacknowledged gauge",
        f"qcluster_alerts_unacknowledged {alerts.unacknowledged_count()}",
        "# HELP qcluster_lease_remaining_seconds Time left on each held lease (database clock).",
        "# TYPE qcluster_lease_remaining_seconds gauge",
    ]
    remaining = ExpressionWrapper(F("expires_at") - Now(), output_field=DurationField())
    held = (
        ClusterLease.objects.filter(holder_node_id__isnull=False)
        .annotate(remaining=remaining)
        .values_list("name", "holder_node_id", "remaining", "version")
    )
    versions = []
    for name, holder, left, version in held:
        seconds = max(0.0, left.total_seconds()) if left is not None else 0.0
        labels = f'lease="{_label(name)}",holder="{_label(holder)}"'
        lines.append(f"qcluster_lease_remaining_seconds{{{labels}}} {seconds:.3f}")
        versions.append((labels, version))
    lines += [
        "# HELP qcluster_lease_version Current version (fencing token) of each held lease.",
        "# TYPE qcluster_lease_version gauge",
    ]
    lines += [f"qcluster_lease_version{{{labels}}} {version}" for labels, version in versions]
    return "\n".join(lines) + "\n"
