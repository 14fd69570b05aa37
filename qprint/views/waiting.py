"""``GET api/v1/jobs/<id>?wait=SECONDS&status=S``: answer when the job's status differs from ``S``
(default: its status when the request arrived) or after ``SECONDS`` (at most 30), whichever is
first. The answer is the job with its events, as without ``wait``. A job already in a final state
never moves again: it is answered at once. One key holds at most ``QPRINT["MAX_WAITS_PER_KEY"]``
waits at once on a node; more are answered ``429 too_many_waits``.

An async view, so a waiting request holds neither a thread nor a database connection: each
database read runs on a shared executor thread and gives its connection back at once. The wait
itself is an :class:`asyncio.Event` set by the job's after-commit notice
(``qprint.webhooks.notify``: in this process directly, from other nodes over the channel layer),
which a move sends only while someone waits on the job (:func:`qprint.domain.jobs.watch`),
with a re-read every ``QPRINT["JOB_WAIT_RECHECK_SECONDS"]``, so a lost notice (no Redis, an
outage) costs at most that much. The job is read after subscribing, so a change that commits
meanwhile is not missed. Without ``wait`` the request is served by the plain view as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import SyncToAsync, sync_to_async
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from qprint.core import executor
from qprint.core.conf import qprint_settings
from qprint.core.errors import QPrintError
from qprint.core.states import JobStatus, is_final
from qprint.domain import jobs
from qprint.models import ApplicationKey
from qprint.models.serializers import job_with_events
from qprint.views.application_api import job_detail_now
from qprint.views.http import application_endpoint, error_response, invalid, json_response
from qprint.webhooks import notify

MAX_WAIT_SECONDS = 30


@dataclass(frozen=True)
class Waiting:
    key_id: int
    tenant: str
    job_id: Any
    status: str
    seconds: float


#: Waits in flight in this process, per application key (see :func:`_holding_a_wait`).
_waits_in_flight: dict[int, int] = {}


@contextlib.contextmanager
def _holding_a_wait(key_id: int):
    """One of the key's ``MAX_WAITS_PER_KEY`` waits on this node, or ``None`` when all are taken:
    a key cannot hold a node's event loop and notice subscriptions with unbounded waits.
    (Counted and released on the event loop, with no await in between.)"""
    held = _waits_in_flight.get(key_id, 0)
    if held >= int(qprint_settings.MAX_WAITS_PER_KEY):
        yield None
        return
    _waits_in_flight[key_id] = held + 1
    try:
        yield key_id
    finally:
        left = _waits_in_flight.get(key_id, 1) - 1
        if left:
            _waits_in_flight[key_id] = left
        else:
            _waits_in_flight.pop(key_id, None)


def _wait_seconds(request: HttpRequest) -> float:
    raw = request.GET.get("wait", "")
    try:
        seconds = float(raw)
    except ValueError:
        raise invalid("wait", "must be a number of seconds") from None
    if not 0 <= seconds <= MAX_WAIT_SECONDS:
        raise invalid("wait", f"must be between 0 and {MAX_WAIT_SECONDS} seconds")
    return seconds


@application_endpoint("GET")
def _begin(request: HttpRequest, key: ApplicationKey, job_id: str) -> HttpResponse | Waiting:
    seconds = _wait_seconds(request)
    status = request.GET.get("status")  # "?status=" is no status: refused, not the default
    if status is not None and status not in JobStatus.values:
        raise invalid("status", f"must be one of {', '.join(JobStatus.values)}")
    job = jobs.get_job(key.tenant, job_id)
    if is_final(job.status):  # nothing left to wait for
        return json_response(job_with_events(job, jobs.events_of(job)))
    jobs.watch(job.pk, seconds)  # its moves now send their notice; then it is read again
    return Waiting(key.pk, key.tenant, job.pk, status or job.status, seconds)


def _answer_if_moved(waiting: Waiting) -> HttpResponse | None:
    """The answer when the job's status is no longer ``waiting.status`` (or the job is gone);
    None to keep waiting (a database error too: the final answer says what is wrong)."""
    try:
        job = jobs.get_job(waiting.tenant, waiting.job_id)
    except QPrintError as exc:
        return error_response(exc.code, exc.status, exc.message)
    except DatabaseError:
        return None
    if job.status == waiting.status:
        return None
    return json_response(job_with_events(job, jobs.events_of(job)))


def _release_request_thread() -> None:
    """Give back the thread Django parked for this request.

    Django serves each ASGI request inside an asgiref ``ThreadSensitiveContext``; the first
    thread-sensitive call of the request (the ``request_started`` receivers) makes it a one-thread
    executor that stays, idle, until the request ends: one parked thread per waiting request. We
    shut that executor down before waiting (its idle thread exits); a later thread-sensitive call
    of the same request (``request_finished``) makes a new one. Nothing thread-sensitive runs
    meanwhile: the waiting path's reads use the shared executor.
    """
    try:
        context = SyncToAsync.thread_sensitive_context.get(None)
        executor = SyncToAsync.context_to_thread_executor.pop(context, None) if context else None
    except (AttributeError, TypeError):  # another asgiref: keep the thread, lose nothing else
        return
    if executor is not None:
        executor.shutdown(wait=False)


def _giving_back_connection(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``func`` on a shared thread and close (give back to the pool) its connection."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        finally:
            connection.close()

    return sync_to_async(call, thread_sensitive=False)


@csrf_exempt
async def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    """The job with its events; with ``?wait=``, once its status moved or the time is up."""
    if "wait" not in request.GET:  # on the node's HTTP database threads, as the other hot views
        return await executor.http.run(job_detail_now, request, job_id=job_id)
    begun = await _giving_back_connection(_begin)(request, job_id=job_id)
    if isinstance(begun, HttpResponse):
        return begun
    with _holding_a_wait(begun.key_id) as held:
        if held is None:
            limit = qprint_settings.MAX_WAITS_PER_KEY
            return error_response(
                "too_many_waits",
                429,
                f"This key already has {limit} waits in flight on this node; retry shortly.",
                {"Retry-After": "1"},
            )
        return await _wait(request, job_id, begun)


async def _wait(request: HttpRequest, job_id: str, begun: Waiting) -> HttpResponse:
    _release_request_thread()
    deadline = time.monotonic() + begun.seconds
    recheck = float(qprint_settings.JOB_WAIT_RECHECK_SECONDS)
    key, group = notify.job_key(begun.job_id), notify.job_group(begun.job_id)
    async with notify.listening(key, group) as changed:
        while True:
            changed.clear()
            answer = await _giving_back_connection(_answer_if_moved)(begun)
            if answer is not None:
                return answer
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(recheck, remaining))
    return await _giving_back_connection(job_detail_now)(request, job_id=job_id)


job_detail.allowed_methods = ("GET",)  # read by the OpenAPI test
