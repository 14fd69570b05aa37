"""The exposition of qprint's figures: :class:`DatabaseCollector` (read from the database at each
scrape, the same on every node) and :class:`ProcessCollector` (this process's instruments and the
realtime figures handed over by :func:`install`), and :func:`render` for one scrape.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from qprint.metrics.instruments import PROCESS, STARTED_AT, job_finished

# -- exposition -------------------------------------------------------------------------------

#: The figures of the realtime layer and this process's node id (set by :func:`install`).
_FIGURES: dict[str, Callable[[], Any]] = {}
_node_id: Callable[[], str] = str
_in_default_registry = False


def install(node_id: Callable[[], str], **figures: Callable[[], Any]) -> None:
    """Give the exposition this process's node id and the realtime layer's figures.

    ``figures``: ``sockets_open``, ``bus_up``, ``bus_outages``, ``wake_queue_depth`` (numbers) and
    ``wakeup_counters`` (an object with ``published``, ``delivered_locally``,
    ``dropped_queue_full``, ``dropped_layer_error``), each a callable read at scrape time.
    """
    from qprint import signals

    global _node_id
    _node_id = node_id
    _FIGURES.clear()
    _FIGURES.update(figures)
    signals.job_finished.connect(job_finished, dispatch_uid="qprint.metrics.job_finished")
    # A process that serves prometheus_client's default registry (``cluster_runtime
    # --metrics-port``: the webhook sender, the expiry task) exports this process's figures too.
    global _in_default_registry
    if not _in_default_registry:
        from prometheus_client import REGISTRY

        REGISTRY.register(ProcessCollector())
        _in_default_registry = True


def _figure(name: str, default: Any = 0) -> Any:
    func = _FIGURES.get(name)
    return func() if func is not None else default


class _NoWakeupCounters:
    published = delivered_locally = dropped_queue_full = dropped_layer_error = 0


class ProcessCollector(Collector):
    """This process's instruments and realtime figures, labelled with its node and pid."""

    def describe(self) -> list[Metric]:
        return []  # nothing is read when a registry registers it

    def collect(self) -> list[Metric]:
        here = {"node": _node_id(), "pid": str(os.getpid())}
        names, values = list(here), list(here.values())
        families: list[Metric] = []

        def gauge(name: str, help_text: str, value: float) -> None:
            family = GaugeMetricFamily(name, help_text, labels=names)
            family.add_metric(values, value)
            families.append(family)

        def counter(name: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
            keys = names + (list(samples[0][0]) if samples else [])
            family = CounterMetricFamily(name, help_text, labels=keys)
            for labels, value in samples:
                family.add_metric(values + list(labels.values()), value, created=STARTED_AT)
            families.append(family)

        gauge(
            "qprint_sockets_open", "Device sockets open in this process.", _figure("sockets_open")
        )
        gauge(
            "qprint_bus_up",
            "1 while this process's channel-layer probe passes.",
            int(bool(_figure("bus_up", True))),
        )
        counter(
            "qprint_bus_outages", "Channel-layer outages seen here.", [({}, _figure("bus_outages"))]
        )
        wake = _figure("wakeup_counters", None) or _NoWakeupCounters()
        counter(
            "qprint_wakeups_published",
            "Wakeups this process sent to the channel layer.",
            [({}, wake.published)],
        )
        counter(
            "qprint_wakeups_delivered_locally",
            "Wakeups handed to this process's own sockets at once: without a layer (in-memory "
            "layer), or ahead of their copy through it.",
            [({}, wake.delivered_locally)],
        )
        counter(
            "qprint_wakeups_dropped",
            "Wakeups dropped here (the next heartbeat finds what they would have said).",
            [
                ({"cause": "queue_full"}, wake.dropped_queue_full),
                ({"cause": "layer_error"}, wake.dropped_layer_error),
            ],
        )
        gauge(
            "qprint_wake_queue_depth",
            "Wakeups and notices waiting in this process's publisher queue.",
            _figure("wake_queue_depth"),
        )
        families += _webhook_sender_families(names, values)
        for family in PROCESS.collect():
            family.samples = [
                sample._replace(labels={**here, **sample.labels}) for sample in family.samples
            ]
            families.append(family)
        return families


def _webhook_sender_families(names: list[str], values: list[str]) -> list[Metric]:
    """This process's webhook sender (docs/WEBHOOKS.md): attempts by outcome, and the latency from
    the event to the receiver's 2xx (its own cumulative buckets)."""
    from qprint.webhooks import sender

    sent = sender.figures
    with sent.lock:
        attempts = dict(sent.attempts)
        buckets, count, total = list(sent.latency_buckets), sent.latency_count, sent.latency_sum
    attempts_family = CounterMetricFamily(
        "qprint_webhook_attempts",
        "Webhook delivery attempts of this process by outcome.",
        labels=[*names, "outcome"],
    )
    for outcome, n in sorted(attempts.items()):
        attempts_family.add_metric([*values, outcome], n, created=STARTED_AT)
    latency = HistogramMetricFamily(
        "qprint_webhook_delivery_latency_seconds",
        "From the event (the outbox row) to the receiver's 2xx answer.",
        labels=names,
    )
    bounds = [(str(bound), n) for bound, n in zip(sender.LATENCY_BUCKETS, buckets, strict=True)]
    latency.add_metric(values, [*bounds, ("+Inf", count)], sum_value=total)
    return [attempts_family, latency]


class DatabaseCollector(Collector):
    """Figures read from the database at each scrape: the same on every node."""

    def describe(self) -> list[Metric]:
        return []  # no query when a registry registers it

    def collect(self) -> list[Metric]:
        from django.db.models import Count

        from qprint.core.states import JobStatus
        from qprint.domain import connection, overview
        from qprint.models import PrintJob

        connections = GaugeMetricFamily(
            "qprint_device_connections",
            "Live device connections (lease not expired, database clock) by the node holding them.",
            labels=["node"],
        )
        for node, count in sorted(connection.live_connections_by_node().items()):
            connections.add_metric([node or ""], count)

        jobs = GaugeMetricFamily("qprint_jobs", "Print jobs by status.", labels=["status"])
        by_status = dict(PrintJob.objects.values_list("status").annotate(n=Count("id")).order_by())
        for status in JobStatus.values:
            jobs.add_metric([status], by_status.get(status, 0))

        # The print overview's own definitions (docs/ADMIN.md): one figure, one definition.
        oldest_job = overview.oldest_queued_job()
        oldest = GaugeMetricFamily(
            "qprint_oldest_queued_job_age_seconds",
            "Age of the oldest QUEUED job (database clock); 0 when none is queued.",
            value=oldest_job["age_seconds"] if oldest_job is not None else 0.0,
        )
        offline_family = GaugeMetricFamily(
            "qprint_devices_offline_with_queued_jobs",
            "Devices (enabled or not) without a live connection that have QUEUED jobs.",
            value=overview.offline_with_queued_jobs().count(),
        )
        from qprint.webhooks import outbox

        figures = outbox.webhook_figures()
        deliveries = GaugeMetricFamily(
            "qprint_webhook_deliveries",
            "Webhook deliveries in the outbox by status.",
            labels=["status"],
        )
        for status, count in sorted(figures.by_status.items()):
            deliveries.add_metric([status], count)
        undelivered = GaugeMetricFamily(
            "qprint_webhook_oldest_undelivered_seconds",
            "Age of the oldest webhook delivery not yet delivered (0: none).",
            value=figures.oldest_undelivered_seconds,
        )
        from qprint.models import DeviceKind, DevicePrinter

        printers = GaugeMetricFamily(
            "qprint_cloudprnt_printers",
            "CloudPRNT printers by the state their last poll reported (idle, processing, "
            "stopped) and its status code (410: out of paper, 420: cover open, ...).",
            labels=["state", "code"],
        )
        states = (
            DevicePrinter.objects.filter(device__kind=DeviceKind.CLOUDPRNT)
            .values_list("status", "capabilities__status_code")
            .annotate(n=Count("id"))
            .order_by()
        )
        for state, code, count in sorted(states, key=lambda r: (r[0], str(r[1]))):
            printers.add_metric([state or "", str(code or "")], count)
        return [connections, jobs, oldest, offline_family, deliveries, undelivered, printers]


def registry() -> CollectorRegistry:
    """A registry of qprint's figures, for one exposition (``/metrics``)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(DatabaseCollector())
    reg.register(ProcessCollector())
    return reg


def render() -> str:
    """qprint's figures in the Prometheus text format."""
    from prometheus_client import generate_latest

    return generate_latest(registry()).decode()
