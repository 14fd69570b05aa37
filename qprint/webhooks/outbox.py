"""The webhook outbox: the one owner of ``qprint_webhook_delivery``'s delivery columns.

Invariants:

1. **Written with the change it announces.** A delivery row is inserted in the same transaction
   as the state change (a job's status, a device's connection record), by :func:`announce_job`
   and :func:`announcing_device` called from the code that makes the change. A crash after the
   commit loses nothing (the row is there); a rollback announces nothing (the row goes with it).
   The payload (the job object, the device summary) is built at write time, so it says what the
   transaction committed.
2. **One sender at a time per row.** :func:`take_due` takes due rows with
   ``SELECT ... FOR UPDATE SKIP LOCKED`` (two nodes taking at once get different rows) and marks
   them SENDING under a lease of :data:`LEASE_SECONDS` named by a fresh ``locked_by`` token; the
   sender gives up on its attempt well before the lease ends (:data:`SEND_TIMEOUT_SECONDS`), so a
   row is never being sent by two nodes at the same moment. A sender that died leaves the row
   SENDING; it is due again when its lease expired.
3. **At least once.** A row leaves the outbox only by :func:`record_attempt` with a 2xx answer
   (DELIVERED) or after :data:`RETRY_FOR` of failed attempts (FAILED). Every other outcome
   reschedules it with exponential backoff and full jitter. The answer is recorded by a statement
   guarded by the taker's token, so a late sender cannot overwrite the row another one took over.
   A receiver drops a redelivery by its ``webhook-id`` (:attr:`WebhookDelivery.event_id`).

4. **Fair between tenants.** :func:`take_due` takes round-robin over the endpoints with due rows
   (oldest due first), never more than ``QPRINT["WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT"]`` rows of one
   endpoint nor ``QPRINT["WEBHOOK_MAX_IN_FLIGHT_PER_TENANT"]`` of one tenant SENDING at once
   (counted from the rows, so across the nodes; two nodes taking at the same moment may each
   allow the cap once), and nothing of an endpoint backed off for being slow: an attempt that
   held its slot longer than ``QPRINT["WEBHOOK_SLOW_SECONDS"]`` (a late answer, a timeout) holds
   the endpoint's next rows for :func:`slow_backoff_seconds`, doubling with each slow attempt in
   a row, until a fast attempt clears it. So a tenant whose receivers hang holds at most
   its own share of a sender's slots, and another tenant's delivery is taken at the next free
   slot.

Nothing else writes ``status``, ``attempts``, ``next_attempt_at``, ``locked_*``, ``last_*`` or
``delivered_at`` of a delivery, nor ``backoff_until`` and ``slow_attempts`` of an endpoint. The
admin's retry calls :func:`retry`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, Count, Exists, F, Min, Q, Value, When
from django.db.models.functions import Now
from django.utils import timezone

from qprint.core.conf import qprint_settings
from qprint.models import (
    DeliveryStatus,
    Device,
    DevicePrinter,
    PrintJob,
    WebhookDelivery,
    WebhookEndpoint,
)
from qprint.models.serializers import device_object, job_object, printer_object, timestamp
from qprint.models.summaries import DeviceSummary
from qprint.webhooks import DEVICE_PRINTER_STATE, TEST_EVENT, job_event_type, notify

logger = logging.getLogger("qprint.webhooks")

#: How long a taken row is reserved for its taker.
LEASE_SECONDS = 30
#: The longest one attempt may take (connect, send, answer), well inside the lease.
SEND_TIMEOUT_SECONDS = 10
#: Failed deliveries are retried for this long after the event, then marked FAILED.
RETRY_FOR = timedelta(days=3)
#: Backoff before attempt n+1: uniform in [0, min(MAX_BACKOFF, BASE * 2**(n-1))] seconds.
BACKOFF_BASE_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 3600.0
#: The part of a receiver's answer kept on the row.
ANSWER_CHARS = 1000
#: The longest a slow endpoint is held back after a slow attempt.
MAX_SLOW_BACKOFF_SECONDS = 60.0

UNDELIVERED = (DeliveryStatus.PENDING, DeliveryStatus.SENDING)


def new_event_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def _endpoints_wanting(tenant_filter: Q, event_type: str) -> list[WebhookEndpoint]:
    endpoints = WebhookEndpoint.objects.filter(tenant_filter).only("id", "events")
    return [e for e in endpoints if e.wants(event_type)]


def _insert(endpoints: list[WebhookEndpoint], event_type: str, data: dict[str, Any]) -> None:
    payload = {"type": event_type, "timestamp": timestamp(timezone.now()), "data": data}
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(endpoint_id=e.pk, event_id=new_event_id(), type=event_type, payload=payload)
        for e in endpoints
    )
    notify.deliveries_after_commit()


def tenant_subscribed(tenant: Any) -> Exists:
    """Whether ``tenant`` (a value or an ``OuterRef``) has any webhook endpoint: annotated on the
    statement that locks the row before a job moves (the claim's, the event's), so that a tenant
    without webhooks pays no read of its own for them (``announce_job(..., subscribed=...)``)."""
    return Exists(WebhookEndpoint.objects.filter(tenant=tenant))


def announce_job(job_id: uuid.UUID, tenant: str, status: str, *, subscribed: bool = True) -> None:
    """Inside the transaction that moved job ``job_id`` to ``status``: a delivery per endpoint of
    ``tenant`` that wants the matching event (``job.printed`` for PRINTED), and the job's
    after-commit notice (which wakes ``?wait`` requests).

    ``subscribed=False``: :func:`tenant_subscribed` said, in this transaction, that the tenant has
    no endpoint; nothing is read. Otherwise one indexed read when the tenant has no endpoint. An
    endpoint made while the transaction runs may miss this event."""
    notify.job_after_commit(job_id)
    event_type = job_event_type(status)
    if event_type is None or not subscribed:
        return
    endpoints = _endpoints_wanting(Q(tenant=tenant), event_type)
    if not endpoints:
        return
    job = PrintJob.objects.select_related("device").get(pk=job_id)
    _insert(endpoints, event_type, {"job": job_object(job)})


def _device_data(device_id: int) -> dict[str, Any]:
    return {
        "device": device_object(DeviceSummary.of(Device.objects.for_summary().get(pk=device_id)))
    }


def announce_printer_state(device_id: int, tenant: str, printer: DevicePrinter) -> None:
    """Inside the transaction that recorded a printer's new state: a ``device.printer_state``
    delivery per endpoint of ``tenant`` that wants it, ``{"device": ..., "printer": ...}``."""
    endpoints = _endpoints_wanting(Q(tenant=tenant), DEVICE_PRINTER_STATE)
    if endpoints:
        _insert(
            endpoints,
            DEVICE_PRINTER_STATE,
            {**_device_data(device_id), "printer": printer_object(printer)},
        )


@contextlib.contextmanager
def announcing_device(device_id: int, event_type: str) -> Iterator[Callable[[], None]]:
    """Around a connection-record statement: ``with announcing_device(id, type) as announce:``
    run the statement, then call ``announce()`` if it changed the row.

    When no endpoint of the device's tenant wants ``event_type`` (one indexed read), the block runs
    as it is (the statement stays alone in autocommit). Otherwise the statement and the delivery
    rows share one transaction. An endpoint made while the block runs may miss this event.
    """
    tenant = Device.objects.filter(pk=device_id).values("tenant")[:1]
    if not _endpoints_wanting(Q(tenant__in=tenant), event_type):
        yield lambda: None
        return
    announced: list[bool] = []
    with transaction.atomic():
        yield lambda: announced.append(True)
        if announced:
            endpoints = _endpoints_wanting(Q(tenant__in=tenant), event_type)
            if endpoints:
                _insert(endpoints, event_type, _device_data(device_id))


def announce_test(endpoint: WebhookEndpoint) -> WebhookDelivery:
    """A ``webhook.test`` delivery to ``endpoint`` (sent like any other)."""
    with transaction.atomic():
        delivery = WebhookDelivery.objects.create(
            endpoint=endpoint,
            event_id=new_event_id(),
            type=TEST_EVENT,
            payload={
                "type": TEST_EVENT,
                "timestamp": timestamp(timezone.now()),
                "data": {"webhook": {"id": str(endpoint.pk), "url": endpoint.url}},
            },
        )
        notify.deliveries_after_commit()
    delivery.refresh_from_db()
    return delivery


# --- the sender's side --------------------------------------------------------------------------


@dataclass(frozen=True)
class Due:
    """A delivery taken for one attempt."""

    id: int
    token: uuid.UUID
    endpoint_id: uuid.UUID
    event_id: str
    type: str
    body: str
    url: str
    keys: list[str]
    attempt: int
    created_at: datetime


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: an HTTP status and the start of the answer, or an error."""

    status_code: int | None = None
    answer: str = ""
    error: str = ""
    #: How long the attempt took (connect to answer).
    seconds: float = 0.0

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def slow(self) -> bool:
        """The attempt held its slot longer than ``WEBHOOK_SLOW_SECONDS`` (a late answer, a
        timeout): the endpoint is held back. A fast failure (connection refused, a 5xx) is not
        slow: the row's own backoff paces it."""
        return self.seconds > float(qprint_settings.WEBHOOK_SLOW_SECONDS)


