"""The sender's side of the webhook outbox: taking due deliveries and recording each attempt.
With :mod:`qprint.webhooks.outbox` (where deliveries are written with the change they announce) it
is the one owner of ``qprint_webhook_delivery``'s delivery columns; apart from it because this is
the half the sender (:mod:`qprint.webhooks.sender`) runs, the other the half the domain calls.

Invariants (numbered as in :mod:`qprint.webhooks.outbox`):

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
``delivered_at`` of a delivery taken here, nor ``backoff_until`` and ``slow_attempts`` of an
endpoint.
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Count, F, Min, Q, Value, When
from django.db.models.functions import Now
from django.utils import timezone

from qprint.core.conf import qprint_settings
from qprint.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from qprint.webhooks.outbox import UNDELIVERED

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
