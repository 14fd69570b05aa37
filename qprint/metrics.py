"""Prometheus text lines of qprint (names prefixed ``qprint_``).

Two kinds of numbers, labelled so they do not mix:

- read from the database, the same on every node: live connections per node (the connection
  rows whose lease has not expired, database clock), jobs by status;
- this process only (label ``node`` and ``pid``): sockets open here, the bus's state and outages,
  and the wakeup publisher's counters (published, delivered locally, dropped by cause, queued).
  Prometheus sums them over the processes it scrapes.
"""

from __future__ import annotations

import os

from django.db.models import Count

from qprint import cluster
from qprint.domain import connection
from qprint.models import PrintJob
from qprint.realtime import bus, publisher


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def render() -> str:
    lines: list[str] = []
    _metric(
        lines,
        "qprint_device_connections",
        "gauge",
        "Live device connections (lease not expired) by the node holding them.",
    )
    for node, count in sorted(connection.live_connections_by_node().items()):
        lines.append(f'qprint_device_connections{{node="{_label(node)}"}} {count}')

    _metric(lines, "qprint_jobs", "gauge", "Print jobs by status.")
    by_status = PrintJob.objects.values_list("status").annotate(n=Count("id")).order_by()
    for status, count in sorted(by_status):
        lines.append(f'qprint_jobs{{status="{status}"}} {count}')

    here = f'node="{_label(cluster.node_id())}",pid="{os.getpid()}"'
    _metric(lines, "qprint_sockets_open", "gauge", "Device sockets open in this process.")
    lines.append(f"qprint_sockets_open{{{here}}} {bus.open_sockets()}")
    _metric(lines, "qprint_bus_up", "gauge", "1 while this process's channel-layer probe passes.")
    lines.append(f"qprint_bus_up{{{here}}} {int(bus.bus_up())}")
    _metric(lines, "qprint_bus_outages_total", "counter", "Channel-layer outages seen here.")
    lines.append(f"qprint_bus_outages_total{{{here}}} {sum(b.outages for b in bus.all_buses())}")

    installed = publisher.installed()
    counters = installed.counters if installed else publisher.PublisherCounters()
    _metric(lines, "qprint_wakeups_published_total", "counter", "Wakeups sent to the layer.")
    lines.append(f"qprint_wakeups_published_total{{{here}}} {counters.published}")
    _metric(
        lines,
        "qprint_wakeups_delivered_locally_total",
        "counter",
        "Wakeups handed to this process's sockets (in-memory layer).",
    )
    lines.append(f"qprint_wakeups_delivered_locally_total{{{here}}} {counters.delivered_locally}")
    _metric(
        lines,
        "qprint_wakeups_dropped_total",
        "counter",
        "Wakeups dropped (the next heartbeat finds what they would have said).",
    )
    lines.append(
        f'qprint_wakeups_dropped_total{{{here},cause="queue_full"}} {counters.dropped_queue_full}'
    )
    lines.append(
        f'qprint_wakeups_dropped_total{{{here},cause="layer_error"}} {counters.dropped_layer_error}'
    )
    _metric(lines, "qprint_wake_queue_depth", "gauge", "Wakeups waiting in the publisher's queue.")
    depth = installed.queue.qsize() if installed else 0
    lines.append(f"qprint_wake_queue_depth{{{here}}} {depth}")
    lines.extend(webhook_lines())
    return "\n".join(lines) + "\n"


def webhook_lines() -> list[str]:
    """The webhook outbox (database: rows by status, oldest undelivered) and this process's
    sender (attempts by outcome, latency from the event to the receiver's 2xx)."""
    from qprint.webhooks import outbox, sender

    lines: list[str] = []
    figures = outbox.webhook_figures()
    _metric(
        lines, "qprint_webhook_deliveries", "gauge", "Webhook deliveries in the outbox by status."
    )
    for status, count in sorted(figures.by_status.items()):
        lines.append(f'qprint_webhook_deliveries{{status="{status}"}} {count}')
    _metric(
        lines,
        "qprint_webhook_oldest_undelivered_seconds",
        "gauge",
        "Age of the oldest webhook delivery not yet delivered (0: none).",
    )
    lines.append(
        f"qprint_webhook_oldest_undelivered_seconds {figures.oldest_undelivered_seconds:.3f}"
    )

    here = f'node="{_label(cluster.node_id())}",pid="{os.getpid()}"'
    sent = sender.figures
    with sent.lock:
        attempts = dict(sent.attempts)
        buckets, count, total = list(sent.latency_buckets), sent.latency_count, sent.latency_sum
    _metric(
        lines, "qprint_webhook_attempts_total", "counter", "Webhook delivery attempts by outcome."
    )
    for outcome, n in sorted(attempts.items()):
        lines.append(f'qprint_webhook_attempts_total{{{here},outcome="{outcome}"}} {n}')
    _metric(
        lines,
        "qprint_webhook_delivery_latency_seconds",
        "histogram",
        "From the event (the outbox row) to the receiver's 2xx answer.",
    )
    for bound, n in zip(sender.LATENCY_BUCKETS, buckets, strict=True):
        lines.append(f'qprint_webhook_delivery_latency_seconds_bucket{{{here},le="{bound}"}} {n}')
    lines.append(f'qprint_webhook_delivery_latency_seconds_bucket{{{here},le="+Inf"}} {count}')
    lines.append(f"qprint_webhook_delivery_latency_seconds_sum{{{here}}} {total:.6f}")
    lines.append(f"qprint_webhook_delivery_latency_seconds_count{{{here}}} {count}")
    return lines