def _due() -> Q:
    return Q(status__in=UNDELIVERED, next_attempt_at__lte=Now()) & (
        Q(locked_until__isnull=True) | Q(locked_until__lt=Now())
    )


def _keys(endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    keys = [endpoint.secret]
    expires = endpoint.previous_secret_expires_at
    if endpoint.previous_secret and expires is not None and expires > now:
        keys.append(endpoint.previous_secret)
    return keys


def _endpoint_ready() -> Q:
    return Q(endpoint__backoff_until__isnull=True) | Q(endpoint__backoff_until__lte=Now())


def _shares(limit: int) -> dict[uuid.UUID, int]:
    """How many rows of each endpoint this take may have: round-robin over the endpoints with due
    rows, oldest due first, within the per-endpoint and per-tenant caps of rows SENDING now."""
    per_endpoint = int(qprint_settings.WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT)
    per_tenant = int(qprint_settings.WEBHOOK_MAX_IN_FLIGHT_PER_TENANT)
    busy = (
        WebhookDelivery.objects.filter(status=DeliveryStatus.SENDING, locked_until__gte=Now())
        .values_list("endpoint_id", "endpoint__tenant")
        .annotate(n=Count("id"))
        .order_by()
    )
    endpoint_room: dict[uuid.UUID, int] = {}
    tenant_room: dict[str, int] = {}
    for endpoint_id, tenant, n in busy:
        endpoint_room[endpoint_id] = per_endpoint - n
        tenant_room[tenant] = tenant_room.get(tenant, per_tenant) - n
    full_endpoints = [e for e, room in endpoint_room.items() if room <= 0]
    full_tenants = [t for t, room in tenant_room.items() if room <= 0]
    waiting = list(
        WebhookDelivery.objects.filter(_due(), _endpoint_ready())
        .exclude(endpoint_id__in=full_endpoints)
        .exclude(endpoint__tenant__in=full_tenants)
        .values_list("endpoint_id", "endpoint__tenant")
        .annotate(first=Min("next_attempt_at"), n=Count("id"))
        .order_by("first")[: max(limit, 1) * 4]
    )
    shares: dict[uuid.UUID, int] = {}
    given = 0
    while given < limit:
        before = given
        for endpoint_id, tenant, _first, due_rows in waiting:
            share = shares.get(endpoint_id, 0)
            if (
                given < limit
                and share < due_rows
                and endpoint_room.get(endpoint_id, per_endpoint) > share
                and tenant_room.get(tenant, per_tenant) > 0
            ):
                shares[endpoint_id] = share + 1
                tenant_room[tenant] = tenant_room.get(tenant, per_tenant) - 1
                given += 1
        if given == before:
            break
    return shares


def take_due(limit: int) -> list[Due]:
    """Take up to ``limit`` due deliveries for one attempt each: fairly between endpoints and
    tenants (invariant 4), each endpoint's oldest due first."""
    if limit <= 0 or not WebhookDelivery.objects.filter(_due()).exists():
        return []  # the idle poll: one read, no transaction (no write lock on SQLite)
    token = uuid.uuid4()
    with transaction.atomic():
        ids: list[int] = []
        for endpoint_id, share in _shares(limit).items():
            ids += (
                WebhookDelivery.objects.select_for_update(skip_locked=True)
                .filter(_due(), endpoint_id=endpoint_id)
                .order_by("next_attempt_at", "id")
                .values_list("id", flat=True)[:share]
            )
        if not ids:
            return []
        WebhookDelivery.objects.filter(pk__in=ids).update(
            status=DeliveryStatus.SENDING,
            locked_by=token,
            locked_until=Now() + timedelta(seconds=LEASE_SECONDS),
            attempts=F("attempts") + 1,
            last_attempt_at=Now(),
        )
        rows = list(
            WebhookDelivery.objects.filter(pk__in=ids)
            .select_related("endpoint")
            .order_by("next_attempt_at", "id")
        )
    now = timezone.now()
    return [
        Due(
            id=row.pk,
            token=token,
            endpoint_id=row.endpoint_id,
            event_id=row.event_id,
            type=row.type,
            body=json.dumps(row.payload, separators=(",", ":")),
            url=row.endpoint.url,
            keys=_keys(row.endpoint, now),
            attempt=row.attempts,
            created_at=row.created_at,
        )
        for row in rows
    ]


def slow_backoff_seconds(slow_attempts: int) -> float:
    """How long an endpoint is held back after its ``slow_attempts``-th slow attempt in a row."""
    return min(MAX_SLOW_BACKOFF_SECONDS, float(2 ** min(slow_attempts - 1, 10)))


def _record_pace(due: Due, outcome: Outcome) -> None:
    """Hold a slow endpoint back (invariant 4); a fast answer lets it go again."""
    endpoint = WebhookEndpoint.objects.filter(pk=due.endpoint_id)
    if outcome.slow:
        with transaction.atomic():
            row = endpoint.select_for_update(no_key=True).values("slow_attempts").first()
            if row is None:
                return
            streak = row["slow_attempts"] + 1
            endpoint.update(
                slow_attempts=streak,
                backoff_until=Now() + timedelta(seconds=slow_backoff_seconds(streak)),
            )
        logger.info(
            "webhook_endpoint_slow endpoint=%s slow_attempts=%s seconds=%.1f",
            due.endpoint_id,
            streak,
            outcome.seconds,
        )
    else:
        endpoint.filter(slow_attempts__gt=0).update(slow_attempts=0, backoff_until=None)


def backoff_seconds(attempt: int) -> float:
    """Full jitter: a uniform pause up to the exponential bound of attempt ``attempt``."""
    bound = min(MAX_BACKOFF_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(attempt - 1, 30))
    return random.uniform(0, bound)


def record_attempt(due: Due, outcome: Outcome) -> bool:
    """Record what ``due``'s attempt got; False when the row is no longer this taker's."""
    common = {
        "locked_by": None,
        "locked_until": None,
        "last_status_code": outcome.status_code,
        "last_response": outcome.answer[:ANSWER_CHARS],
        "last_error": outcome.error[:ANSWER_CHARS],
    }
    rows = WebhookDelivery.objects.filter(pk=due.id, locked_by=due.token)
    if outcome.delivered:
        changed = rows.update(status=DeliveryStatus.DELIVERED, delivered_at=Now(), **common)
    else:
        changed = rows.update(
            status=Case(
                When(created_at__lt=Now() - RETRY_FOR, then=Value(DeliveryStatus.FAILED)),
                default=Value(DeliveryStatus.PENDING),
            ),
            next_attempt_at=Now() + timedelta(seconds=backoff_seconds(due.attempt)),
            **common,
        )
    if changed:
        _record_pace(due, outcome)
    if changed and not outcome.delivered:
        logger.info(
            "webhook_attempt_failed delivery=%s event=%s attempt=%s status=%s error=%s",
            due.id,
            due.event_id,
            due.attempt,
            outcome.status_code,
            outcome.error or "-",
        )
    return bool(changed)


def retry(delivery_ids: list[int]) -> int:
    """Send these deliveries again now (FAILED or waiting for a retry); returns how many."""
    with transaction.atomic():
        count = (
            WebhookDelivery.objects.filter(pk__in=delivery_ids)
            .filter(
                Q(status__in=[DeliveryStatus.FAILED, DeliveryStatus.PENDING])
                | Q(status=DeliveryStatus.SENDING, locked_until__lt=Now())
            )
            .update(
                status=DeliveryStatus.PENDING,
                next_attempt_at=Now(),
                locked_by=None,
                locked_until=None,
            )
        )
        if count:
            notify.deliveries_after_commit()
    return count


def delete_old_deliveries(retention_days: int | None = None) -> int:
    """Delete delivered and failed rows older than ``JOB_RETENTION_DAYS`` (the retention task)."""
    from qprint.core.conf import qprint_settings

    days = qprint_settings.JOB_RETENTION_DAYS if retention_days is None else retention_days
    count, _ = (
        WebhookDelivery.objects.filter(created_at__lt=Now() - timedelta(days=days))
        .exclude(status__in=UNDELIVERED)
        .delete()
    )
    return count


@dataclass(frozen=True)
class WebhookFigures:
    """What the outbox holds now (the same on every node)."""

    by_status: dict[str, int]
    oldest_undelivered_seconds: float


def webhook_figures() -> WebhookFigures:
    counts = dict(WebhookDelivery.objects.values_list("status").annotate(n=Count("id")).order_by())
    oldest = WebhookDelivery.objects.filter(status__in=UNDELIVERED).aggregate(t=Min("created_at"))[
        "t"
    ]
    age = max(0.0, (timezone.now() - oldest).total_seconds()) if oldest else 0.0
    return WebhookFigures(
        by_status={s: int(counts.get(s, 0)) for s in DeliveryStatus.values},
        oldest_undelivered_seconds=age,
    )
