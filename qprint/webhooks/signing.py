"""Webhook secrets and Standard Webhooks signatures.

A secret is ``whsec_`` + base64 of 24 random bytes (192 bits), the form the ``standardwebhooks``
libraries read. Signing uses that library (``Webhook.sign``: ``v1,`` + base64 HMAC-SHA256 of
``id.timestamp.body``), so what we send is what every receiver library verifies. During a
rotation's overlap both the new and the previous secret sign, space separated, as the
specification allows; a receiver holding either secret accepts the delivery.
"""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signature_header(event_id: str, timestamp: datetime, body: str, keys: list[str]) -> str:
    """The ``webhook-signature`` value: one ``v1,<sig>`` per secret in ``keys``."""
    return " ".join(Webhook(key).sign(event_id, timestamp, body) for key in keys)


def headers(event_id: str, timestamp: datetime, body: str, keys: list[str]) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt (``timestamp`` is the send time). A
    naive time (``USE_TZ = False``: the local time) is made aware first: the library signs a naive
    time as UTC, while the header would read it as local, and no signature would verify."""
    if timestamp.tzinfo is None:
        timestamp = timestamp.astimezone(UTC)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signature_header(event_id, timestamp, body, keys),
    }
