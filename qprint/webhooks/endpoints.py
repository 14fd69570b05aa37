"""A tenant's webhook endpoints: made, listed, deleted, their secret rotated.

An endpoint's URL is checked when it is made (``qprint.webhooks.destinations``: https, a public
address unless allowed) and again before every delivery. Its secret is returned once, by
:func:`create_endpoint` and :func:`rotate_secret`; nothing reads it back out afterwards except the
sender. A rotation keeps the previous secret signing for :data:`ROTATION_OVERLAP` (both signatures
are sent), so receivers can switch without losing a delivery.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from qprint.core import inputs
from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid, NotFound, RateLimited
from qprint.models import WebhookDelivery, WebhookEndpoint
from qprint.webhooks import EVENT_TYPES, TEST_EVENT, destinations, outbox, signing

logger = logging.getLogger("qprint.webhooks")

#: How long the previous secret still signs after a rotation.
ROTATION_OVERLAP = timedelta(hours=24)
MAX_DESCRIPTION = 255


def _check_events(events: Any) -> list[str]:
    if events is None:
        return []
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise Invalid(message="'events' must be a list of event types.")
    unknown = sorted(set(events) - set(EVENT_TYPES))
    if unknown:
        raise Invalid(
            message=f"'events': unknown type {unknown[0]!r}; known: {', '.join(EVENT_TYPES)}."
        )
    return list(dict.fromkeys(events))


def create_endpoint(
    tenant: str, url: str, *, events: Any = None, description: Any = ""
) -> tuple[WebhookEndpoint, str]:
    """A new endpoint of ``tenant`` and its secret (shown once). :class:`Invalid` (422) for a
    URL that is refused, unknown event types or a bad description."""
    if not isinstance(tenant, str) or not tenant:
        raise Invalid(message="A webhook needs a tenant.")
    url = destinations.check_url(url)
    events = _check_events(events)
    description = inputs.text("description", description, MAX_DESCRIPTION)
    secret = signing.new_secret()
    limit = int(qprint_settings.WEBHOOK_MAX_ENDPOINTS_PER_TENANT)
    with transaction.atomic():
        # Two creations at once: the second waits for the first's rows, then counts them all.
        list(WebhookEndpoint.objects.select_for_update().filter(tenant=tenant).values_list("pk"))
        if WebhookEndpoint.objects.filter(tenant=tenant).count() >= limit:
            raise Invalid(
                inputs.TOO_MANY,
                f"A tenant may have {limit} webhooks; delete one first "
                "(QPRINT['WEBHOOK_MAX_ENDPOINTS_PER_TENANT']).",
            )
        endpoint = WebhookEndpoint.objects.create(
            tenant=tenant, url=url, events=events, description=description, secret=secret
        )
    endpoint.refresh_from_db(fields=["created_at"])
    logger.info(
        "webhook_created tenant=%s endpoint=%s url=%s",
        tenant,
        endpoint.pk,
        destinations.shown(url),
    )
    return endpoint, secret


def list_endpoints(tenant: str) -> list[WebhookEndpoint]:
    return list(WebhookEndpoint.objects.filter(tenant=tenant).order_by("created_at", "id"))


def get_endpoint(tenant: str | None, endpoint_id: uuid.UUID | str) -> WebhookEndpoint:
    """The endpoint ``endpoint_id`` of ``tenant`` (None: any tenant); :class:`NotFound`."""
    try:
        pk = uuid.UUID(str(endpoint_id))
    except ValueError:
        raise NotFound("not_found", "No such webhook.") from None
    queryset = WebhookEndpoint.objects.filter(pk=pk)
    if tenant is not None:
        queryset = queryset.filter(tenant=tenant)
    endpoint = queryset.first()
    if endpoint is None:
        raise NotFound("not_found", "No such webhook.")
    return endpoint


def delete_endpoint(endpoint: WebhookEndpoint) -> None:
    """Delete the endpoint and its deliveries (undelivered ones are not sent)."""
    endpoint.delete()
    logger.info("webhook_deleted tenant=%s endpoint=%s", endpoint.tenant, endpoint.pk)


def rotate_secret(endpoint: WebhookEndpoint, overlap: timedelta = ROTATION_OVERLAP) -> str:
    """A new secret for ``endpoint`` (shown once); the current one keeps signing for ``overlap``."""
    secret = signing.new_secret()
    with transaction.atomic():
        locked = WebhookEndpoint.objects.select_for_update(no_key=True).get(pk=endpoint.pk)
        WebhookEndpoint.objects.filter(pk=locked.pk).update(
            secret=secret,
            previous_secret=locked.secret,
            previous_secret_expires_at=Now() + overlap,
        )
    endpoint.refresh_from_db()
    logger.info("webhook_secret_rotated tenant=%s endpoint=%s", endpoint.tenant, endpoint.pk)
    return secret


#: The window of ``QPRINT["WEBHOOK_TESTS_PER_MINUTE"]``.
TEST_WINDOW = timedelta(minutes=1)


def send_test(endpoint: WebhookEndpoint) -> WebhookDelivery:
    """Queue a ``webhook.test`` delivery to ``endpoint``; :class:`RateLimited` (429) once its
    tenant asked for ``WEBHOOK_TESTS_PER_MINUTE`` of them in the last minute."""
    limit = int(qprint_settings.WEBHOOK_TESTS_PER_MINUTE)
    recent = WebhookDelivery.objects.filter(
        endpoint__tenant=endpoint.tenant, type=TEST_EVENT, created_at__gte=Now() - TEST_WINDOW
    )
    if recent.count() >= limit:
        raise RateLimited(
            int(TEST_WINDOW.total_seconds()),
            f"At most {limit} test deliveries a minute per tenant; retry later.",
        )
    return outbox.announce_test(endpoint)
