"""Device tokens and application keys: generated here, stored only as a hash, looked up by hash.

The secrets are 32 random bytes (256 bits) from ``secrets``. A slow password KDF (PBKDF2, argon2)
defends low-entropy human passwords against guessing; against a 256-bit random secret a single
SHA-256 is already beyond brute force, and it lets every request find its credential with one
indexed lookup instead of a KDF run per request. The stored hash is compared again with
``hmac.compare_digest`` so the final check does not leak timing.
"""

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now

from qprint.models import ApplicationKey, Device

SECRET_BYTES = 32
#: ``last_used_at`` is written at most this often per key.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def new_secret() -> str:
    """A fresh secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(SECRET_BYTES)


def hash_secret(secret: str) -> str:
    """The SHA-256 hex digest stored in place of ``secret``."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def device_for_token(token: str) -> Device | None:
    """The device this token belongs to, enabled or not (the caller answers 403 if disabled)."""
    if not token:
        return None
    digest = hash_secret(token)
    device = Device.objects.filter(token_hash=digest).first()
    if device is None or not hmac.compare_digest(device.token_hash, digest):
        return None
    return device


def key_for_secret(secret: str) -> ApplicationKey | None:
    """The live (not revoked) application key for ``secret``; records when it was last used.

    ``last_used_at`` is written at most once a minute per key (judged in the same SELECT, on the
    database clock), so a busy key does not turn every request into a write.
    """
    if not secret:
        return None
    digest = hash_secret(secret)
    key = (
        ApplicationKey.objects.filter(key_hash=digest, revoked=False)
        .annotate(
            use_is_stale=ExpressionWrapper(
                Q(last_used_at__isnull=True) | Q(last_used_at__lt=Now() - LAST_USED_RESOLUTION),
                output_field=BooleanField(),
            )
        )
        .first()
    )
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        return None
    if key.use_is_stale:
        ApplicationKey.objects.filter(pk=key.pk).update(last_used_at=Now())
    return key
