"""Rows for tests: devices (with their token), application keys, a live ready connection, a
device's history of finished jobs.

The claim needs a device with a live ready connection; outside the realtime tests we set the four
connection columns directly, as the connection record would after a ``state`` frame.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.db.models import F
from django.db.models.functions import Now
from django.urls import reverse

from qprint.domain import credentials
from qprint.models import ApplicationKey, Device, PrintJob


@dataclass
class DeviceWithToken:
    device: Device
    token: str

    @property
    def auth(self) -> dict[str, str]:
        """Headers for the test client: ``client.post(url, **dev.auth)``."""
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}


@dataclass
class KeyWithSecret:
    key: ApplicationKey
    secret: str

    @property
    def auth(self) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.secret}"}


def make_device(tenant: str = "acme", name: str = "front-desk", **fields) -> DeviceWithToken:
    token = credentials.new_secret()
    device = Device.objects.create(
        tenant=tenant, name=name, token_hash=credentials.hash_secret(token), **fields
    )
    return DeviceWithToken(device, token)


def make_key(tenant: str = "acme", name: str = "backend", **fields) -> KeyWithSecret:
    secret = credentials.new_secret()
    key = ApplicationKey.objects.create(
        tenant=tenant, name=name, key_hash=credentials.hash_secret(secret), **fields
    )
    return KeyWithSecret(key, secret)


def connect(device: Device, node: str = "node-test", lease_seconds: int = 300) -> Device:
    """Give ``device`` a live, ready connection with its control and settings applied."""
    Device.objects.filter(pk=device.pk).update(
        connection_id=uuid.uuid4(),
        connection_node=node,
        connection_ready=True,
        connection_lease_expires_at=Now() + timedelta(seconds=lease_seconds),
        control_applied_revision=F("control_revision"),
        settings_applied_revision=F("settings_revision"),
        last_seen_at=Now(),
    )
    device.refresh_from_db()
    return device


def disconnect(device: Device) -> Device:
    Device.objects.filter(pk=device.pk).update(
        connection_id=None,
        connection_node="",
        connection_ready=False,
        connection_lease_expires_at=None,
    )
    device.refresh_from_db()
    return device


def submitted_and_claimed(
    client,
    key: KeyWithSecret,
    device: DeviceWithToken,
    content: bytes,
    content_type: str = "application/pdf",
):
    """A job submitted over the application API with ``key`` for ``device`` (connected), then
    claimed by the device over its HTTP API: ``(job object, assignment)``."""
    job = client.post(
        reverse("qprint:jobs"),
        {
            "device": device.device.name,
            "content_type": content_type,
            "content_base64": base64.b64encode(content).decode(),
        },
        content_type="application/json",
        **key.auth,
    ).json()
    assignment = client.post(reverse("qprint:device-claim"), **device.auth).json()
    return job, assignment


def finished_jobs(device: Device, count: int, status: str = "PRINTED") -> None:
    """``count`` finished jobs (``status``) of ``device``, its history, a minute apart, the newest
    an hour ago, in one statement (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {PrintJob._meta.db_table}
                (id, tenant, device_id, title, content_type, size, sha256, options, priority,
                 status, status_reason, idempotency_fingerprint, claim_id, claim_node, attempts,
                 cancel_requested, submitted_by, created_at, claimed_at, received_at, finished_at)
            SELECT gen_random_uuid(), %s, %s, '', 'application/pdf', 10, repeat('0', 64), '{{}}',
                   0, %s, '', '', gen_random_uuid(), '', 1, false, '', at, at, at, at
            FROM (SELECT now() - interval '1 hour' - n * interval '1 minute' AS at
                  FROM generate_series(1, %s) AS n) AS history
            """,
            [device.tenant, device.pk, status, count],
        )
