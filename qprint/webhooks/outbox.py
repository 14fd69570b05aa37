"""The webhook outbox, where deliveries are announced: with :mod:`qprint.webhooks.outbox_taking`
(the sender's side: taking and recording attempts) the one owner of ``qprint_webhook_delivery``'s
delivery columns. Here: the rows written with the change they announce, the admin's retry, the
retention and the figures.

Invariants:

1. **Written with the change it announces.** A delivery row is inserted in the same transaction
   as the state change (a job's status, a device's connection record), by :func:`announce_job`
   and :func:`announcing_device` called from the code that makes the change. A crash after the
   commit loses nothing (the row is there); a rollback announces nothing (the row goes with it).
   The payload (the job object, the device summary) is built at write time, so it says what the
   transaction committed.
2. **Taken by one sender at a time, delivered at least once, fairly between tenants**: the
   sender's side, :mod:`qprint.webhooks.outbox_taking` (``take_due``, ``record_attempt``; its
   invariants 2 to 4).

Nothing else writes ``status``, ``attempts``, ``next_attempt_at``, ``locked_*``, ``last_*`` or
``delivered_at`` of a delivery (but :mod:`qprint.webhooks.outbox_taking`), nor ``backoff_until``
and ``slow_attempts`` of an endpoint. The admin's retry calls :func:`retry`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Exists, IntegerField, Min, Q
from django.db.models.functions import Now
from django.utils import timezone

from qprint.core.prepared import Param, PreparedQuery
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

UNDELIVERED = (DeliveryStatus.PENDING, DeliveryStatus.SENDING)


def new_event_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def _endpoints_wanting(tenant_filter: Q, event_type: str) -> list[WebhookEndpoint]:
    endpoints = WebhookEndpoint.objects.filter(tenant_filter).only("id", "events")
    return [e for e in endpoints if e.wants(event_type)]


#: The endpoints of a device's tenant: read by every connect and close of a socket (prepared,
#: :mod:`qprint.core.prepared`).
_DEVICE_TENANT_ENDPOINTS = PreparedQuery(
    lambda: WebhookEndpoint.objects.filter(
        tenant__in=Device.objects.filter(pk=Param("device", IntegerField())).values("tenant")[:1]
    ).only("id", "events")
)


def _device_endpoints_wanting(device_id: int, event_type: str) -> list[WebhookEndpoint]:
    return [e for e in _DEVICE_TENANT_ENDPOINTS.all(device=device_id) if e.wants(event_type)]


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


def announce_job(
    job_id: uuid.UUID, tenant: str, status: str, *, subscribed: bool = True, waited: bool = True
) -> None:
    """Inside the transaction that moved job ``job_id`` to ``status``: a delivery per endpoint of
    ``tenant`` that wants the matching event (``job.printed`` for PRINTED), and, when ``waited``
    (a ``?wait`` request watches the job: ``PrintJob.waited_until``, read by the statement that
    locked the job), the job's after-commit notice that wakes it.

    ``subscribed=False``: :func:`tenant_subscribed` said, in this transaction, that the tenant has
    no endpoint; nothing is read. Otherwise one indexed read when the tenant has no endpoint. An
    endpoint made while the transaction runs may miss this event."""
    if waited:
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
    if not _device_endpoints_wanting(device_id, event_type):
        yield lambda: None
        return
    announced: list[bool] = []
    with transaction.atomic():
        yield lambda: announced.append(True)
        if announced:
            endpoints = _device_endpoints_wanting(device_id, event_type)
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
