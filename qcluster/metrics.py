"""qcluster's Prometheus metrics (names prefixed ``qcluster_``), on ``prometheus_client``.

Everything here is read from the database at each scrape by :class:`ClusterCollector`, so any
node answers for the whole cluster and every node answers the same: aggregate across nodes with
``max``, never ``sum`` (docs/OPERATIONS.md, "Metrics").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from qcluster import alerts, leases, overview, tasks
from qcluster.models import LIVE_STATUSES, ClusterLease, ClusterNode


def known_leases() -> list[str]:
    """The leases this code base takes: the sweeper's and one per registered singleton task."""
    return [leases.SWEEPER_LEASE, *(task.lease_name for task in tasks.registered())]


class CachedCollector(Collector):
    """``collector``'s families, collected at most once per ``seconds`` (a callable, read at each
    scrape, so a setting can change it; 0: every scrape): a scrape storm costs the database one
    collection per period, however many scrapes come. One scrape collects while the others of
    the same moment wait for it and reuse its answer."""

    def __init__(self, collector: Collector, seconds: Callable[[], float]) -> None:
        self.collector = collector
        self.seconds = seconds
        self.lock = threading.Lock()
        self.families: list[Metric] | None = None
        self.collected_at = 0.0

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        with self.lock:
            period = float(self.seconds())
            fresh = time.monotonic() - self.collected_at < period
            if self.families is None or not fresh:
                self.families = list(self.collector.collect())
                self.collected_at = time.monotonic()
            return self.families


class ClusterCollector(Collector):
    """The cluster's figures, read from the database at each scrape."""

    def describe(self) -> list[Metric]:
        return []  # no query when a registry registers it

    def collect(self) -> list[Metric]:
        nodes = GaugeMetricFamily(
            "qcluster_nodes", "Nodes of the cluster by status.", labels=["status"]
        )
        for status, count in overview.nodes_by_status().items():
            nodes.add_metric([status], count)

        connections = GaugeMetricFamily(
            "qcluster_node_connections",
            "Realtime connections each live node reports.",
            labels=["node"],
        )
        running = GaugeMetricFamily(
            "qcluster_node_running_tasks",
            "Singleton tasks running on each live node.",
            labels=["node"],
        )
        live = ClusterNode.objects.filter(status__in=LIVE_STATUSES).values_list(
            "node_id", "connections", "running_tasks"
        )
        for node_id, count, tasks_running in live:
            connections.add_metric([node_id], count)
            running.add_metric([node_id], tasks_running)

        unacknowledged = GaugeMetricFamily(
            "qcluster_alerts_unacknowledged",
            "Alerts waiting for an operator.",
            value=alerts.unacknowledged_count(),
        )
        open_alerts = GaugeMetricFamily(
            "qcluster_alerts_open",
            "Alerts waiting for an operator, by code (cluster.node.lost, ...).",
            labels=["code"],
        )
        by_code = {alerts.NODE_LOST: 0, alerts.MASS_LOST_SUSPECTED: 0, **alerts.open_by_code()}
        for code, count in sorted(by_code.items()):
            open_alerts.add_metric([code], count)

        remaining = GaugeMetricFamily(
            "qcluster_lease_remaining_seconds",
            "Time left on each held lease (database clock).",
            labels=["lease", "holder"],
        )
        versions = GaugeMetricFamily(
            "qcluster_lease_version",
            "Current version (fencing token) of each held lease.",
            labels=["lease", "holder"],
        )
        left = ExpressionWrapper(F("expires_at") - Now(), output_field=DurationField())
        held_rows = (
            ClusterLease.objects.filter(holder_node_id__isnull=False)
            .annotate(left=left)
            .values_list("name", "holder_node_id", "left", "version")
        )
        for name, holder, seconds_left, version in held_rows:
            seconds = max(0.0, seconds_left.total_seconds()) if seconds_left is not None else 0.0
            remaining.add_metric([name, holder], seconds)
            versions.add_metric([name, holder], version)

        held = GaugeMetricFamily(
            "qcluster_lease_held",
            "1 while a node holds the lease (unexpired, database clock), else 0; every lease "
            "row and every lease this code base takes (the sweeper's, each singleton task's).",
            labels=["lease"],
        )
        holders = {name: None for name in known_leases()} | leases.holders()
        for name, holder in sorted(holders.items()):
            held.add_metric([name], 1 if holder else 0)
        return [nodes, connections, running, unacknowledged, open_alerts, remaining, versions, held]


def registry() -> CollectorRegistry:
    """A registry of qcluster's figures, for one exposition (``/metrics``)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ClusterCollector())
    return reg


def render() -> str:
    """qcluster's figures in the Prometheus text format."""
    return generate_latest(registry()).decode()
