"""qprint's Prometheus metrics (names prefixed ``qprint_``), on ``prometheus_client``.

Two kinds of figures, kept apart so they do not mix (docs/OPERATIONS.md, "Metrics"):

- **Read from the database** at each scrape by :class:`DatabaseCollector`, the same on every node:
  live connections per node (connection rows whose lease has not expired, database clock), jobs
  by status, the oldest QUEUED job's age, devices offline that have queued jobs, the webhook
  outbox. Aggregate them with ``max`` across the nodes, never ``sum``.
- **This process only**, labelled ``node`` and ``pid``: the instruments below (claims and events
  by answer with their latency, submit -> PRINTED latency, wakeups delivered to sockets here and
  their latency, heartbeat reconciles, jobs finished), the webhook sender's attempts and latency,
  and the figures the realtime layer hands over with :func:`install` (sockets open, the bus's
  state and outages, the wakeup publisher's counters). Counters start at 0 with the process;
  ``sum(rate(...))`` across processes.

Every instrumentation point in a transport is one call into this module (``@metrics.measure_claim``,
``metrics.wakeup_handled(...)``); the domain imports nothing of it (import-linter): jobs finished
are counted by a receiver of ``qprint.signals.job_finished``. This module imports no transport and
not qcluster: :func:`install` (called by ``QPrintConfig.ready``) hands it the node id and the
realtime figures as callables and connects the receiver.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

#: The instruments of this process (the ``node``/``pid`` labels are added at exposition).
PROCESS = CollectorRegistry(auto_describe=True)
STARTED_AT = time.time()

_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_WAKE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_PRINT_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)

CLAIMS = Counter(
    "qprint_claims",
    "Claims answered here, by HTTP status and answer (assignment, nothing, or the error code), "
    "and path (http, or socket for the operation frames).",
    ["status", "answer", "path"],
    registry=PROCESS,
)
CLAIM_SECONDS = Histogram(
    "qprint_claim_duration_seconds",
    "Time spent answering a claim here (authentication included over HTTP), by path.",
    ["path"],
    buckets=_HTTP_BUCKETS,
    registry=PROCESS,
)
EVENTS = Counter(
    "qprint_events",
    "Device events answered here, by HTTP status and answer (created, replayed, or the error "
    "code), and path (http, or socket for the operation frames).",
    ["status", "answer", "path"],
    registry=PROCESS,
)
EVENT_SECONDS = Histogram(
    "qprint_event_duration_seconds",
    "Time spent answering a device event here (authentication included over HTTP), by path.",
    ["path"],
    buckets=_HTTP_BUCKETS,
    registry=PROCESS,
)
SUBMIT_TO_PRINTED = Histogram(
    "qprint_job_submit_to_printed_seconds",
    "From a job's submission to PRINTED (finished_at - created_at, database clock), observed by "
    "the process that recorded PRINTED.",
    buckets=_PRINT_BUCKETS,
    registry=PROCESS,
)
JOBS_FINISHED = Counter(
    "qprint_jobs_finished",
    "Jobs this process moved to a final status, by that status (counted after commit).",
    ["status"],
    registry=PROCESS,
)
WAKEUPS_DELIVERED = Counter(
    "qprint_wakeups_delivered",
    "Wakeups that reached a device socket of this process.",
    registry=PROCESS,
)
WAKE_SECONDS = Histogram(
    "qprint_wake_latency_seconds",
    "From the wakeup's publication (after the commit) to the wake frame sent by a socket of "
    "this process (wall clocks of two processes: their skew is included).",
    buckets=_WAKE_BUCKETS,
    registry=PROCESS,
)
RECONCILES = Counter(
    "qprint_heartbeat_reconciles",
    "Heartbeats (pings) answered here, by whether they found work no wakeup had announced "
    '(found_work="true": a wake frame was sent).',
    ["found_work"],
    registry=PROCESS,
)

CLOUDPRNT_REQUESTS = Counter(
    "qprint_cloudprnt_requests",
    "CloudPRNT requests answered here, by request (poll, job, confirm) and HTTP status, and for a "
    "poll whether a job was offered (answer: job, none, or the error code).",
    ["request", "status", "answer"],
    registry=PROCESS,
)
CLOUDPRNT_SECONDS = Histogram(
    "qprint_cloudprnt_duration_seconds",
    "Time spent answering a CloudPRNT request here (authentication included), by request.",
    ["request"],
    buckets=_HTTP_BUCKETS,
    registry=PROCESS,
)

# -- instrumentation points -----------------------------------------------------------------


def cloudprnt_answered(request: str, started: float, status: int, answer: str) -> None:
    """A CloudPRNT request was answered (the transport calls it once per request)."""
    CLOUDPRNT_REQUESTS.labels(request, str(status), answer).inc()
    CLOUDPRNT_SECONDS.labels(request).observe(time.perf_counter() - started)


def _answer_of(response: Any, answers: dict[int, str]) -> str:
    status = response.status_code
    if status in answers:
        return answers[status]
    try:
        return str(json.loads(response.content).get("error") or status)
    except (ValueError, AttributeError, TypeError):
        return str(status)


def _answered(counter: Counter, histogram: Histogram, answers: dict[int, str]):
    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        def observe(started: float, response: Any) -> Any:
            histogram.labels("http").observe(time.perf_counter() - started)
            counter.labels(str(response.status_code), _answer_of(response, answers), "http").inc()
            return response

        if inspect.iscoroutinefunction(view):  # an async view (``run_async=True``)

            @functools.wraps(view)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                return observe(started, await view(*args, **kwargs))

            return async_wrapper

        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            return observe(started, view(*args, **kwargs))

        return wrapper

    return decorator


_CLAIM_ANSWERS = {200: "assignment", 204: "nothing"}
_EVENT_ANSWERS = {201: "created", 200: "replayed"}
#: Decorates the claim view: counts its answers and observes how long each took.
measure_claim = _answered(CLAIMS, CLAIM_SECONDS, _CLAIM_ANSWERS)
#: Decorates the device event view: counts its answers and observes how long each took.
measure_event = _answered(EVENTS, EVENT_SECONDS, _EVENT_ANSWERS)

_SOCKET_OPERATIONS = {
    "claim": (CLAIMS, CLAIM_SECONDS, _CLAIM_ANSWERS),
    "event": (EVENTS, EVENT_SECONDS, _EVENT_ANSWERS),
}


def socket_operation_answered(operation: str, started: float, status: int, error: str) -> None:
    """A claim or event frame answered (``status`` as over HTTP; ``error``: the refusal's code),
    counted and timed like the HTTP path's, with ``path="socket"``; other operations are not."""
    if operation not in _SOCKET_OPERATIONS:
        return
    counter, histogram, answers = _SOCKET_OPERATIONS[operation]
    histogram.labels("socket").observe(time.perf_counter() - started)
    counter.labels(str(status), answers.get(status) or error or str(status), "socket").inc()


def job_finished(sender: Any, job: Any, status: str, **kwargs: Any) -> None:
    """Receiver of ``qprint.signals.job_finished`` (sent after commit, connected by
    :func:`install`): count the job, and observe submit -> PRINTED."""
    JOBS_FINISHED.labels(str(status)).inc()
    if status == "PRINTED" and job.created_at is not None and job.finished_at is not None:
        SUBMIT_TO_PRINTED.observe(max(0.0, (job.finished_at - job.created_at).total_seconds()))


def wakeup_handled(message: dict[str, Any], woke: bool | None) -> None:
    """A socket here handled a wakeup; ``woke`` says whether it sent a wake frame. The wakeup's
    ``sent_at`` is the publisher's wall clock when it published (after the commit)."""
    WAKEUPS_DELIVERED.inc()
    sent_at = message.get("sent_at")
    if woke and isinstance(sent_at, int | float):
        WAKE_SECONDS.observe(max(0.0, time.time() - sent_at))


def heartbeat_reconciled(found_work: bool | None) -> None:
    """A socket here answered a ping; ``found_work``: it sent a wake frame."""
    RECONCILES.labels("true" if found_work else "false").inc()


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
            "Wakeups handed to this process's sockets without a layer (in-memory layer).",
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
            "Wakeups waiting in this process's publisher queue.",
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
        from django.db.models import Count, DurationField, ExpressionWrapper, Min
        from django.db.models.functions import Now

        from qprint.core.states import JobStatus
        from qprint.domain import connection
        from qprint.models import Device, PrintJob
        from qprint.models.querysets import live_connection

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

        queued = PrintJob.objects.filter(status=JobStatus.QUEUED)
        age = queued.aggregate(
            age=ExpressionWrapper(Now() - Min("created_at"), output_field=DurationField())
        )["age"]
        oldest = GaugeMetricFamily(
            "qprint_oldest_queued_job_age_seconds",
            "Age of the oldest QUEUED job (database clock); 0 when none is queued.",
            value=max(0.0, age.total_seconds()) if age is not None else 0.0,
        )

        offline = (
            Device.objects.filter(enabled=True)
            .exclude(live_connection())
            .filter(pk__in=queued.values("device_id"))
            .count()
        )
        offline_family = GaugeMetricFamily(
            "qprint_devices_offline_with_queued_jobs",
            "Enabled devices without a live connection that have QUEUED jobs.",
            value=offline,
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
