"""Device tokens and application keys: made, rotated and revoked here, stored only as a hash,
looked up by hash.

The secrets are 32 random bytes (256 bits) from ``secrets``. A slow password KDF (PBKDF2, argon2)
defends low-entropy human passwords against guessing; against a 256-bit random secret a single
SHA-256 is already beyond brute force, and it lets every request find its credential with one
indexed lookup instead of a KDF run per request. The stored hash is compared again with
``hmac.compare_digest`` so the final check does not leak timing.
"""

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import BooleanField, Exists, ExpressionWrapper, Q
from django.db.models.functions import Now

from qprint.domain import inputs, throttle
from qprint.domain.wakeups import wake_after_commit
from qprint.errors import Conflict, Invalid, NotFound
from qprint.models import ApplicationKey, Device

logger = logging.getLogger("qprint.credentials")

SECRET_BYTES = 32
#: ``last_used_at`` is written at most this often per key.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def new_secret() -> str:
    """A fresh secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(SECRET_BYTES)


def hash_secret(secret: str) -> str:
    """The SHA-256 hex digest stored in place of ``secret``."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def device_for_token(token: str, *, throttled: Exists | None = None) -> Device | None:
    """The device this token belongs to, enabled or not (the caller answers 403 if disabled).
    ``throttled``: the throttle's ``EXISTS`` (:func:`authenticate`), annotated in the same
    SELECT."""
    if not token:
        return None
    digest = hash_secret(token)
    devices = Device.objects.filter(token_hash=digest)
    if throttled is not None:
        devices = devices.annotate(throttled=throttled)
    device = devices.first()
    if device is None or not hmac.compare_digest(device.token_hash, digest):
        return None
    return device


def authenticate(source: str, secret: str, lookup: Callable[..., Any], kind: str) -> Any:
    """The principal ``lookup(secret)`` finds, through the throttle of failed authentications
    (:mod:`qprint.domain.throttle`): :class:`~qprint.errors.RateLimited` once ``source`` or the
    secret's prefix failed too often (even for a right secret), ``None`` for an unknown secret
    (counted). The throttle's check rides on the lookup's own SELECT."""
    principal = lookup(secret, throttled=throttle.throttled(source, secret))
    if principal is not None and not principal.throttled:
        return principal
    refusal = throttle.refusal(source, secret)
    if refusal is not None:
        raise refusal
    if principal is not None:  # the window ended between the two statements
        return principal
    throttle.record_failure(source, secret, kind)
    return None


def key_for_secret(secret: str, *, throttled: Exists | None = None) -> ApplicationKey | None:
    """The live (not revoked) application key for ``secret``; records when it was last used.

    ``last_used_at`` is written at most once a minute per key (judged in the same SELECT, on the
    database clock), so a busy key does not turn every request into a write. ``throttled``: the
    throttle's ``EXISTS`` (:func:`authenticate`), annotated in the same SELECT.
    """
    if not secret:
        return None
    digest = hash_secret(secret)
    keys = ApplicationKey.objects.filter(key_hash=digest, revoked=False).annotate(
        use_is_stale=ExpressionWrapper(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=Now() - LAST_USED_RESOLUTION),
            output_field=BooleanField(),
        )
    )
    if throttled is not None:
        keys = keys.annotate(throttled=throttled)
    key = keys.first()
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        return None
    if key.use_is_stale and not getattr(key, "throttled", False):
        ApplicationKey.objects.filter(pk=key.pk).update(last_used_at=Now())
    return key


def _device_id(device: Device | int) -> int:
    return device.pk if isinstance(device, Device) else int(device)


def create_device(tenant: str, name: str, *, description: str = "") -> tuple[Device, str]:
    """Register a device; returns it and its token (shown once, only its hash is stored)."""
    tenant, name = inputs.text("tenant", tenant, 100), inputs.text("name", name, 150)
    if not tenant or not name:
        raise Invalid(message="A device needs a tenant and a name.")
    description = inputs.text("description", description, 10000)
    token = new_secret()
    try:
        with transaction.atomic():
            device = Device.objects.create(
                tenant=tenant,
                name=name,
                description=description,
                token_hash=hash_secret(token),
            )
    except IntegrityError:
        raise Conflict("device_exists", f"Device {tenant}/{name} already exists.") from None
    logger.info("device_created device=%s", device)
    return device, token


def rotate_device_token(device: Device | int) -> str:
    """Give the device a new token; the old one stops working at once (its socket is told)."""
    device_id = _device_id(device)
    token = new_secret()
    with transaction.atomic():
        target = Device.objects.select_for_update(no_key=True).filter(pk=device_id).first()
        if target is None:
            raise NotFound("unknown_device", "No such device.")
        Device.objects.filter(pk=device_id).update(token_hash=hash_secret(token))
        wake_after_commit(target.tenant, target.pk, "token_rotated")
    logger.info("device_token_rotated device=%s", target)
    return token


def create_application_key(tenant: str, name: str) -> tuple[ApplicationKey, str]:
    """Create an application key for ``tenant``; returns it and the secret (shown once)."""
    tenant, name = inputs.text("tenant", tenant, 100), inputs.text("name", name, 150)
    if not tenant or not name:
        raise Invalid(message="A key needs a tenant and a name.")
    secret = new_secret()
    try:
        with transaction.atomic():
            key = ApplicationKey.objects.create(
                tenant=tenant, name=name, key_hash=hash_secret(secret)
            )
    except IntegrityError:
        raise Conflict("key_exists", f"A live key {tenant}/{name} already exists.") from None
    logger.info("appkey_created tenant=%s name=%s", tenant, name)
    return key, secret


def revoke_application_key(tenant: str, name: str) -> ApplicationKey:
    """Revoke the live key ``name`` of ``tenant``; it stops working at once."""
    with transaction.atomic():
        key = (
            ApplicationKey.objects.select_for_update()
            .filter(tenant=tenant, name=name, revoked=False)
            .first()
        )
        if key is None:
            raise NotFound("not_found", f"No live key named {tenant}/{name}.")
        ApplicationKey.objects.filter(pk=key.pk).update(revoked=True)
        key.revoked = True
    logger.info("appkey_revoked tenant=%s name=%s", tenant, name)
    return key
