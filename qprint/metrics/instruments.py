"""This process's instruments: counters and histograms of claims, events, submit -> PRINTED,
wakeups and heartbeat reconciles, and the one-call helpers the transports use to record them.
Exposed, with the ``node``/``pid`` labels, by :class:`qprint.metrics.collectors.ProcessCollector`.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

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


@functools.cache
def _labelled(metric: Counter | Histogram, *values: str) -> Any:
    """``metric.labels(*values)``, looked up once per label values: prometheus_client checks the
    values and takes a lock at every ``labels`` call, a few microseconds on each answer. The
    children are the metric's own for good (nothing here removes them), so a child kept here
    counts what ``labels`` would have returned."""
    return metric.labels(*values)


def cloudprnt_answered(request: str, started: float, status: int, answer: str) -> None:
    """A CloudPRNT request was answered (the transport calls it once per request)."""
    _labelled(CLOUDPRNT_REQUESTS, request, str(status), answer).inc()
    _labelled(CLOUDPRNT_SECONDS, request).observe(time.perf_counter() - started)


def _answer_of(response: Any, answers: dict[int, str]) -> str:
    status = response.status_code
    if status in answers:
        return answers[status]
    try:
        return str(json.loads(response.content).get("error") or status)
    except (ValueError, AttributeError, TypeError):
        return str(status)


#: The attribute of a response that answers several operations at once (a list of events):
#: their ``(status, error code)`` in order, counted one by one in place of the response's own.
SEVERAL_ANSWERS = "qprint_answers"


def _answered(counter: Counter, histogram: Histogram, answers: dict[int, str]):
    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        def observe(started: float, response: Any) -> Any:
            _labelled(histogram, "http").observe(time.perf_counter() - started)
            several = getattr(response, SEVERAL_ANSWERS, None)
            if several is None:
                several = [(response.status_code, _answer_of(response, answers))]
            for status, answer in several:
                _labelled(counter, str(status), answers.get(status) or answer, "http").inc()
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
    _labelled(histogram, "socket").observe(time.perf_counter() - started)
    _labelled(counter, str(status), answers.get(status) or error or str(status), "socket").inc()


def job_finished(sender: Any, job: Any, status: str, **kwargs: Any) -> None:
    """Receiver of ``qprint.signals.job_finished`` (sent after commit, connected by
    :func:`install`): count the job, and observe submit -> PRINTED."""
    _labelled(JOBS_FINISHED, str(status)).inc()
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
    _labelled(RECONCILES, "true" if found_work else "false").inc()
